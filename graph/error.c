/* Thread-local error message: set by gf_error, read by gf_last_error. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gf_graph.h"

static _Thread_local char msg[1024];

const char *gf_last_error(void)
{
    return msg[0] ? msg : "no error";
}

/* Control bytes from untrusted names become \xNN: a message stays one
 * line and cannot drive the terminal. */
static void escape_controls(void)
{
    char out[sizeof(msg)];
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && k + 5 < sizeof(out); p++) {
        if (*p < 0x20 || *p == 0x7f)
            k += (size_t)snprintf(out + k, sizeof(out) - k, "\\x%02x", *p);
        else
            out[k++] = (char)*p;
    }
    out[k] = 0;
    memcpy(msg, out, k + 1);
}

enum gf_status gf_error(enum gf_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    escape_controls();
    return st;
}

void gf_error_prefix(const char *prefix)
{
    char old[sizeof(msg)];
    memcpy(old, msg, sizeof(old));
    size_t n = strlen(prefix);
    if (n > sizeof(msg) / 2)
        n = sizeof(msg) / 2;
    memcpy(msg, prefix, n);
    memcpy(msg + n, ": ", 2);
    size_t rest = sizeof(msg) - n - 3;
    memcpy(msg + n + 2, old, rest);
    msg[sizeof(msg) - 1] = 0;
}

const char *gf_status_name(enum gf_status st)
{
    switch (st) {
    case GF_OK: return "ok";
    case GF_ERR_IO: return "i/o error";
    case GF_ERR_PARSE: return "malformed file";
    case GF_ERR_INVALID: return "invalid model";
    case GF_ERR_UNSUPPORTED: return "unsupported";
    case GF_ERR_NOMEM: return "out of memory";
    case GF_ERR_ARG: return "bad argument";
    case GF_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
