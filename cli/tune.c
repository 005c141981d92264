/*
 * graphfuse tune MODEL: tunes every node that has a choice (a kernel with
 * knobs, or several kernels) on a backend, at the input sizes given with
 * --dim (or --input files), caches the winners (executor/gf_tune.h) and
 * prints a table of what it chose and the speedup over the default kernel
 * and config.
 *
 * The model is planned by a session exactly as `graphfuse run` plans it
 * (the same inputs: cli/inputs.c; the same folding, kernels and views),
 * and the nodes tuned are the plan's tune sites (gf_session_tune_site),
 * keyed as the run looks them up: `run` with the cache finds every entry
 * written here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "gf_exec.h"
#include "gf_passes.h"
#include "gf_tune.h"


struct tune_args {
    const char *path, *backend, *device, *cache;
    struct cli_inputs inputs;
    struct gf_tune_opts opts;
    bool force, fuse;
};

struct row {
    const struct gf_node *n;
    char shapes[256], choice[256], note[300];
    struct gf_tune_result r;
    double gflop;  /* per run, for MatMul / Gemm / MatMulEpilogue; 0 otherwise */
    bool failed;
};

/* --tune-budget, --repeats: a count from 1 to 100000 into *out. */
static int count_option(const char *name, const char *v, int *out)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || end == v || n < 1 || n > 100000)
        return cli_usage("tune", "%s: bad count '%s' (1 to 100000)", name, v);
    *out = (int)n;
    return 0;
}

static int parse(int argc, char **argv, struct tune_args *a)
{
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i], *v;
        bool missing = false;
        struct cli_inputs *in = &a->inputs;
        int rc = 0;
        if ((v = cli_opt_value(argc, argv, &i, "--backend", &missing))) {
            a->backend = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--device", &missing))) {
            a->device = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--tune-cache", &missing))) {
            a->cache = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--dim", &missing))) {
            if (in->n_dims == 64 || !cli_parse_dim(v, &in->dims[in->n_dims++]))
                return cli_usage("tune", "--dim: bad value '%s' (want NAME=SIZE, e.g. seq=256)",
                                 v);
        } else if ((v = cli_opt_value(argc, argv, &i, "--input", &missing)) ||
                   (v = cli_opt_value(argc, argv, &i, "-i", &missing))) {
            if (!strchr(v, '=') || in->n_specs == 64)
                return cli_usage("tune", "%s: bad input '%s' (want NAME=FILE.pb)", s, v);
            in->specs[in->n_specs++] = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--tune-budget", &missing))) {
            rc = count_option("--tune-budget", v, &a->opts.budget);
        } else if ((v = cli_opt_value(argc, argv, &i, "--repeats", &missing))) {
            rc = count_option("--repeats", v, &a->opts.repeats);
        } else if (missing) {
            return cli_usage("tune", "%s needs a value", s);
        } else if (strcmp(s, "--force") == 0) {
            a->force = true;
        } else if (strcmp(s, "--fuse") == 0) {
            a->fuse = true;
        } else if (strcmp(s, "--with-cpu") == 0) {
            a->opts.with_cpu = true;
        } else if (s[0] == '-' && s[1]) {
            return cli_usage("tune", "unknown option '%s'", s);
        } else if (a->path) {
            return cli_usage("tune", "more than one model given ('%s')", s);
        } else {
            a->path = s;
        }
        if (rc)
            return rc;
    }
    return a->path ? 0 : cli_usage("tune", "no model given");
}

/* ---- reporting ------------------------------------------------------------------------------- */

/* Floating-point work of one run of a product (2 M N K per batch), else 0. */
static double gflop(const struct gf_node *n, const struct gf_tview *in, const struct gf_tview *out)
{
    const struct gf_tview *A = &in[0];
    if ((n->op != GF_OP_MATMUL && n->op != GF_OP_GEMM && n->op != GF_OP_MATMUL_EPILOGUE) ||
        A->rank < 1 || !out[0].dtype)
        return 0;
    bool ta = gf_node_attr_int(n, "transA", 0) != 0;
    int64_t k = A->rank == 1 ? A->dims[0]
              : ta ? A->dims[A->rank - 2] : A->dims[A->rank - 1];
    return 2.0 * (double)out[0].nelem * (double)k * 1e-9;
}

static const char *node_name(const struct gf_node *n)
{
    return n->name && *n->name ? n->name : "(unnamed)";
}

struct progress {
    bool tty;
    size_t node, n_nodes;
    const struct gf_node *n;
};

static void on_progress(void *ctx, size_t done, size_t total)
{
    const struct progress *p = ctx;
    char bar[31];
    size_t fill = total ? done * 30 / total : 30;
    for (size_t i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    printf("\r[%s] node %zu/%zu %.30s (%s): config %zu/%zu\033[K", bar, p->node, p->n_nodes,
           node_name(p->n), p->n->op_type, done, total);
    fflush(stdout);
}

static void describe(struct row *w, struct gf_backend *be)
{
    const struct gf_kernel *k = w->r.choice.kernel;
    bool other = strcmp(k->backend, be->ops->name) != 0; /* a CPU kernel won */
    char cfg[200];
    gf_tune_format_config(k, w->r.choice.config, cfg, sizeof(cfg));
    snprintf(w->choice, sizeof(w->choice), "%s%s%s %s", other ? k->backend : "", other ? "/" : "",
             k->impl, cfg);
}

static void print_line(const struct row *w, size_t i, size_t total)
{
    if (w->failed) {
        printf("tune %zu/%zu %s (%s %s): %s\n", i, total, node_name(w->n), w->n->op_type,
               w->shapes, w->note);
        return;
    }
    printf("tune %zu/%zu %s (%s %s): %s", i, total, node_name(w->n), w->n->op_type, w->shapes,
           w->choice);
    if (w->r.cached)
        printf(", cached\n");
    else
        printf(", %zu of %zu configs tried, %zu wrong, %zu failed; %.4g ms (default %.4g ms)\n",
               w->r.n_tried, w->r.n_space, w->r.n_rejected, w->r.n_failed, w->r.best_ms,
               w->r.default_ms);
}

static int width_of(const struct row *rows, size_t n, const char *head, int which)
{
    size_t w = strlen(head);
    for (size_t i = 0; i < n; i++) {
        const char *s = which == 0 ? node_name(rows[i].n) : which == 1 ? rows[i].n->op_type
                      : which == 2 ? rows[i].shapes : rows[i].failed ? rows[i].note
                                                                     : rows[i].choice;
        w = strlen(s) > w ? strlen(s) : w;
    }
    return (int)(w > 60 ? 60 : w);
}

static void print_table(const struct row *rows, size_t n)
{
    int wn = width_of(rows, n, "node", 0), wo = width_of(rows, n, "op", 1);
    int ws = width_of(rows, n, "shapes", 2), wc = width_of(rows, n, "chosen", 3);
    bool flops = false;
    for (size_t i = 0; i < n; i++)
        flops |= rows[i].gflop > 0;
    printf("\n%-*s  %-*s  %-*s  %-*s  %10s  %10s  %7s", wn, "node", wo, "op", ws, "shapes", wc,
           "chosen", "default ms", "tuned ms", "speedup");
    printf(flops ? "  %11s  %11s\n" : "\n", "GFLOP/s def", "GFLOP/s tun");
    for (size_t i = 0; i < n; i++) {
        const struct row *w = &rows[i];
        printf("%-*.*s  %-*s  %-*.*s  ", wn, wn, node_name(w->n), wo, w->n->op_type, ws, ws,
               w->shapes);
        if (w->failed) {
            printf("%s\n", w->note);
            continue;
        }
        double d = w->r.default_ms, b = w->r.best_ms;
        printf("%-*.*s  %10.4f  %10.4f  %6.2fx", wc, wc, w->choice, d, b, b > 0 ? d / b : 0);
        if (flops && w->gflop > 0 && d > 0 && b > 0)
            printf("  %11.1f  %11.1f", w->gflop / d * 1e3, w->gflop / b * 1e3);
        printf("%s\n", w->r.cached ? "  (cached)" : "");
    }
}

/* ---- tuning ---------------------------------------------------------------------------------- */

static void print_warnings(const struct gf_tuner *t, size_t *shown)
{
    for (; *shown < gf_tuner_warning_count(t); (*shown)++)
        fprintf(stderr, "graphfuse: warning: %s\n", gf_tuner_warning(t, *shown));
}

/* Tunes (or finds in the cache) node n into row w. */
static void tune_node(struct gf_tuner *t, struct gf_backend *be, const struct tune_args *a,
                      const struct gf_tview *in, const struct gf_tview *out, struct progress *p,
                      struct row *w)
{
    const struct gf_node *n = w->n;
    struct gf_tune_opts o = a->opts;
    struct gf_tune_choice c;
    if (!a->force &&
        gf_tuner_lookup(t, be, n, in, n->n_inputs, out, n->n_outputs, &c, &w->r)) {
        describe(w, be);
        return;
    }
    if (p->tty) {
        o.progress = on_progress;
        o.progress_ctx = p;
    }
    enum gf_status st = gf_tuner_tune(t, be, n, in, n->n_inputs, out, n->n_outputs, &o, &w->r);
    if (p->tty)
        printf("\r\033[K");
    if (st != GF_OK) {
        w->failed = true;
        snprintf(w->note, sizeof(w->note), "not tuned: %s", gf_last_error());
        return;
    }
    describe(w, be);
}

static int tune_model(struct gf_session *s, struct gf_tuner *t, const struct tune_args *a,
                      size_t *shown)
{
    struct gf_tune_site site;
    size_t total = 0, k = 0, failed = 0;
    bool cross = a->opts.with_cpu && strcmp(gf_session_backend(s), "cpu") != 0;
    for (int pass = 0; pass < 2; pass++) {
        struct row *rows = pass ? calloc(total + 1, sizeof(*rows)) : NULL;
        if (pass && !rows)
            return cli_fail(gf_error(GF_ERR_NOMEM, "out of memory"));
        struct progress p = {.tty = isatty(STDOUT_FILENO), .n_nodes = total};
        for (size_t i = 0; gf_session_tune_site(s, i, &site); i++) {
            if (site.n_candidates < 2 && !cross)
                continue; /* one kernel, no knobs: only the CPU's could compete */
            if (!pass) {
                total++;
                continue;
            }
            struct row *w = &rows[k++];
            w->n = p.n = site.node;
            p.node = k;
            gf_tune_format_shapes(site.in, site.n_in, NULL, 0, w->shapes, sizeof(w->shapes));
            w->gflop = gflop(site.node, site.in, site.out);
            tune_node(t, site.be, a, site.in, site.out, &p, w);
            failed += w->failed;
            print_warnings(t, shown);
            if (!p.tty)
                print_line(w, k, total);
        }
        if (pass) {
            if (total)
                print_table(rows, total);
            free(rows);
        } else if (total) {
            printf("tuning %zu node%s of %s on %s (%s)\n", total, total == 1 ? "" : "s", a->path,
                   gf_session_backend(s), gf_session_device(s));
        } else {
            printf("nothing to tune in %s on %s (%s): no node has a kernel with knobs or a "
                   "choice of kernels\n", a->path, gf_session_backend(s), gf_session_device(s));
        }
    }
    enum gf_status st = gf_tuner_save(t);
    print_warnings(t, shown);
    if (st != GF_OK)
        fprintf(stderr, "graphfuse: warning: %s\n", gf_last_error());
    else if (gf_tuner_recorded(t))
        printf("cache: %s (%zu entr%s written)\n", gf_tuner_path(t), gf_tuner_recorded(t),
               gf_tuner_recorded(t) == 1 ? "y" : "ies");
    return failed ? EXIT_CHECK : 0;
}

int cmd_tune(int argc, char **argv)
{
    struct tune_args a = {.inputs = {.random = true, .dim_default = -1}};
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc;
    struct gf_model *m = NULL;
    struct gf_session *s = NULL;
    struct gf_tuner *t = NULL;
    struct gf_tensor *in[CLI_MAX_INPUTS];
    /* planned as `run` plans; the session itself leaves the cache alone */
    struct gf_exec_opts eo = {.backend = a.backend, .device = a.device, .tune_cache = ""};
    enum gf_status st = gf_model_load(a.path, NULL, &m);
    if (st == GF_OK && a.fuse &&
        (st = gf_graph_infer_shapes(m->graph)) == GF_OK &&
        (st = gf_pass_cleanup(m->graph, &(struct gf_cleanup_opts){.eval = gf_exec_eval_node},
                              NULL)) == GF_OK)
        st = gf_pass_fuse(m, &cli_run_fuse_opts, NULL);
    if (st == GF_OK)
        st = gf_session_new(m, &eo, &s);
    if (st != GF_OK) {
        rc = cli_fail(st);
        goto out;
    }
    if ((rc = cli_make_inputs(m, s, a.path, &a.inputs, in)) != 0)
        goto out;
    if ((st = gf_session_plan(s, gf_session_input_count(s), in)) != GF_OK)
        gf_error_prefix(a.path);
    if (st == GF_OK)
        st = gf_tuner_open(a.cache, &t);
    if (st == GF_OK) {
        size_t shown = 0;
        print_warnings(t, &shown);
        rc = tune_model(s, t, &a, &shown);
    } else {
        rc = cli_fail(st);
    }
out:
    gf_tuner_free(t);
    gf_session_free(s);
    gf_model_free(m);
    return rc;
}
