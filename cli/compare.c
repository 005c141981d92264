/*
 * graphfuse compare — two configurations on the same inputs, output by
 * output: the worst absolute and relative difference and where (flat
 * index), and pass / fail against |B - A| <= atol + rtol * |A| (the test
 * of `graphfuse test`, gf_tensor_allclose, with its defaults).  A is the
 * reference: model A with the run options; B is model B (default A) with
 * --backend2 / --device2 / --precision2 (default A's), fused with
 * --fuse-vs-unfused; or A is the outputs recorded in --expected DIR.
 * Exit 0 when every output passes, 1 when one does not.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "gf_exec.h"

struct compare_args {
    const char *a_path, *b_path, *expected;
    struct cli_inputs ia;
    struct gf_exec_opts o;
    enum gf_precision prec, prec2;
    bool fuse, fuse_vs_unfused, have_prec2;
    const char *backend2, *device2;
    double rtol, atol;
};

/* The worst differences of B against A (numeric tensors of one shape). */
struct diff {
    double abs, rel;       /* the largest |B - A|, |B - A| / |A| (over A != 0) */
    size_t abs_at, rel_at; /* flat indices of them */
    size_t n_bad;          /* elements beyond the tolerance */
};

static void diff_tensors(const struct gf_tensor *a, const struct gf_tensor *b, double rtol,
                         double atol, struct diff *d)
{
    memset(d, 0, sizeof(*d));
    if (a->dtype == GF_STRING || b->dtype == GF_STRING)
        return;
    for (size_t i = 0; i < a->nelem && i < b->nelem; i++) {
        double w = gf_tensor_get_f64(a, i), g = gf_tensor_get_f64(b, i);
        if ((isnan(w) && isnan(g)) || (isinf(w) && g == w))
            continue;
        double err = fabs(g - w);
        if (isnan(err))
            err = INFINITY;
        if (!(err <= atol + rtol * fabs(w)))
            d->n_bad++;
        if (err > d->abs || (i == 0 && err == 0)) {
            d->abs = err;
            d->abs_at = i;
        }
        double rel = w != 0 ? err / fabs(w) : 0;
        if (rel > d->rel) {
            d->rel = rel;
            d->rel_at = i;
        }
    }
}

static void print_type(const struct gf_tensor *t)
{
    printf("%s[", gf_dtype_name(t->dtype));
    for (int d = 0; d < t->rank; d++)
        printf("%s%lld", d ? "," : "", (long long)t->dims[d]);
    printf("]");
}

/* One output: a line saying how far B is from A; true when within. */
static bool compare_output(const char *name, struct gf_tensor *a, const struct gf_tensor *b,
                           double rtol, double atol)
{
    if (a->dtype == GF_UINT16 && b->dtype == GF_BFLOAT16)
        a->dtype = GF_BFLOAT16; /* bfloat16 recorded as uint16 (as test reads it) */
    double worst;
    bool ok = gf_tensor_allclose(b, a, rtol, atol, &worst);
    printf("  %s ", name);
    print_type(b);
    bool same_type = a->dtype == b->dtype && a->rank == b->rank;
    for (int d = 0; same_type && d < a->rank; d++)
        same_type = a->dims[d] == b->dims[d];
    if (!same_type) {
        printf(": A is ");
        print_type(a);
        printf(": FAIL (the types differ)\n");
        return false;
    }
    struct diff d;
    diff_tensors(a, b, rtol, atol, &d);
    if (a->dtype == GF_STRING) {
        printf(": %s\n", ok ? "PASS (the strings match)" : "FAIL (the strings differ)");
        return ok;
    }
    printf(": max abs diff %.6g at [%zu] (A %.9g, B %.9g), max rel diff %.6g at [%zu], "
           "%zu of %zu beyond tolerance: %s\n", d.abs, d.abs_at,
           a->nelem ? gf_tensor_get_f64(a, d.abs_at) : 0.0,
           b->nelem ? gf_tensor_get_f64(b, d.abs_at) : 0.0, d.rel, d.rel_at, d.n_bad,
           a->nelem, ok ? "PASS" : "FAIL");
    return ok;
}

/* The outputs of one pair of runs; *n_fail counts the failed outputs. */
static void compare_outputs(const struct compare_args *c, struct gf_tensor **a, size_t n_a,
                            struct gf_tensor **b, size_t n_b, int *n_fail, int *n_out)
{
    for (size_t i = 0; i < n_a && i < n_b; i++) {
        const char *name = b[i]->name && *b[i]->name ? b[i]->name : "(unnamed)";
        *n_fail += !compare_output(name, a[i], b[i], c->rtol, c->atol);
        ++*n_out;
    }
    if (n_a != n_b) {
        printf("  FAIL: B has %zu outputs, A %zu\n", n_b, n_a);
        ++*n_fail;
    }
}

static void print_side(const char *tag, const char *path, struct gf_session *s, bool fused,
                       enum gf_precision p)
{
    printf("%s: %s, %s on %s, %s, %s\n", tag, path, gf_session_backend(s), gf_session_device(s),
           fused ? "fused in memory" : "as exported", gf_precision_name(p));
}

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* --expected: B against each test_data_set_K of dir (or dir itself). */
static int compare_expected(const struct compare_args *c, struct gf_model *m,
                            struct gf_session *s, int *n_fail, int *n_out)
{
    char set0[4200];
    snprintf(set0, sizeof(set0), "%s/test_data_set_0", c->expected);
    bool many = is_dir(set0);
    for (int k = 0;; k++) {
        char dir[4200], probe[4300];
        if (many)
            snprintf(dir, sizeof(dir), "%s/test_data_set_%d", c->expected, k);
        else if (k == 0)
            snprintf(dir, sizeof(dir), "%s", c->expected);
        else
            break;
        if (!is_dir(dir))
            break;
        snprintf(probe, sizeof(probe), "%s/output_0.pb", dir);
        if (access(probe, F_OK) != 0) {
            fprintf(stderr, "graphfuse: compare: --expected: %s has no output_0.pb (want the "
                    "ONNX test layout: test_data_set_K/input_K.pb, output_K.pb)\n", dir);
            return EXIT_INPUT;
        }
        struct gf_tensor *in[CLI_MAX_INPUTS] = {0}, *want[CLI_MAX_INPUTS] = {0}, **got;
        enum gf_status st;
        size_t n_in = cli_load_set(m, dir, "input", in, CLI_MAX_INPUTS, &st), n_got;
        size_t n_want = st == GF_OK ? cli_load_set(m, dir, "output", want, CLI_MAX_INPUTS, &st)
                                    : 0;
        if (st != GF_OK)
            return cli_fail(st);
        if ((st = gf_session_run(s, n_in, in, &got, &n_got)) != GF_OK) {
            gf_error_prefix(c->a_path);
            return cli_fail(st);
        }
        printf("%s:\n", dir);
        compare_outputs(c, want, n_want, got, n_got, n_fail, n_out);
    }
    if (!*n_out && !*n_fail) {
        fprintf(stderr, "graphfuse: compare: --expected: %s: no test_data_set_* folder\n",
                c->expected);
        return EXIT_INPUT;
    }
    return 0;
}

static int parse_compare(int argc, char **argv, struct compare_args *c)
{
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i], *v;
        bool missing = false;
        int used;
        if (strcmp(o, "--profile") == 0)
            return cli_usage("compare", "unknown option '%s'", o);
        if ((used = cli_exec_option("compare", argc, argv, &i, &c->o, &c->prec)) != 0 ||
            (used = cli_input_option("compare", argc, argv, &i, &c->ia)) != 0 ||
            (used = cli_tolerance_option("compare", argc, argv, &i, &c->rtol, &c->atol)) != 0) {
            if (used > 1)
                return used;
        } else if (strcmp(o, "--fuse") == 0) {
            c->fuse = true;
        } else if (strcmp(o, "--fuse-vs-unfused") == 0) {
            c->fuse_vs_unfused = true;
        } else if ((v = cli_opt_value(argc, argv, &i, "--backend2", &missing))) {
            c->backend2 = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--device2", &missing))) {
            c->device2 = v;
        } else if ((v = cli_opt_value(argc, argv, &i, "--precision2", &missing))) {
            if (!gf_precision_parse(v, &c->prec2))
                return cli_usage("compare", "--precision2: unknown precision '%s' (fp32, tf32, "
                                 "bf16 or fp16)", v);
            c->have_prec2 = true;
        } else if ((v = cli_opt_value(argc, argv, &i, "--expected", &missing))) {
            c->expected = v;
        } else if (missing) {
            return cli_usage("compare", "%s needs a value", o);
        } else if (o[0] == '-' && o[1]) {
            return cli_usage("compare", "unknown option '%s'", o);
        } else if (!c->a_path) {
            c->a_path = o;
        } else if (!c->b_path) {
            c->b_path = o;
        } else {
            return cli_usage("compare", "more than two models given ('%s')", o);
        }
    }
    if (c->expected) {
        if (!is_dir(c->expected))
            return cli_usage("compare", "--expected: '%s' is not a folder", c->expected);
        if (c->b_path || c->backend2 || c->device2 || c->have_prec2 || c->fuse_vs_unfused)
            return cli_usage("compare", "--expected: compares one configuration with the "
                             "recorded outputs (no B, --backend2, --device2, --precision2 or "
                             "--fuse-vs-unfused)");
    }
    if (c->fuse && c->fuse_vs_unfused)
        return cli_usage("compare", "--fuse and --fuse-vs-unfused: give one of them");
    if (!c->a_path && !c->expected)
        return cli_usage("compare", "no model given");
    return 0;
}

int cmd_compare(int argc, char **argv)
{
    struct compare_args c = {.ia = {.dim_default = 1, .random = true},
                             .rtol = CLI_DEFAULT_RTOL, .atol = CLI_DEFAULT_ATOL};
    int rc = parse_compare(argc, argv, &c);
    if (rc)
        return rc;
    char model_path[4200];
    if (!c.a_path) { /* --expected DIR: DIR/model.onnx */
        snprintf(model_path, sizeof(model_path), "%s/model.onnx", c.expected);
        c.a_path = model_path;
    }
    /* B: the model run with B's options */
    struct gf_exec_opts ob = c.o;
    if (c.backend2)
        ob.backend = c.backend2;
    if (c.device2)
        ob.device = c.device2;
    enum gf_precision pb = c.have_prec2 ? c.prec2 : c.prec;
    bool fuse_b = c.fuse || c.fuse_vs_unfused;
    const char *path_b = c.b_path ? c.b_path : c.a_path;
    struct gf_model *ma = NULL, *mb = NULL;
    struct gf_session *sa = NULL, *sb = NULL;
    int n_fail = 0, n_out = 0;
    if ((rc = cli_open_model(path_b, pb, fuse_b, &ob, &mb, &sb)) != 0)
        return rc;
    if (c.expected) {
        printf("A: the outputs recorded in %s\n", c.expected);
        print_side("B", path_b, sb, fuse_b, pb);
        printf("tolerance: |B - A| <= atol %g + rtol %g * |A|\n", c.atol, c.rtol);
        rc = compare_expected(&c, mb, sb, &n_fail, &n_out);
        goto done;
    }
    if ((rc = cli_open_model(c.a_path, c.prec, c.fuse, &c.o, &ma, &sa)) != 0)
        goto out;
    print_side("A", c.a_path, sa, c.fuse, c.prec);
    print_side("B", path_b, sb, fuse_b, pb);
    printf("tolerance: |B - A| <= atol %g + rtol %g * |A|\n", c.atol, c.rtol);
    size_t n_in = gf_session_input_count(sa);
    if (gf_session_input_count(sb) != n_in) {
        fprintf(stderr, "graphfuse: compare: %s has %zu inputs, %s %zu\n", c.a_path, n_in,
                path_b, gf_session_input_count(sb));
        rc = EXIT_INPUT;
        goto out;
    }
    struct gf_tensor *in[CLI_MAX_INPUTS], **oa, **ob_out;
    size_t n_a, n_b;
    if ((rc = cli_make_inputs(ma, sa, c.a_path, &c.ia, in)) != 0)
        goto out;
    enum gf_status st = gf_session_run(sa, n_in, in, &oa, &n_a);
    if (st != GF_OK) {
        gf_error_prefix(c.a_path);
        rc = cli_fail(st);
        goto out;
    }
    /* A's outputs stay the session's until its next run */
    if ((st = gf_session_run(sb, n_in, in, &ob_out, &n_b)) != GF_OK) {
        gf_error_prefix(path_b);
        rc = cli_fail(st);
        goto out;
    }
    printf("outputs:\n");
    compare_outputs(&c, oa, n_a, ob_out, n_b, &n_fail, &n_out);
done:
    if (rc == 0) {
        if (n_fail)
            printf("FAIL: %d of %d outputs beyond the tolerance\n", n_fail, n_out);
        else
            printf("PASS: %d output%s within the tolerance\n", n_out, n_out == 1 ? "" : "s");
        rc = n_fail ? EXIT_CHECK : 0;
    }
out:
    gf_session_free(sa);
    gf_session_free(sb);
    gf_model_free(ma);
    gf_model_free(mb);
    return rc;
}
