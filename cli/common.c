/* Exit codes, messages and option values shared by the subcommands. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const run_opt_in[] = {"attention"};
const struct gf_fuse_opts cli_run_fuse_opts = {.enabled = run_opt_in, .n_enabled = 1};

int cli_exit_code(enum gf_status st)
{
    switch (st) {
    case GF_OK: return 0;
    case GF_ERR_UNSUPPORTED: return EXIT_UNSUPPORTED;
    case GF_ERR_INTERNAL: return EXIT_INTERNAL;
    default: return EXIT_INPUT;
    }
}

int cli_fail(enum gf_status st)
{
    fprintf(stderr, "graphfuse: %s\n", gf_last_error());
    return cli_exit_code(st);
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "graphfuse: ");
    if (cmd)
        fprintf(stderr, "%s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see graphfuse %s%s--help)\n", cmd ? cmd : "", cmd ? " " : "");
    va_end(ap);
    return EXIT_INPUT;
}

const char *cli_opt_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n])
        return NULL;
    if (*i + 1 == argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

const char *cli_opt_split(const char *arg, char *name, size_t cap)
{
    const char *eq = arg[0] == '-' ? strchr(arg, '=') : NULL;
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    snprintf(name, cap, "%.*s", (int)n, arg);
    return eq ? eq + 1 : NULL;
}

bool cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

bool cli_parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end), mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024.0 * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1024.0 * 1024 * 1024, end++;
    /* a finite size of at least one byte that fits size_t: NaN, inf, 1e30
     * or 0.5 must not turn into 0 ("no limit") or overflow the cast */
    double bytes = v * mul;
    if (*end || end == s || !(bytes >= 1) || !(bytes < 18446744073709551616.0) ||
        (double)SIZE_MAX < bytes)
        return false;
    *out = (size_t)bytes;
    return true;
}

bool cli_parse_dim(const char *s, struct cli_dim *out)
{
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || (size_t)(eq - s) >= sizeof(out->name))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    if (errno || end == eq + 1 || *end || v < 1)
        return false;
    memcpy(out->name, s, (size_t)(eq - s));
    out->name[eq - s] = 0;
    out->size = v;
    return true;
}

int64_t cli_dim_size(const struct cli_dim *dims, int n, const char *name, int64_t fallback)
{
    for (int i = 0; name && i < n; i++)
        if (strcmp(dims[i].name, name) == 0)
            return dims[i].size;
    return fallback;
}
