/*
 * graphfuse bench — latency and throughput of a model, in the spirit of
 * trtexec: the inputs as `run` makes them, --warmup untimed runs, then
 * --iterations (or --duration seconds of) runs each timed on its own
 * (CLOCK_MONOTONIC around gf_session_run, which returns after the backend
 * synchronized), their min / mean / p50 / p90 / p99 / max, runs/s and
 * items/s, and the costliest op types of one extra profiled run (the
 * table of `run --profile`).  --json prints the same as one JSON object.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "gf_exec.h"

#define TOP_OPS 10

int cli_open_model(const char *path, enum gf_precision prec, bool fuse,
                   const struct gf_exec_opts *o, struct gf_model **m, struct gf_session **s)
{
    *s = NULL;
    enum gf_status st = gf_model_load(path, NULL, m);
    if (st != GF_OK)
        return cli_fail(st);
    if ((st = cli_apply_precision(*m, path, prec)) == GF_OK &&
        (!fuse || (st = cli_optimize_model(*m, path, &cli_run_fuse_opts, NULL, NULL)) == GF_OK))
        st = gf_session_new(*m, o, s);
    if (st == GF_OK)
        return 0;
    int rc = cli_fail(st);
    gf_model_free(*m);
    *m = NULL;
    return rc;
}


/* ---- the profile ------------------------------------------------------------ */

struct prof_op {
    char op[64];
    int calls;
    double ms, pct;
};

struct profile {
    double total_ms;
    struct prof_op ops[128];
    int n_ops;
};

static int cmp_ms(const void *a, const void *b)
{
    const struct prof_op *x = a, *y = b;
    if (x->ms != y->ms) /* ms as printed (3 decimals): then the percentage */
        return x->ms < y->ms ? 1 : -1;
    return x->pct < y->pct ? 1 : x->pct > y->pct ? -1 : strcmp(x->op, y->op);
}

/* The rows of gf_session_print_profile's table ("  OP  CALLS  MS  PCT%"),
 * views (no kernel) left out, costliest first. */
static void parse_profile(const char *text, struct profile *p)
{
    memset(p, 0, sizeof(*p));
    const char *line = strstr(text, "profile: ");
    if (!line)
        return;
    const char *ms = strstr(line, "), ");
    if (ms)
        p->total_ms = strtod(ms + 3, NULL);
    line = strchr(line, '\n');
    if (line)
        line = strchr(line + 1, '\n'); /* the header row */
    while (line && line[1] == ' ' && line[2] == ' ' && line[3] != ' ' && p->n_ops < 128) {
        const char *start = line + 3, *end = strchr(start, '\n');
        if (!end)
            end = start + strlen(start);
        line = *end ? end : NULL;
        char row[256];
        snprintf(row, sizeof(row), "%.*s", (int)(end - start), start);
        /* the last three fields: calls, ms, percent; the name before them */
        char *f[3];
        int k = 0;
        for (char *q = row + strlen(row); k < 3 && q > row;) {
            while (q > row && q[-1] == ' ')
                *--q = 0;
            while (q > row && q[-1] != ' ')
                q--;
            f[2 - k++] = q;
        }
        if (k < 3 || f[0] == row || strcmp(f[1], "view") == 0)
            continue;
        char *name_end = f[0];
        while (name_end > row && name_end[-1] == ' ')
            name_end--;
        struct prof_op *o = &p->ops[p->n_ops];
        snprintf(o->op, sizeof(o->op), "%.*s", (int)(name_end - row), row);
        o->calls = atoi(f[0]);
        o->ms = strtod(f[1], NULL);
        o->pct = strtod(f[2], NULL);
        p->n_ops++;
    }
    qsort(p->ops, (size_t)p->n_ops, sizeof(p->ops[0]), cmp_ms);
}

/* One more run with profiling on, in a session of its own: the first run
 * plans, the profile is the second's. */
static int profile_run(struct gf_model *m, const char *path, struct gf_exec_opts o,
                       struct gf_tensor **in, struct profile *p)
{
    struct gf_session *s;
    o.profile = true;
    enum gf_status st = gf_session_new(m, &o, &s);
    struct gf_tensor **outs;
    size_t n_out, n_in = st == GF_OK ? gf_session_input_count(s) : 0;
    for (int r = 0; st == GF_OK && r < 2; r++)
        if ((st = gf_session_run(s, n_in, in, &outs, &n_out)) != GF_OK)
            gf_error_prefix(path);
    char *text = NULL;
    size_t len = 0;
    FILE *f = st == GF_OK ? open_memstream(&text, &len) : NULL;
    if (f) {
        gf_session_print_profile(s, f);
        fclose(f);
        parse_profile(text, p);
    }
    free(text);
    gf_session_free(s);
    return st == GF_OK ? 0 : cli_fail(st);
}

/* ---- statistics ------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p-th quantile of sorted v[n], linear between the two nearest ranks
 * (numpy's default). */
static double quantile(const double *v, size_t n, double p)
{
    double pos = p * (double)(n - 1);
    size_t lo = (size_t)pos;
    if (lo + 1 >= n)
        return v[n - 1];
    return v[lo] + (pos - (double)lo) * (v[lo + 1] - v[lo]);
}

struct stats {
    double min, mean, p50, p90, p99, max; /* ms */
    double total_s, runs_per_s, items_per_s;
    size_t runs;
    int64_t batch; /* items per run; 0: not a batch */
};

static void compute_stats(double *ms, size_t n, double total_s, struct stats *st)
{
    qsort(ms, n, sizeof(*ms), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += ms[i];
    st->runs = n;
    st->min = ms[0];
    st->max = ms[n - 1];
    st->mean = sum / (double)n;
    st->p50 = quantile(ms, n, 0.50);
    st->p90 = quantile(ms, n, 0.90);
    st->p99 = quantile(ms, n, 0.99);
    st->total_s = total_s;
    st->runs_per_s = sum > 0 ? 1e3 * (double)n / sum : 0;
    st->items_per_s = st->runs_per_s * (double)st->batch;
}

/* ---- printing --------------------------------------------------------------- */

struct bench_args {
    const char *path;
    struct cli_inputs ia;
    struct gf_exec_opts o;
    enum gf_precision prec;
    bool fuse, json;
    long warmup, iterations;
    double duration; /* > 0: timed runs for this many seconds instead */
};

static void print_shape(FILE *f, const struct gf_tensor *t, bool json)
{
    fputc('[', f);
    for (int d = 0; d < t->rank; d++)
        fprintf(f, "%s%lld", d ? (json ? ", " : ",") : "", (long long)t->dims[d]);
    fputc(']', f);
}

static void print_table(const struct bench_args *a, struct gf_session *s, struct gf_tensor **in,
                        size_t n_in, const struct stats *st, const struct profile *p)
{
    printf("model:         %s%s\n", a->path, a->fuse ? " (fused in memory)" : "");
    printf("backend:       %s on %s, ", gf_session_backend(s), gf_session_device(s));
    if (a->o.n_threads)
        printf("%d thread%s", a->o.n_threads, a->o.n_threads == 1 ? "" : "s");
    else
        printf("threads: every core");
    printf(", precision %s\n", gf_precision_name(a->prec));
    printf("inputs:       ");
    for (size_t i = 0; i < n_in; i++) {
        printf("%s %s %s", i ? "," : "", in[i]->name, gf_dtype_name(in[i]->dtype));
        print_shape(stdout, in[i], false);
    }
    printf("\nruns:          %ld warmup, %zu timed in %.3f s\n", a->warmup, st->runs,
           st->total_s);
    printf("latency (ms):  each run timed on its own, after the backend synchronized\n");
    printf("  min           %10.4f\n", st->min);
    printf("  mean          %10.4f\n", st->mean);
    printf("  median (p50)  %10.4f\n", st->p50);
    printf("  p90           %10.4f\n", st->p90);
    printf("  p99           %10.4f\n", st->p99);
    printf("  max           %10.4f\n", st->max);
    printf("throughput:    %.1f runs/s", st->runs_per_s);
    if (st->batch)
        printf(", %.1f items/s (batch %lld of input '%s')", st->items_per_s,
               (long long)st->batch, in[0]->name);
    printf("\n");
    printf("top ops by time (one extra profiled run, %.3f ms):\n", p->total_ms);
    printf("  %-28s %6s %10s %6s\n", "op", "calls", "ms", "%");
    for (int i = 0; i < p->n_ops && i < TOP_OPS; i++)
        printf("  %-28s %6d %10.3f %5.1f%%\n", p->ops[i].op, p->ops[i].calls, p->ops[i].ms,
               p->ops[i].pct);
}

static void print_json(const struct bench_args *a, struct gf_session *s, struct gf_tensor **in,
                       size_t n_in, const struct stats *st, const struct profile *p)
{
    printf("{\n  \"model\": ");
    gf_json_write_string(stdout, a->path);
    printf(",\n  \"backend\": ");
    gf_json_write_string(stdout, gf_session_backend(s));
    printf(",\n  \"device\": ");
    gf_json_write_string(stdout, gf_session_device(s));
    printf(",\n  \"threads\": %d,\n  \"fuse\": %s,\n  \"precision\": \"%s\",\n  \"inputs\": [",
           a->o.n_threads, a->fuse ? "true" : "false", gf_precision_name(a->prec));
    for (size_t i = 0; i < n_in; i++) {
        printf("%s\n    {\"name\": ", i ? "," : "");
        gf_json_write_string(stdout, in[i]->name);
        printf(", \"dtype\": \"%s\", \"shape\": ", gf_dtype_name(in[i]->dtype));
        print_shape(stdout, in[i], true);
        printf("}");
    }
    printf("\n  ],\n  \"warmup\": %ld,\n  \"iterations\": %zu,\n  \"duration_s\": %.6f,\n",
           a->warmup, st->runs, st->total_s);
    printf("  \"latency_ms\": {\"min\": %.6f, \"mean\": %.6f, \"median\": %.6f, \"p50\": %.6f, "
           "\"p90\": %.6f, \"p99\": %.6f, \"max\": %.6f},\n", st->min, st->mean, st->p50,
           st->p50, st->p90, st->p99, st->max);
    printf("  \"runs_per_s\": %.3f,\n", st->runs_per_s);
    if (st->batch)
        printf("  \"batch\": %lld,\n  \"items_per_s\": %.3f,\n", (long long)st->batch,
               st->items_per_s);
    else
        printf("  \"batch\": null,\n  \"items_per_s\": null,\n");
    printf("  \"profile_ms\": %.6f,\n  \"top_ops\": [", p->total_ms);
    for (int i = 0; i < p->n_ops && i < TOP_OPS; i++) {
        printf("%s\n    {\"op\": ", i ? "," : "");
        gf_json_write_string(stdout, p->ops[i].op);
        printf(", \"calls\": %d, \"ms\": %.6f, \"percent\": %.2f}", p->ops[i].calls,
               p->ops[i].ms, p->ops[i].pct);
    }
    printf("%s]\n}\n", p->n_ops ? "\n  " : "");
}

/* ---- the command ------------------------------------------------------------ */

/* A whole number in [min, max] for option `opt`; false after no message. */
static bool parse_count(const char *v, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < min || n > max)
        return false;
    *out = n;
    return true;
}

static int parse_bench(int argc, char **argv, struct bench_args *a)
{
    bool iterations = false;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i], *v;
        bool missing = false;
        int used;
        if (strcmp(o, "--profile") == 0)
            return cli_usage("bench", "unknown option '%s' (bench always profiles one extra "
                             "run)", o);
        if ((used = cli_exec_option("bench", argc, argv, &i, &a->o, &a->prec)) != 0 ||
            (used = cli_input_option("bench", argc, argv, &i, &a->ia)) != 0) {
            if (used > 1)
                return used;
        } else if (strcmp(o, "--fuse") == 0) {
            a->fuse = true;
        } else if (strcmp(o, "--json") == 0) {
            a->json = true;
        } else if ((v = cli_opt_value(argc, argv, &i, "--warmup", &missing))) {
            if (!parse_count(v, 0, 100000000, &a->warmup))
                return cli_usage("bench", "--warmup: bad count '%s' (0 or more)", v);
        } else if ((v = cli_opt_value(argc, argv, &i, "--iterations", &missing))) {
            if (!parse_count(v, 1, 100000000, &a->iterations))
                return cli_usage("bench", "--iterations: bad count '%s' (1 or more)", v);
            iterations = true;
        } else if ((v = cli_opt_value(argc, argv, &i, "--duration", &missing))) {
            char *end;
            double d = strtod(v, &end);
            if (end == v || *end || !(d > 0) || d > 1e6)
                return cli_usage("bench", "--duration: bad duration '%s' (seconds, more than "
                                 "0)", v);
            a->duration = d;
        } else if (missing) {
            return cli_usage("bench", "%s needs a value", o);
        } else if (o[0] == '-' && o[1]) {
            return cli_usage("bench", "unknown option '%s'", o);
        } else if (a->path) {
            return cli_usage("bench", "more than one model given ('%s')", o);
        } else {
            a->path = o;
        }
    }
    if (iterations && a->duration > 0)
        return cli_usage("bench", "--iterations and --duration: give one of them");
    if (!a->path)
        return cli_usage("bench", "no model given");
    return 0;
}

/* The timed runs: ms[] of each, *n of them, *total_s of wall time. */
static int timed_runs(const struct bench_args *a, struct gf_session *s, struct gf_tensor **in,
                      double **ms, size_t *n, double *total_s)
{
    size_t n_in = gf_session_input_count(s), cap = a->duration > 0 ? 1024 : (size_t)a->iterations;
    struct gf_tensor **outs;
    size_t n_out;
    *n = 0;
    if (!(*ms = malloc(cap * sizeof(**ms))))
        return cli_fail(gf_error(GF_ERR_NOMEM, "out of memory"));
    double start = now_s(), t = start;
    for (;;) {
        if (a->duration > 0 ? *n > 0 && t - start >= a->duration : *n == (size_t)a->iterations)
            break;
        if (*n == cap) {
            double *more = realloc(*ms, 2 * cap * sizeof(**ms));
            if (!more)
                return cli_fail(gf_error(GF_ERR_NOMEM, "out of memory"));
            *ms = more;
            cap *= 2;
        }
        enum gf_status st = gf_session_run(s, n_in, in, &outs, &n_out);
        double t1 = now_s();
        if (st != GF_OK) {
            gf_error_prefix(a->path);
            return cli_fail(st);
        }
        (*ms)[(*n)++] = (t1 - t) * 1e3;
        t = now_s();
    }
    *total_s = t - start;
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    /* inputs without a file: random values of their dtype, symbolic dims 1 */
    struct bench_args a = {.ia = {.dim_default = 1, .random = true}, .warmup = 10,
                           .iterations = 100};
    int rc = parse_bench(argc, argv, &a);
    if (rc)
        return rc;
    struct gf_model *m;
    struct gf_session *s;
    if ((rc = cli_open_model(a.path, a.prec, a.fuse, &a.o, &m, &s)) != 0)
        return rc;
    size_t n_in = gf_session_input_count(s);
    struct gf_tensor *in[CLI_MAX_INPUTS], **outs;
    size_t n_out;
    double *ms = NULL, total_s = 0;
    size_t n = 0;
    struct stats st = {0};
    struct profile *p = calloc(1, sizeof(*p));
    if (!p) {
        rc = cli_fail(gf_error(GF_ERR_NOMEM, "out of memory"));
        goto out;
    }
    if ((rc = cli_make_inputs(m, s, a.path, &a.ia, in)) != 0)
        goto out;
    for (long w = 0; w < a.warmup; w++)
        if ((rc = gf_session_run(s, n_in, in, &outs, &n_out)) != GF_OK) {
            gf_error_prefix(a.path);
            rc = cli_fail((enum gf_status)rc);
            goto out;
        }
    if ((rc = timed_runs(&a, s, in, &ms, &n, &total_s)) != 0)
        goto out;
    if (n_in && in[0]->rank >= 2) /* [batch, ...]: the first dim counts items */
        st.batch = in[0]->dims[0];
    compute_stats(ms, n, total_s, &st);
    gf_session_print_fallbacks(s, stderr);
    gf_session_print_tuning(s, stderr);
    if ((rc = profile_run(m, a.path, a.o, in, p)) != 0)
        goto out;
    if (a.json)
        print_json(&a, s, in, n_in, &st, p);
    else
        print_table(&a, s, in, n_in, &st, p);
    if (fflush(stdout) != 0)
        rc = cli_fail(gf_error(GF_ERR_IO, "writing to standard output failed"));
out:
    free(p);
    free(ms);
    gf_session_free(s);
    gf_model_free(m);
    return rc;
}
