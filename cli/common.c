/* Exit codes, messages and option values shared by the subcommands. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

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

int cli_usage(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "graphfuse: ");
    if (cmd)
        fprintf(stderr, "%s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see graphfuse --help)\n");
    return EXIT_INPUT;
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
    if (*end || !(v >= 0) || end == s)
        return false;
    *out = (size_t)(v * mul);
    return true;
}
