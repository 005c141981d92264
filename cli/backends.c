/*
 * graphfuse backends — the backends the registry lists, whether each is
 * built and available and why not, their devices, which of them each is
 * the default on, and what `--backend auto` picks.
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

/* One backend: its devices (and which it is the default on), or why it
 * has none. */
static void print_backend(const char *name)
{
    struct gf_device_info d[MAX_DEVICES];
    size_t n = gf_backend_devices(name, d, MAX_DEVICES);
    if (n == 0) {
        /* opening says why (not built, no platform, no device) */
        struct gf_backend *be;
        enum gf_status st = gf_backend_open(name, NULL, &be);
        const char *why = st != GF_OK ? gf_last_error() : "it lists no devices";
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "backend '%s' is not available: ", name);
        if (strncmp(why, prefix, strlen(prefix)) == 0)
            why += strlen(prefix);
        printf("%s: not available: %s\n", name, why);
        return;
    }
    printf("%s: available, %zu device%s\n", name, n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n && i < MAX_DEVICES; i++)
        print_device(&d[i]);
}

int cmd_backends(int argc, char **argv)
{
    /* -h / --help: main, from cli/help.c */
    if (argc > 0)
        return cli_usage("backends", "unexpected argument '%s'", argv[0]);
    for (size_t i = 0; gf_backend_name(i); i++)
        print_backend(gf_backend_name(i));
    struct gf_backend *be;
    enum gf_status st = gf_backend_open("auto", NULL, &be);
    if (st != GF_OK)
        return cli_fail(st);
    printf("default (--backend auto): %s on %s\n", be->ops->name, be->ops->device_name(be));
    return 0;
}
