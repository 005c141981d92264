/*
 * graphfuse — command-line front end.  Each subcommand is a few calls into
 * the library; this file parses arguments, prints, and maps statuses to
 * exit codes: 0 success, 1 a failed check, 2 bad usage or bad input,
 * 3 unsupported feature, 4 internal error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gf_graph.h"

enum { EXIT_CHECK = 1, EXIT_INPUT = 2, EXIT_UNSUPPORTED = 3, EXIT_INTERNAL = 4 };

static int exit_code(enum gf_status st)
{
    switch (st) {
    case GF_OK: return 0;
    case GF_ERR_UNSUPPORTED: return EXIT_UNSUPPORTED;
    case GF_ERR_INTERNAL: return EXIT_INTERNAL;
    default: return EXIT_INPUT;
    }
}

/* Prints the library's message and returns the exit code for `st`. */
static int fail(enum gf_status st)
{
    fprintf(stderr, "graphfuse: %s\n", gf_last_error());
    return exit_code(st);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "graphfuse: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see graphfuse --help)\n");
    return EXIT_INPUT;
}

/* ---- info ----------------------------------------------------------------- */

struct op_count {
    const char *op;
    const char *domain;
    int count;
};

static int cmp_count(const void *a, const void *b)
{
    const struct op_count *x = a, *y = b;
    if (x->count != y->count)
        return y->count - x->count;
    return strcmp(x->op, y->op);
}

static void count_ops(const struct gf_graph *g, struct op_count *c, size_t *n, size_t cap)
{
    for (const struct gf_node *nd = g->first; nd; nd = nd->next) {
        const char *d = nd->domain ? nd->domain : "";
        size_t i;
        for (i = 0; i < *n; i++)
            if (strcmp(c[i].op, nd->op_type) == 0 && strcmp(c[i].domain, d) == 0)
                break;
        if (i == *n && *n < cap)
            c[(*n)++] = (struct op_count){nd->op_type, d, 0};
        if (i < *n)
            c[i].count++;
        for (size_t a = 0; a < nd->n_attrs; a++) {
            const struct gf_attr *at = &nd->attrs[a];
            if (at->type == GF_ATTR_GRAPH && at->g)
                count_ops(at->g, c, n, cap);
            for (size_t k = 0; at->type == GF_ATTR_GRAPHS && k < at->n; k++)
                count_ops(at->graphs[k], c, n, cap);
        }
    }
}

static void print_values(const char *title, size_t n, struct gf_value *const *v)
{
    char shape[256];
    printf("%s (%zu):\n", title, n);
    for (size_t i = 0; i < n; i++) {
        const struct gf_type *t = &v[i]->type;
        printf("  %-32s %-9s %s\n", v[i]->name,
               t->kind == GF_TYPE_TENSOR ? gf_dtype_name(t->dtype) : "-",
               gf_type_format(t, shape, sizeof(shape)));
    }
}

static void human_bytes(size_t b, char *buf, size_t len)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static void print_external_files(const struct gf_graph *g)
{
    const char *seen[64];
    size_t n = 0;
    for (size_t i = 0; i < g->n_inits; i++) {
        const struct gf_external *e = g->inits[i]->init->ext;
        if (!e)
            continue;
        size_t k;
        for (k = 0; k < n; k++)
            if (strcmp(seen[k], e->location) == 0)
                break;
        if (k == n && n < 64)
            seen[n++] = e->location;
    }
    printf("external data files: %zu\n", n);
    for (size_t k = 0; k < n; k++)
        printf("  %s\n", seen[k]);
}

static int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1])
            return usage_error("info: unknown option '%s'", argv[i]);
        if (path)
            return usage_error("info: more than one model given ('%s')", argv[i]);
        path = argv[i];
    }
    if (!path)
        return usage_error("info: no model given%s", "");
    struct gf_model *m;
    enum gf_status st = gf_model_load(path, NULL, &m);
    if (st != GF_OK)
        return fail(st);
    st = gf_graph_infer_shapes(m->graph);
    if (st != GF_OK) {
        gf_error_prefix(path);
        gf_model_free(m);
        return fail(st);
    }
    printf("model: %s\n", path);
    printf("producer: %s %s\n", m->producer_name ? m->producer_name : "(none)",
           m->producer_version ? m->producer_version : "");
    printf("ir_version: %lld\n", (long long)m->ir_version);
    printf("opsets:");
    for (size_t i = 0; i < m->n_opsets; i++)
        printf(" %s=%lld", m->opsets[i].domain && *m->opsets[i].domain ? m->opsets[i].domain
                                                                       : "ai.onnx",
               (long long)m->opsets[i].version);
    printf("\n");
    if (m->n_functions)
        printf("model-local functions: %zu\n", m->n_functions);
    print_values("inputs", m->graph->n_inputs, m->graph->inputs);
    print_values("outputs", m->graph->n_outputs, m->graph->outputs);
    size_t elems, bytes;
    char hb[32];
    gf_model_param_count(m, &elems, &bytes);
    human_bytes(bytes, hb, sizeof(hb));
    printf("parameters: %zu in %zu initializers, %zu bytes (%s)\n", elems, m->graph->n_inits,
           bytes, hb);
    print_external_files(m->graph);
    struct op_count counts[512];
    size_t n = 0;
    count_ops(m->graph, counts, &n, 512);
    qsort(counts, n, sizeof(counts[0]), cmp_count);
    printf("nodes: %zu (op types: %zu)\n", m->graph->n_nodes, n);
    for (size_t i = 0; i < n; i++)
        printf("  %6d  %s%s%s\n", counts[i].count, counts[i].domain,
               *counts[i].domain ? "." : "", counts[i].op);
    gf_model_free(m);
    return 0;
}

/* ---- dump ----------------------------------------------------------------- */

static int cmd_dump(int argc, char **argv)
{
    const char *path = NULL, *out = NULL, *format = "text";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--format") == 0 || strcmp(a, "-f") == 0) {
            if (++i == argc)
                return usage_error("dump: %s needs a value", a);
            format = argv[i];
        } else if (strncmp(a, "--format=", 9) == 0) {
            format = a + 9;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (++i == argc)
                return usage_error("dump: %s needs a file name", a);
            out = argv[i];
        } else if (a[0] == '-' && a[1]) {
            return usage_error("dump: unknown option '%s'", a);
        } else if (path) {
            return usage_error("dump: more than one model given ('%s')", a);
        } else {
            path = a;
        }
    }
    enum gf_dump_format fmt;
    if (strcmp(format, "text") == 0)
        fmt = GF_DUMP_TEXT;
    else if (strcmp(format, "dot") == 0)
        fmt = GF_DUMP_DOT;
    else if (strcmp(format, "json") == 0)
        fmt = GF_DUMP_JSON;
    else
        return usage_error("dump: unknown format '%s' (text, dot or json)", format);
    if (!path)
        return usage_error("dump: no model given%s", "");
    struct gf_model *m;
    enum gf_status st = gf_model_load(path, NULL, &m);
    if (st != GF_OK)
        return fail(st);
    st = gf_graph_infer_shapes(m->graph);
    if (st != GF_OK) {
        gf_error_prefix(path);
        gf_model_free(m);
        return fail(st);
    }
    FILE *f = stdout;
    char *tmp = NULL;
    if (out) {
        /* write beside the target, rename at the end: no partial file */
        size_t n = strlen(out) + 16;
        tmp = malloc(n);
        snprintf(tmp, n, "%s.tmp.XXXXXX", out);
        int fd = mkstemp(tmp);
        if (fd < 0 || !(f = fdopen(fd, "w"))) {
            fprintf(stderr, "graphfuse: %s: cannot create file: %s\n", out, strerror(errno));
            if (fd >= 0)
                close(fd), unlink(tmp);
            free(tmp);
            gf_model_free(m);
            return EXIT_INPUT;
        }
    }
    st = gf_model_dump(m, fmt, f);
    if (out) {
        bool ok = st == GF_OK && fflush(f) == 0;
        ok = fclose(f) == 0 && ok;
        if (ok && rename(tmp, out) != 0)
            ok = false;
        if (!ok) {
            unlink(tmp);
            if (st == GF_OK)
                st = gf_error(GF_ERR_IO, "%s: write failed: %s", out, strerror(errno));
        }
        free(tmp);
    } else if (fflush(stdout) != 0 && st == GF_OK) {
        st = gf_error(GF_ERR_IO, "writing to standard output failed");
    }
    gf_model_free(m);
    return st == GF_OK ? 0 : fail(st);
}

/* ---- convert ---------------------------------------------------------------- */

static int cmd_convert(int argc, char **argv)
{
    const char *path = NULL, *out = NULL;
    struct gf_save_opts so = {0};
    bool infer = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (++i == argc)
                return usage_error("convert: %s needs a file name", a);
            out = argv[i];
        } else if (strcmp(a, "--external-data") == 0) {
            so.external_data = true;
        } else if (strncmp(a, "--external-threshold=", 21) == 0) {
            char *end;
            long long v = strtoll(a + 21, &end, 10);
            if (*end || v <= 0)
                return usage_error("convert: bad threshold '%s'", a + 21);
            so.external_threshold = (size_t)v;
        } else if (strcmp(a, "--infer-shapes") == 0) {
            infer = true;
        } else if (a[0] == '-' && a[1]) {
            return usage_error("convert: unknown option '%s'", a);
        } else if (path) {
            return usage_error("convert: more than one model given ('%s')", a);
        } else {
            path = a;
        }
    }
    if (!path || !out)
        return usage_error("convert: needs MODEL and -o OUT%s", "");
    struct gf_model *m;
    enum gf_status st = gf_model_load(path, NULL, &m);
    if (st != GF_OK)
        return fail(st);
    if (infer && (st = gf_graph_infer_shapes(m->graph)) != GF_OK)
        gf_error_prefix(path);
    if (st == GF_OK)
        st = gf_model_save(m, out, &so);
    gf_model_free(m);
    return st == GF_OK ? 0 : fail(st);
}

/* ---- main ----------------------------------------------------------------- */

static const char usage[] =
    "usage: graphfuse COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  info MODEL                      producer, opsets, inputs/outputs, op histogram,\n"
    "                                  parameters, external-data files\n"
    "  dump MODEL [--format text|dot|json] [-o FILE]\n"
    "                                  the graph, one line per node / Graphviz / JSON\n"
    "  convert MODEL -o OUT [--external-data] [--external-threshold=BYTES]\n"
    "          [--infer-shapes]        rewrite a model (atomically); with\n"
    "                                  --external-data, initializers of BYTES (1024)\n"
    "                                  or more go to the side file OUT.data\n"
    "\n"
    "options:\n"
    "  -h, --help                      this help\n"
    "  -V, --version                   print the version\n"
    "\n"
    "exit codes: 0 success, 1 a failed check, 2 bad usage or bad input,\n"
    "            3 unsupported feature, 4 internal error\n";

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"info", cmd_info},
    {"dump", cmd_dump},
    {"convert", cmd_convert},
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return EXIT_INPUT;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("graphfuse %s\n", GF_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].run(argc - 2, argv + 2);
    return usage_error("unknown command '%s'", cmd);
}
