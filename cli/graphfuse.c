/*
 * graphfuse — command-line front end.  Each subcommand is a few calls into
 * the library; this file parses arguments, prints, and maps statuses to
 * exit codes: 0 success, 1 a failed check, 2 bad usage or bad input,
 * 3 unsupported feature, 4 internal error.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

#include <cblas.h>

#include "cli.h"
#include "gf_exec.h"
#include "gf_graph.h"
#include "gf_passes.h"




/* Loads a model and infers its shapes; errors name the file. */
static enum gf_status load_with_shapes(const char *path, struct gf_model **m)
{
    enum gf_status st = gf_model_load(path, NULL, m);
    if (st == GF_OK && (st = gf_graph_infer_shapes((*m)->graph)) != GF_OK) {
        gf_error_prefix(path);
        gf_model_free(*m);
        *m = NULL;
    }
    return st;
}

/* Cleanup then fusion, in memory (optimize, run --fuse, test --fuse). */
enum gf_status cli_optimize_model(struct gf_model *m, const char *path,
                                  const struct gf_fuse_opts *fo, struct gf_fuse_report *rep,
                                  struct gf_cleanup_stats *cs)
{
    struct gf_cleanup_stats scratch;
    enum gf_status st = gf_graph_infer_shapes(m->graph);
    if (st == GF_OK)
        st = gf_pass_cleanup(m->graph, &(struct gf_cleanup_opts){.eval = gf_exec_eval_node},
                             cs ? cs : &scratch);
    if (st == GF_OK)
        st = gf_pass_fuse(m, fo, rep);
    if (st != GF_OK && path)
        gf_error_prefix(path);
    return st;
}

/* --precision: the autocast pass (passes/precision.c), before fusion. */
enum gf_status cli_apply_precision(struct gf_model *m, const char *path, enum gf_precision p)
{
    enum gf_status st = gf_pass_precision(m, p, NULL);
    if (st != GF_OK && path)
        gf_error_prefix(path);
    return st;
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
            return cli_usage("info", "unknown option '%s'", argv[i]);
        if (path)
            return cli_usage("info", "more than one model given ('%s')", argv[i]);
        path = argv[i];
    }
    if (!path)
        return cli_usage("info", "no model given");
    struct gf_model *m;
    enum gf_status st = load_with_shapes(path, &m);
    if (st != GF_OK)
        return cli_fail(st);
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
        const char *a = argv[i], *v;
        bool missing = false;
        if ((v = cli_opt_value(argc, argv, &i, "--format", &missing)) ||
            (v = cli_opt_value(argc, argv, &i, "-f", &missing))) {
            format = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "-o", &missing)) ||
                   (v = cli_opt_value(argc, argv, &i, "--output", &missing))) {
            out = v;
        } else if (missing) {
            return cli_usage("dump", "%s needs a value", a);
        } else if (a[0] == '-' && a[1]) {
            return cli_usage("dump", "unknown option '%s'", a);
        } else if (path) {
            return cli_usage("dump", "more than one model given ('%s')", a);
        } else {
            path = a;
        }
    }
    enum gf_dump_format fmt;
    if (!gf_dump_format_parse(format, &fmt))
        return cli_usage("dump", "--format: unknown format '%s' (text, dot or json)", format);
    if (!path)
        return cli_usage("dump", "no model given");
    struct gf_model *m;
    enum gf_status st = load_with_shapes(path, &m);
    if (st != GF_OK)
        return cli_fail(st);
    if (out)
        st = gf_model_dump_file(m, fmt, out);
    else if ((st = gf_model_dump(m, fmt, stdout)) == GF_OK && fflush(stdout) != 0) {
        st = gf_error(GF_ERR_IO, "writing to standard output failed");
    }
    gf_model_free(m);
    return st == GF_OK ? 0 : cli_fail(st);
}

/* ---- convert ---------------------------------------------------------------- */

static int cmd_convert(int argc, char **argv)
{
    const char *path = NULL, *out = NULL;
    struct gf_save_opts so = {0};
    bool infer = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        bool missing = false;
        if ((v = cli_opt_value(argc, argv, &i, "-o", &missing)) ||
            (v = cli_opt_value(argc, argv, &i, "--output", &missing))) {
            out = v;
        } else if (strcmp(a, "--external-data") == 0) {
            so.external_data = true;
        } else if ((v = cli_opt_value(argc, argv, &i, "--external-threshold", &missing))) {
            char *end;
            long long t = strtoll(v, &end, 10);
            if (*end || end == v || t <= 0)
                return cli_usage("convert", "--external-threshold: bad size '%s' (bytes, 1 "
                                 "or more)", v);
            so.external_threshold = (size_t)t;
        } else if (missing) {
            return cli_usage("convert", "%s needs a value", a);
        } else if (strcmp(a, "--infer-shapes") == 0) {
            infer = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage("convert", "unknown option '%s'", a);
        } else if (path) {
            return cli_usage("convert", "more than one model given ('%s')", a);
        } else {
            path = a;
        }
    }
    if (!path || !out)
        return cli_usage("convert", "needs MODEL and -o OUT");
    struct gf_model *m;
    enum gf_status st = gf_model_load(path, NULL, &m);
    if (st != GF_OK)
        return cli_fail(st);
    if (infer && (st = gf_graph_infer_shapes(m->graph)) != GF_OK)
        gf_error_prefix(path);
    if (st == GF_OK)
        st = gf_model_save(m, out, &so);
    gf_model_free(m);
    return st == GF_OK ? 0 : cli_fail(st);
}

/* ---- optimize --------------------------------------------------------------- */

static void list_patterns(FILE *f)
{
    for (size_t i = 0; i < gf_fuse_pattern_count(); i++)
        fprintf(f, "%s%s", i ? ", " : "", gf_fuse_pattern_name(i));
}

static size_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
}

struct optimize_args {
    const char *path, *out, *report, *explain;
    enum gf_fuse_target target;
    enum gf_precision precision;
    const char *disabled[128];
    size_t n_disabled;
    const char *drops[64];
    size_t n_drops;
    const char *enabled[8];
    size_t n_enabled;
    char *lists[64]; /* copies of the --disable arguments, split in place */
    size_t n_lists;
};

/* Splits "a,b" into disabled names; each must be a pattern. */
static int add_disabled(struct optimize_args *a, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy || a->n_lists == 64) {
        free(copy);
        return cli_usage("optimize", "too many --disable options");
    }
    a->lists[a->n_lists++] = copy;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!gf_fuse_pattern_known(t)) {
            fprintf(stderr, "graphfuse: optimize: --disable: unknown pattern '%s' (patterns: ",
                    t);
            list_patterns(stderr);
            fprintf(stderr, ")\n");
            return EXIT_INPUT;
        }
        if (a->n_disabled < 128)
            a->disabled[a->n_disabled++] = t;
    }
    return 0;
}

static int parse_optimize(int argc, char **argv, struct optimize_args *a)
{
    for (int i = 0; i < argc; i++) {
        bool missing = false;
        const char *v;
        int rc;
        if ((v = cli_opt_value(argc, argv, &i, "-o", &missing)) ||
            (v = cli_opt_value(argc, argv, &i, "--output", &missing))) {
            a->out = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--target", &missing))) {
            if (!gf_fuse_target_parse(v, &a->target))
                return cli_usage("optimize", "--target: unknown target '%s' (graphfuse, ort or onnx)", v);
        } else if ((v = cli_opt_value(argc, argv, &i, "--disable", &missing))) {
            if ((rc = add_disabled(a, v)) != 0)
                return rc;
        } else if ((v = cli_opt_value(argc, argv, &i, "--enable", &missing))) {
            if (!gf_fuse_pattern_opt_in(v))
                return cli_usage("optimize", "--enable: '%s' is not an opt-in pattern (attention)", v);
            if (a->n_enabled < 8)
                a->enabled[a->n_enabled++] = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--precision", &missing))) {
            if (!gf_precision_parse(v, &a->precision))
                return cli_usage("optimize", "--precision: unknown precision '%s' (fp32, tf32, bf16 "
                                 "or fp16)", v);
        } else if ((v = cli_opt_value(argc, argv, &i, "--report", &missing))) {
            if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0)
                return cli_usage("optimize", "--report: unknown report format '%s' (text or json)", v);
            a->report = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--explain", &missing))) {
            if (!gf_fuse_pattern_known(v))
                return cli_usage("optimize", "--explain: unknown pattern '%s'", v);
            a->explain = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--drop-output", &missing))) {
            if (a->n_drops == 64)
                return cli_usage("optimize", "too many --drop-output options");
            a->drops[a->n_drops++] = v;
        } else if (missing) {
            return cli_usage("optimize", "%s needs a value", argv[i]);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage("optimize", "unknown option '%s'", argv[i]);
        } else if (a->path) {
            return cli_usage("optimize", "more than one model given ('%s')", argv[i]);
        } else {
            a->path = argv[i];
        }
    }
    if (!a->path || !a->out)
        return cli_usage("optimize", "needs MODEL and -o OUT");
    return 0;
}

static int cmd_optimize(int argc, char **argv)
{
    struct optimize_args a = {.report = "text"};
    int rc = parse_optimize(argc, argv, &a);
    struct gf_model *m = NULL;
    struct gf_fuse_report rep;
    struct gf_op_census input = {0};
    struct gf_cleanup_stats cs;
    enum gf_status st = GF_OK;
    memset(&rep, 0, sizeof(rep));
    if (rc == 0 && (st = gf_model_load(a.path, NULL, &m)) != GF_OK)
        rc = cli_fail(st);
    for (size_t i = 0; rc == 0 && i < a.n_drops; i++)
        if ((st = gf_pass_drop_output(m->graph, a.drops[i])) != GF_OK) {
            gf_error_prefix(a.path);
            rc = cli_fail(st);
        }
    if (rc == 0 && (st = gf_op_census_take(&input, m->graph)) != GF_OK)
        rc = cli_fail(st);
    /* the weights' Casts fold into bf16 / fp16 initializers in the cleanup */
    if (rc == 0 && (st = cli_apply_precision(m, a.path, a.precision)) != GF_OK)
        rc = cli_fail(st);
    struct gf_fuse_opts fo = {.disabled = a.disabled, .n_disabled = a.n_disabled,
                              .enabled = a.enabled, .n_enabled = a.n_enabled,
                              .explain = a.explain, .target = a.target};
    if (rc == 0 && (st = cli_optimize_model(m, a.path, &fo, &rep, &cs)) != GF_OK)
        rc = cli_fail(st);
    if (rc == 0 && (st = gf_model_save(m, a.out, NULL)) != GF_OK)
        rc = cli_fail(st);
    if (rc == 0) {
        /* the table compares the output file with the input file */
        gf_op_census_free(&rep.before);
        rep.before = input;
        input = (struct gf_op_census){0};
        rep.bytes_before = file_size(a.path);
        rep.bytes_after = file_size(a.out);
        rep.have_cleanup = true;
        rep.cleanup = cs;
        gf_fuse_report_print(&rep, stdout, strcmp(a.report, "json") == 0);
        if (fflush(stdout) != 0)
            rc = cli_fail(gf_error(GF_ERR_IO, "writing to standard output failed"));
    }
    gf_op_census_free(&input);
    gf_fuse_report_free(&rep);
    gf_model_free(m);
    for (size_t i = 0; i < a.n_lists; i++)
        free(a.lists[i]);
    return rc;
}

/* ---- run ------------------------------------------------------------------- */


/* Parses the options shared by run and test at argv[*i], moving *i onto
 * the last argument used; returns 1 when it was one, 0 when not, or an exit
 * code (>= 2) after a usage message. */
int cli_exec_option(const char *cmd, int argc, char **argv, int *i, struct gf_exec_opts *o,
                    enum gf_precision *prec)
{
    const char *a = argv[*i], *v;
    bool missing = false;
    if (strcmp(a, "--profile") == 0 || strcmp(a, "--autotune") == 0) {
        *(a[2] == 'p' ? &o->profile : &o->autotune) = true;
    } else if (strcmp(a, "--no-cuda-graph") == 0) {
        o->no_cuda_graph = true;
    } else if ((v = cli_opt_value(argc, argv, i, "--precision", &missing))) {
        if (!gf_precision_parse(v, prec))
            return cli_usage(cmd, "--precision: unknown precision '%s' (fp32, tf32, bf16 or "
                             "fp16)", v);
    } else if ((v = cli_opt_value(argc, argv, i, "--backend", &missing))) {
        o->backend = v;
    } else if ((v = cli_opt_value(argc, argv, i, "--device", &missing))) {
        o->device = v;
    } else if ((v = cli_opt_value(argc, argv, i, "--tune-cache", &missing))) {
        o->tune_cache = v;
    } else if ((v = cli_opt_value(argc, argv, i, "--threads", &missing))) {
        char *end;
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < 1 || n > 1024)
            return cli_usage(cmd, "--threads: bad thread count '%s' (1 or more)", v);
        o->n_threads = (int)n;
    } else if ((v = cli_opt_value(argc, argv, i, "--max-memory", &missing))) {
        if (!cli_parse_size(v, &o->max_memory))
            return cli_usage(cmd, "--max-memory: bad memory size '%s' "
                             "(a finite size of 1 byte or more, e.g. 512M)", v);
    } else if (missing) {
        return cli_usage(cmd, "%s needs a value", a);
    } else {
        return 0;
    }
    return 1;
}

static void print_tensor_summary(const struct gf_tensor *t)
{
    printf("  %s: %s[", t->name, gf_dtype_name(t->dtype));
    for (int d = 0; d < t->rank; d++)
        printf("%s%lld", d ? "," : "", (long long)t->dims[d]);
    printf("]");
    for (size_t i = 0; i < t->nelem && i < 6; i++)
        printf("%s%.6g", i ? " " : " = ", gf_tensor_get_f64(t, i));
    printf("%s\n", t->nelem > 6 ? " ..." : "");
}

static int write_outputs(const char *dir, struct gf_tensor **outs, size_t n)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "graphfuse: %s: cannot create folder: %s\n", dir, strerror(errno));
        return EXIT_INPUT;
    }
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/output_%zu.pb", dir, i);
        enum gf_status st = gf_tensor_save(outs[i], path);
        if (st != GF_OK)
            return cli_fail(st);
    }
    return 0;
}

static int cmd_run(int argc, char **argv)
{
    const char *path = NULL, *outdir = NULL;
    struct cli_inputs ia = {.dim_default = 1}; /* symbolic dims: --dim, else 1 */
    bool fuse = false;
    int repeat = 1;
    struct gf_exec_opts o = {0};
    enum gf_precision prec = GF_PRECISION_FP32;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        bool missing = false;
        int used = cli_exec_option("run", argc, argv, &i, &o, &prec);
        if (used > 1)
            return used;
        if (used) {
            continue;
        } else if (strcmp(a, "--fuse") == 0) {
            fuse = true;
        } else if ((v = cli_opt_value(argc, argv, &i, "--repeat", &missing))) {
            char *end;
            long r = strtol(v, &end, 10);
            if (end == v || *end || r < 1 || r > 1000000)
                return cli_usage("run", "--repeat: bad count '%s' (1 or more)", v);
            repeat = (int)r;
        } else if ((used = cli_input_option("run", argc, argv, &i, &ia)) != 0) {
            if (used > 1)
                return used;
        } else if ((v = cli_opt_value(argc, argv, &i, "--output-dir", &missing))) {
            outdir = v;
        } else if (missing) {
            return cli_usage("run", "%s needs a value", a);
        } else if (a[0] == '-' && a[1]) {
            return cli_usage("run", "unknown option '%s'", a);
        } else if (path) {
            return cli_usage("run", "more than one model given ('%s')", a);
        } else {
            path = a;
        }
    }
    if (!path)
        return cli_usage("run", "no model given");
    struct gf_model *m;
    enum gf_status st = gf_model_load(path, NULL, &m);
    if (st != GF_OK)
        return cli_fail(st);
    struct gf_session *s = NULL;
    int rc = 0;
    if ((st = cli_apply_precision(m, path, prec)) != GF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    if (fuse && (st = cli_optimize_model(m, path, &cli_run_fuse_opts, NULL, NULL)) != GF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    if ((st = gf_session_new(m, &o, &s)) != GF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    size_t n_in = gf_session_input_count(s);
    struct gf_tensor *in[CLI_MAX_INPUTS];
    if ((rc = cli_make_inputs(m, s, path, &ia, in)) != 0)
        goto out;
    struct gf_tensor **outs;
    size_t n_out;
    for (int r = 0; r < repeat; r++) /* the outputs and profile: the last run's */
        if ((st = gf_session_run(s, n_in, in, &outs, &n_out)) != GF_OK) {
            gf_error_prefix(path);
            rc = cli_fail(st);
            goto out;
        }
    printf("outputs:\n");
    for (size_t i = 0; i < n_out; i++)
        print_tensor_summary(outs[i]);
    gf_session_print_fallbacks(s, stderr);
    gf_session_print_tuning(s, stderr);
    if (o.profile)
        gf_session_print_profile(s, stdout);
    if (outdir)
        rc = write_outputs(outdir, outs, n_out);
out:
    gf_session_free(s);
    gf_model_free(m);
    return rc;
}

/* ---- test ------------------------------------------------------------------ */

struct op_tally {
    char op[64];
    int pass, fail, unsupported;
};

struct test_totals {
    int pass, fail, unsupported;
    struct op_tally ops[256];
    int n_ops;
};

static void tally(struct test_totals *t, const struct gf_model *m, int result)
{
    for (const struct gf_node *n = m->graph->first; n; n = n->next) {
        int i;
        for (i = 0; i < t->n_ops; i++)
            if (strcmp(t->ops[i].op, n->op_type) == 0)
                break;
        bool seen = false;
        for (const struct gf_node *p = m->graph->first; p != n; p = p->next)
            seen |= strcmp(p->op_type, n->op_type) == 0;
        if (seen)
            continue;
        if (i == t->n_ops) {
            if (t->n_ops == 256)
                continue;
            snprintf(t->ops[t->n_ops++].op, sizeof(t->ops[0].op), "%s", n->op_type);
        }
        if (result > 0)
            t->ops[i].pass++;
        else if (result == 0)
            t->ops[i].fail++;
        else
            t->ops[i].unsupported++;
    }
}

/* Loads test_data_set files "PREFIX_K.pb" (K = 0, 1, ...) from dir. */
size_t cli_load_set(struct gf_model *m, const char *dir, const char *prefix,
                    struct gf_tensor **t, size_t cap, enum gf_status *st)
{
    size_t n = 0;
    *st = GF_OK;
    for (; n < cap; n++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s_%zu.pb", dir, prefix, n);
        if (access(path, F_OK) != 0)
            break;
        if ((*st = gf_tensor_load(m, path, &t[n])) != GF_OK)
            break;
    }
    return n;
}

/* Runs one test folder; returns 1 pass, 0 fail, -1 unsupported. */
static int run_test_dir(const char *dir, const struct gf_exec_opts *o, bool fuse,
                        enum gf_precision prec, double rtol, double atol,
                        struct test_totals *tot)
{
    char path[4096], msg[1200] = "", name[512];
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    snprintf(name, sizeof(name), "%.*s", (int)len, dir);
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    struct gf_model *m;
    enum gf_status st = gf_model_load(path, NULL, &m);
    if (st != GF_OK) {
        printf("FAIL %s: %s\n", name, gf_last_error());
        return 0;
    }
    struct gf_session *s = NULL;
    int result = 1;
    double worst = 0;
    int sets = 0;
    if ((st = cli_apply_precision(m, NULL, prec)) != GF_OK)
        goto error;
    if (fuse && (st = cli_optimize_model(m, NULL, &cli_run_fuse_opts, NULL, NULL)) != GF_OK)
        goto error;
    if ((st = gf_session_new(m, o, &s)) != GF_OK)
        goto error;
    for (;; sets++) {
        char sd[4200];
        snprintf(sd, sizeof(sd), "%s/test_data_set_%d", dir, sets);
        DIR *d = opendir(sd);
        if (!d)
            break;
        closedir(d);
        struct gf_tensor *in[256] = {0}, *want[256] = {0}, **got;
        size_t n_in = cli_load_set(m, sd, "input", in, 256, &st), n_got;
        if (st != GF_OK)
            goto error;
        size_t n_want = cli_load_set(m, sd, "output", want, 256, &st);
        if (st != GF_OK)
            goto error;
        if ((st = gf_session_run(s, n_in, in, &got, &n_got)) != GF_OK)
            goto error;
        for (size_t i = 0; i < n_want && i < n_got; i++) {
            double w;
            if (want[i]->dtype == GF_UINT16 && got[i]->dtype == GF_BFLOAT16)
                want[i]->dtype = GF_BFLOAT16; /* bfloat16 recorded as uint16 */
            if (!gf_tensor_allclose(got[i], want[i], rtol, atol, &w)) {
                result = 0;
                snprintf(msg, sizeof(msg), " (set %d, output '%s')", sets, got[i]->name);
            }
            if (!(w <= worst))
                worst = w;
        }
        if (n_want != n_got) {
            result = 0;
            snprintf(msg, sizeof(msg), " (%zu outputs, %zu expected)", n_got, n_want);
        }
    }
    if (sets == 0) {
        result = -1;
        snprintf(msg, sizeof(msg), ": no test_data_set_* folder");
    }
    printf("%s %s: worst error %g%s\n", result > 0 ? "PASS" : result == 0 ? "FAIL" : "UNSUPPORTED",
           name, worst, msg);
    if (sets > 0)
        gf_session_print_fallbacks(s, stdout);
    if (o->profile && sets > 0)
        gf_session_print_profile(s, stdout);
    goto out;
error:
    result = st == GF_ERR_UNSUPPORTED ? -1 : 0;
    printf("%s %s: %s\n", result < 0 ? "UNSUPPORTED" : "FAIL", name, gf_last_error());
out:
    tally(tot, m, result);
    gf_session_free(s);
    gf_model_free(m);
    return result;
}

static int cmd_test(int argc, char **argv)
{
    double rtol = CLI_DEFAULT_RTOL, atol = CLI_DEFAULT_ATOL;
    bool by_op = false, fuse = false;
    struct gf_exec_opts o = {0};
    enum gf_precision prec = GF_PRECISION_FP32;
    const char *dirs[4096];
    int n_dirs = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int used = cli_exec_option("test", argc, argv, &i, &o, &prec);
        if (used > 1)
            return used;
        if (used) {
            continue;
        } else if ((used = cli_tolerance_option("test", argc, argv, &i, &rtol, &atol)) != 0) {
            if (used > 1)
                return used;
        } else if (strcmp(a, "--by-op") == 0) {
            by_op = true;
        } else if (strcmp(a, "--fuse") == 0) {
            fuse = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage("test", "unknown option '%s'", a);
        } else if (n_dirs < 4096) {
            dirs[n_dirs++] = a;
        }
    }
    if (!n_dirs)
        return cli_usage("test", "no test folder given");
    for (int i = 0; i < n_dirs; i++) {
        struct stat sb;
        if (stat(dirs[i], &sb) != 0 || !S_ISDIR(sb.st_mode))
            return cli_fail(gf_error(GF_ERR_IO, "%s: not a folder", dirs[i]));
    }
    struct test_totals *tot = calloc(1, sizeof(*tot));
    if (!tot)
        return cli_fail(gf_error(GF_ERR_NOMEM, "out of memory"));
    for (int i = 0; i < n_dirs; i++) {
        int r = run_test_dir(dirs[i], &o, fuse, prec, rtol, atol, tot);
        tot->pass += r > 0;
        tot->fail += r == 0;
        tot->unsupported += r < 0;
    }
    if (by_op) {
        printf("\n%-28s %6s %6s %12s\n", "op", "pass", "fail", "unsupported");
        for (int i = 0; i < tot->n_ops; i++)
            printf("%-28s %6d %6d %12d\n", tot->ops[i].op, tot->ops[i].pass, tot->ops[i].fail,
                   tot->ops[i].unsupported);
    }
    printf("%d passed, %d failed, %d skipped\n", tot->pass, tot->fail, tot->unsupported);
    int rc = tot->fail ? EXIT_CHECK : 0;
    free(tot);
    return rc;
}

/* ---- main ----------------------------------------------------------------- */

int cmd_train(int argc, char **argv), cmd_generate(int argc, char **argv);
int cmd_backends(int argc, char **argv), cmd_tune(int argc, char **argv);
int cmd_export_weights(int argc, char **argv);
int cmd_bench(int argc, char **argv), cmd_compare(int argc, char **argv);
int cmd_plot(int argc, char **argv);
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"info", cmd_info},
    {"dump", cmd_dump},
    {"convert", cmd_convert},
    {"optimize", cmd_optimize},
    {"run", cmd_run},
    {"test", cmd_test},
    {"train", cmd_train}, {"generate", cmd_generate}, /* cli/train.c, cli/generate.c */
    {"backends", cmd_backends},                        /* cli/backends.c */
    {"tune", cmd_tune},                                /* cli/tune.c */
    {"export-weights", cmd_export_weights},            /* cli/weights.c */
    {"bench", cmd_bench}, {"compare", cmd_compare},    /* cli/bench.c, cli/compare.c */
    {"plot", cmd_plot},                                /* cli/plot.c */
};

static void print_patterns(void)
{
    printf("\nfusion patterns (optimize --disable / --explain): ");
    list_patterns(stdout);
    printf("\n");
}

/* COMMAND -h / --help anywhere among its arguments: its help, exit 0. */
static bool command_help(const char *cmd, int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (cli_is_help(argv[i]) && cli_print_command_help(cmd)) {
            if (strcmp(cmd, "optimize") == 0)
                print_patterns();
            return true;
        }
    return false;
}

/* SIGTERM, SIGHUP or SIGINT during a save: the temporary files in
 * progress are removed, then the signal does what it would have done. */
static void on_fatal_signal(int sig)
{
    gf_file_temp_cleanup();
    signal(sig, SIG_DFL);
    raise(sig); /* delivered when the handler returns (blocked until then) */
}

static void catch_fatal_signals(void)
{
    const int sigs[] = {SIGTERM, SIGHUP, SIGINT};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction sa, old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN)
            continue; /* nohup's ignored SIGHUP stays ignored */
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        sigaction(sigs[i], &sa, NULL);
    }
}

/* OpenBLAS 0.3.21 (Debian 12) picks its kernels by CPU model at load time
 * and falls back to "Prescott", its SSE3 kernels, on a model it does not
 * know (a newer Xeon, or a VM's masked one): 3-5x slower GEMMs there than
 * the AVX2 / AVX-512 ones the CPU runs (160M-class forwards on this
 * project's 2-core VM: 300 ms against 100 ms).  The choice is made before
 * main, so on that fallback, with AVX2 or AVX-512F present and no
 * OPENBLAS_CORETYPE given, the program runs itself again with the
 * matching OPENBLAS_CORETYPE (the variable OpenBLAS documents for this); if
 * that cannot be done it goes on as it is.  GF_BLAS_KEEP_CORE=1 turns it
 * off. */
static void pick_blas_core(char **argv)
{
#ifdef OPENBLAS_VERSION
    const char *core = openblas_get_corename();
    if (getenv("OPENBLAS_CORETYPE") || getenv("GF_BLAS_KEEP_CORE") || !core ||
        strcmp(core, "Prescott") != 0)
        return;
    __builtin_cpu_init();
    const char *want = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2")  ? "Haswell"
                                                          : NULL;
    if (!want || setenv("OPENBLAS_CORETYPE", want, 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* not run again: carry on with Prescott */
#else
    (void)argv;
#endif
}

int main(int argc, char **argv)
{
    pick_blas_core(argv);
    catch_fatal_signals();
    if (argc < 2) {
        cli_print_usage(stderr);
        return EXIT_INPUT;
    }
    const char *cmd = argv[1];
    if (cli_is_help(cmd) || strcmp(cmd, "help") == 0) {
        if (argc > 2 && cli_print_command_help(argv[2])) /* graphfuse help COMMAND */
            return 0;
        cli_print_usage(stdout);
        print_patterns();
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("graphfuse %s\n", GF_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(cmd, commands[i].name) == 0) {
            if (command_help(cmd, argc - 2, argv + 2))
                return 0;
            return commands[i].run(argc - 2, argv + 2);
        }
    return cli_usage(NULL, "unknown command '%s'", cmd);
}
