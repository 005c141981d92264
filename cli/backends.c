/*
 * graphfuse backends — the backends compiled in, whether each is available
 * and why not, their devices, and which one `--backend auto` picks.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gf_kernels.h"

#define MAX_DEVICES 32

static void print_device(const struct gf_device_info *d)
{
    /* opt-in: this backend runs on the device only when asked for by name */
    printf("  %s (%s, %s)\n", d->name, d->is_gpu ? "GPU" : "CPU",
           d->is_default ? "default" : "opt-in");
    printf("      platform %s, %.1f GiB, %d compute units, driver %s\n", d->platform,
           (double)d->memory / (1024.0 * 1024.0 * 1024.0), d->compute_units, d->driver);
}

/* One backend: its devices, or why it has none. */
static void print_backend(const struct gf_backend_ops *ops)
{
    struct gf_device_info d[MAX_DEVICES];
    size_t n = ops->list_devices(d, MAX_DEVICES);
    if (n == 0) {
        /* opening says why (no platform, no device) */
        struct gf_backend *be;
        enum gf_status st = gf_backend_open(ops->name, NULL, &be);
        const char *why = st != GF_OK ? gf_last_error() : "it lists no devices";
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "backend '%s' is not available: ", ops->name);
        if (strncmp(why, prefix, strlen(prefix)) == 0)
            why += strlen(prefix);
        printf("%s: not available: %s\n", ops->name, why);
        return;
    }
    printf("%s: available, %zu device%s\n", ops->name, n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n && i < MAX_DEVICES; i++)
        print_device(&d[i]);
}

int cmd_backends(int argc, char **argv)
{
    if (argc > 0 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
        printf("usage: graphfuse backends\n"
               "lists the backends built in, their devices, and the one --backend auto "
               "picks\n");
        return 0;
    }
    if (argc > 0)
        return cli_usage("backends", "unexpected argument '%s'", argv[0]);
    size_t n;
    const struct gf_backend_ops *const *all = gf_backend_all(&n);
    for (size_t i = 0; i < n; i++)
        print_backend(all[i]);
    struct gf_backend *be;
    enum gf_status st = gf_backend_open("auto", NULL, &be);
    if (st != GF_OK)
        return cli_fail(st);
    printf("default (--backend auto): %s on %s\n", be->ops->name, be->ops->device_name(be));
    return 0;
}
