/*
 * The fused backward ops (RMSNormGrad, SwiGLUGrad, GeGLUGrad, RoPEGrad) and
 * their rules (passes/grad_rules_fused.c).
 *
 * Each case is built twice from one seed: with the fused op (domain
 * graphfuse, differentiated by its rule into its backward op) and as the
 * standard ONNX ops the fused op stands for (differentiated op by op: what
 * the fallback gf_grad_inline does with the fused op's function body).
 * The loss is sum(Y * R), R a fixed random tensor.  Checks:
 *   - the fused build's gradients, in double and in float, against
 *     central finite differences of the double fused build (1e-3 relative);
 *   - fused against unfused gradients, same dtype (1e-5 relative);
 *   - the fused build really wrote the backward op.
 * Shapes are odd, and some have enough rows for dW to split over threads.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gf_exec.h"
#include "gf_graph.h"
#include "gf_passes.h"

#define FD_ELEMS 24
#define RTOL_FD 1e-3
#define RTOL_FALLBACK 1e-5

/* ---- a tiny graph builder ----------------------------------------------------- */

struct tb {
    struct gf_model *m;
    enum gf_dtype dt;
    uint64_t rng;
    size_t np;
    const char *params[8];
};

/* uniform [lo, hi), on a 2^-20 grid: the same values in float and double */
static double rnd(struct tb *b, double lo, double hi)
{
    b->rng = b->rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(b->rng >> 44) / (double)(1u << 20);
}

static struct gf_value *tensor(struct tb *b, const char *name, int rank, const int64_t *dims,
                               bool param, double lo, double hi)
{
    struct gf_tensor *t = gf_tensor_new(b->m, NULL, b->dt, rank, dims, NULL);
    assert_non_null(t);
    for (size_t i = 0; i < t->nelem; i++) {
        double v = rnd(b, lo, hi);
        if (b->dt == GF_DOUBLE)
            ((double *)t->data)[i] = v;
        else
            ((float *)t->data)[i] = (float)v;
    }
    struct gf_value *v = gf_graph_add_initializer(b->m->graph, name, t);
    assert_non_null(v);
    if (param)
        b->params[b->np++] = v->name;
    return v;
}

static void scalar(struct tb *b, const char *name, double x)
{
    struct gf_tensor *t = gf_tensor_new(b->m, NULL, b->dt, 0, NULL,
                                        b->dt == GF_DOUBLE ? (void *)&x : (void *)&(float){(float)x});
    assert_non_null(gf_graph_add_initializer(b->m->graph, name, t));
}

static void ints(struct gf_model *m, const char *name, size_t n, const int64_t *v)
{
    struct gf_tensor *t = gf_tensor_new(m, NULL, GF_INT64, 1, (int64_t[]){(int64_t)n}, v);
    assert_non_null(gf_graph_add_initializer(m->graph, name, t));
}

/* A node reading and writing values named in comma lists ("" : omitted). */
static struct gf_node *node(struct tb *b, const char *op, const char *dom, const char *ins,
                            const char *outs)
{
    struct gf_graph *g = b->m->graph;
    struct gf_value *in[8], *out[8];
    size_t ni = 0, no = 0;
    char buf[256], *p = buf, *tok;
    snprintf(buf, sizeof(buf), "%s", ins);
    while (*ins && (tok = strsep(&p, ","))) {
        in[ni] = *tok ? gf_graph_find(g, tok) : NULL;
        if (*tok && !in[ni])
            fail_msg("unknown value '%s'", tok);
        ni++;
    }
    snprintf(buf, sizeof(buf), "%s", outs);
    for (p = buf; (tok = strsep(&p, ","));)
        assert_non_null(out[no++] = *tok ? gf_graph_new_value(g, tok, NULL) : NULL);
    char name[64];
    snprintf(name, sizeof(name), "n%zu_%s", g->n_nodes, op);
    struct gf_node *n = gf_graph_add_node(g, op, dom, name, ni, in, no, out);
    assert_non_null(n);
    return n;
}

/* loss = ReduceSum(Y * R), R random of Y's shape */
static void add_loss(struct tb *b)
{
    struct gf_value *y = gf_graph_find(b->m->graph, "Y");
    assert_int_equal(gf_graph_infer_shapes(b->m->graph), GF_OK);
    int64_t d[8];
    for (int i = 0; i < y->type.rank; i++)
        d[i] = y->type.dims[i].value;
    tensor(b, "Rloss", y->type.rank, d, false, -1, 1);
    node(b, "Mul", "", "Y,Rloss", "YR");
    gf_node_set_attr_int(node(b, "ReduceSum", "", "YR", "loss"), "keepdims", 0);
    assert_int_equal(gf_graph_add_output(b->m->graph, gf_graph_find(b->m->graph, "loss")),
                     GF_OK);
}

/* ---- the cases ------------------------------------------------------------------- */

enum kind { RMS, ADD_RMS, SWIGLU, GEGLU, GEGLU_TANH, ROPE };

struct gcase {
    const char *name;
    enum kind kind;
    int rank;
    int64_t dims[4];
    int axis;         /* RMS: attribute; ROPE: rank of Cos / Sin (their trailing dims) */
    int w_rank;       /* RMS: 0 no W, else W is the last w_rank dims */
    double eps, offset;
    int eps_outside;
    const char *fused; /* the backward op the fused build must write */
};

/* RMSNorm(X, W) as standard ops: Mul ReduceMean Add Sqrt (Add) Div Add Mul */
static void rms_unfused(struct tb *b, const struct gcase *c, int ax)
{
    int64_t axes[4];
    size_t na = 0;
    for (int i = ax; i < c->rank; i++)
        axes[na++] = i;
    ints(b->m, "axes", na, axes);
    scalar(b, "eps", c->eps);
    node(b, "Mul", "", "X,X", "P");
    node(b, "ReduceMean", "", "P,axes", "M");
    if (c->eps_outside) {
        node(b, "Sqrt", "", "M", "Q");
        node(b, "Add", "", "Q,eps", "D");
    } else {
        node(b, "Add", "", "M,eps", "E");
        node(b, "Sqrt", "", "E", "D");
    }
    node(b, "Div", "", "X,D", c->w_rank ? "N" : "Y0");
    if (c->w_rank) {
        scalar(b, "off", c->offset);
        node(b, "Add", "", "W,off", "W2");
        node(b, "Mul", "", "N,W2", "Y0");
    }
}

static void build_rms(struct tb *b, const struct gcase *c, bool fused)
{
    bool add = c->kind == ADD_RMS;
    int ax = c->axis < 0 ? c->axis + c->rank : c->axis;
    tensor(b, add ? "A" : "X", c->rank, c->dims, true, -1, 1);
    if (add)
        tensor(b, "Rr", c->rank, c->dims, true, -1, 1);
    if (c->w_rank)
        tensor(b, "W", c->w_rank, c->dims + c->rank - c->w_rank, true, 0.5, 2);
    if (add) /* S has another user: Y = Y0 + S * Cs */
        tensor(b, "Cs", c->rank, c->dims, false, -1, 1);
    if (fused) {
        char ins[32];
        snprintf(ins, sizeof(ins), "%s%s", add ? "A,Rr" : "X", c->w_rank ? ",W" : "");
        struct gf_node *n = node(b, add ? "AddRMSNorm" : "RMSNorm", "graphfuse", ins,
                                 add ? "Y0,X" : "Y0");
        gf_node_set_attr_int(n, "axis", c->axis);
        gf_node_set_attr_float(n, "epsilon", (float)c->eps);
        gf_node_set_attr_int(n, "eps_outside", c->eps_outside);
        gf_node_set_attr_float(n, "weight_offset", (float)c->offset);
    } else {
        if (add)
            node(b, "Add", "", "A,Rr", "X");
        rms_unfused(b, c, ax);
    }
    if (add) {
        node(b, "Mul", "", "X,Cs", "T");
        node(b, "Add", "", "Y0,T", "Y");
    } else {
        node(b, "Identity", "", "Y0", "Y");
    }
}

static void build_glu(struct tb *b, const struct gcase *c, bool fused)
{
    tensor(b, "G", c->rank, c->dims, true, -3, 3);
    tensor(b, "U", c->rank, c->dims, true, -1, 1);
    const char *ap = c->kind == GEGLU_TANH ? "tanh" : "none";
    if (fused) {
        struct gf_node *n = node(b, c->kind == SWIGLU ? "SwiGLU" : "GeGLU", "graphfuse", "G,U",
                                 "Y");
        if (c->kind != SWIGLU)
            gf_node_set_attr_string(n, "approximate", ap);
    } else if (c->kind == SWIGLU) {
        node(b, "Sigmoid", "", "G", "S");
        node(b, "Mul", "", "G,S", "T");
        node(b, "Mul", "", "T,U", "Y");
    } else {
        gf_node_set_attr_string(node(b, "Gelu", "", "G", "T"), "approximate", ap);
        node(b, "Mul", "", "T,U", "Y");
    }
}

/* RoPE: Y = X Cos + rot(X) Sin, rot(x) = concat(-x[h:], x[:h]) */
static void build_rope(struct tb *b, const struct gcase *c, bool fused)
{
    int64_t d = c->dims[c->rank - 1], h = d / 2;
    tensor(b, "X", c->rank, c->dims, true, -1, 1);
    tensor(b, "Cos", c->axis, c->dims + c->rank - c->axis, false, -1, 1);
    tensor(b, "Sin", c->axis, c->dims + c->rank - c->axis, false, -1, 1);
    if (fused) {
        node(b, "RoPE", "graphfuse", "X,Cos,Sin", "Y");
        return;
    }
    ints(b->m, "z", 1, (int64_t[]){0});
    ints(b->m, "h", 1, (int64_t[]){h});
    ints(b->m, "d", 1, (int64_t[]){d});
    ints(b->m, "last", 1, (int64_t[]){-1});
    node(b, "Slice", "", "X,z,h,last", "X1");
    node(b, "Slice", "", "X,h,d,last", "X2");
    node(b, "Neg", "", "X2", "NX2");
    gf_node_set_attr_int(node(b, "Concat", "", "NX2,X1", "RX"), "axis", -1);
    node(b, "Mul", "", "X,Cos", "XC");
    node(b, "Mul", "", "RX,Sin", "RS");
    node(b, "Add", "", "XC,RS", "Y");
}

static struct tb build(const struct gcase *c, enum gf_dtype dt, bool fused)
{
    struct tb b = {.m = gf_model_new(8, "t"), .dt = dt, .rng = 0x9e3779b97f4a7c15ull};
    assert_non_null(b.m);
    assert_int_equal(gf_model_set_opset(b.m, "", 20), GF_OK);
    assert_int_equal(gf_model_set_opset(b.m, "graphfuse", 1), GF_OK);
    if (c->kind == RMS || c->kind == ADD_RMS)
        build_rms(&b, c, fused);
    else if (c->kind == ROPE)
        build_rope(&b, c, fused);
    else
        build_glu(&b, c, fused);
    add_loss(&b);
    return b;
}

/* ---- running ---------------------------------------------------------------------- */

static int failures;

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    failures++;
}

static size_t output_index(const struct gf_model *m, const char *name)
{
    for (size_t i = 0; i < m->graph->n_outputs; i++)
        if (strcmp(m->graph->outputs[i]->name, name) == 0)
            return i;
    fail_msg("no output '%s'", name);
    return 0;
}

/* A differentiated build: its session and outputs (the gradients). */
struct diff {
    struct tb b;
    struct gf_session *s;
    struct gf_tensor **out;
    bool ok;
};

static bool has_op(const struct gf_model *m, const char *op)
{
    for (const struct gf_node *n = m->graph->first; n; n = n->next)
        if (strcmp(n->op_type, op) == 0)
            return true;
    return false;
}

static struct diff differentiate(const struct gcase *c, enum gf_dtype dt, bool fused)
{
    struct diff d = {.b = build(c, dt, fused)};
    struct gf_autodiff_opts o = {.n_params = d.b.np, .params = d.b.params};
    struct gf_autodiff_result res;
    size_t n;
    if (gf_pass_autodiff(d.b.m, &o, &res) != GF_OK)
        report("%s: autodiff: %s", c->name, gf_last_error());
    else if (fused && !has_op(d.b.m, c->fused))
        report("%s: no %s in the backward graph", c->name, c->fused);
    else if (gf_session_new(d.b.m, NULL, &d.s) != GF_OK ||
             gf_session_run(d.s, 0, NULL, &d.out, &n) != GF_OK)
        report("%s: run: %s", c->name, gf_last_error());
    else
        d.ok = true;
    return d;
}

static void diff_free(struct diff *d)
{
    gf_session_free(d->s);
    gf_model_free(d->b.m);
}

static const struct gf_tensor *grad_of(const struct diff *d, size_t p)
{
    char name[64];
    snprintf(name, sizeof(name), "%s_grad", d->b.params[p]);
    return d->out[output_index(d->b.m, name)];
}

/* Finite differences: the double fused build with its parameters as graph
 * inputs, loss(theta +- h) one element at a time. */
struct ref {
    struct tb b;
    struct gf_session *s;
    size_t loss_at;
};

static double ref_loss(struct ref *r)
{
    struct gf_tensor **out;
    size_t n;
    if (!r->s && gf_session_new(r->b.m, NULL, &r->s) != GF_OK)
        fail_msg("session: %s", gf_last_error());
    if (gf_session_run(r->s, 0, NULL, &out, &n) != GF_OK)
        fail_msg("run: %s", gf_last_error());
    return gf_tensor_get_f64(out[r->loss_at], 0);
}

static double ref_fd(struct ref *r, const char *param, size_t i)
{
    double *p = (double *)gf_graph_find(r->b.m->graph, param)->init->data + i;
    double x = *p, h = 1e-6 * (fabs(x) > 1 ? fabs(x) : 1);
    *p = x + h;
    double lp = ref_loss(r);
    *p = x - h;
    double lm = ref_loss(r);
    *p = x;
    return (lp - lm) / (2 * h);
}

static size_t pick(size_t n, size_t k)
{
    return n <= FD_ELEMS ? k : (k * 2654435761u + 17) % n;
}

/* |a - b| <= rtol * max(|b|, 0.01 max|B|) */
static bool close_rel(double a, double b, double bmax, double rtol)
{
    return fabs(a - b) <= rtol * fmax(fabs(b), 0.01 * bmax) + 1e-14;
}

static void check_fd(const struct gcase *c, struct ref *r, const struct diff *d)
{
    for (size_t p = 0; p < d->b.np; p++) {
        const struct gf_tensor *g = grad_of(d, p);
        size_t n = g->nelem < FD_ELEMS ? g->nelem : FD_ELEMS;
        double fd[FD_ELEMS], fdmax = 0;
        for (size_t k = 0; k < n; k++)
            fdmax = fmax(fdmax, fabs(fd[k] = ref_fd(r, d->b.params[p], pick(g->nelem, k))));
        for (size_t k = 0; k < n; k++) {
            double a = gf_tensor_get_f64(g, pick(g->nelem, k));
            if (!close_rel(a, fd[k], fdmax, RTOL_FD)) {
                report("%s (%s): d loss / d %s[%zu]: analytic %.9g, finite differences %.9g",
                       c->name, gf_dtype_name(d->b.dt), d->b.params[p], pick(g->nelem, k), a,
                       fd[k]);
                return;
            }
        }
    }
}

static void check_fallback(const struct gcase *c, const struct diff *f, const struct diff *u)
{
    for (size_t p = 0; p < f->b.np; p++) {
        const struct gf_tensor *a = grad_of(f, p), *b = grad_of(u, p);
        double bmax = 0;
        assert_int_equal(a->nelem, b->nelem);
        for (size_t i = 0; i < b->nelem; i++)
            bmax = fmax(bmax, fabs(gf_tensor_get_f64(b, i)));
        for (size_t i = 0; i < a->nelem; i++) {
            double x = gf_tensor_get_f64(a, i), y = gf_tensor_get_f64(b, i);
            if (!close_rel(x, y, bmax, RTOL_FALLBACK)) {
                report("%s (%s): d loss / d %s[%zu]: fused %.9g, op by op %.9g", c->name,
                       gf_dtype_name(a->dtype), f->b.params[p], i, x, y);
                return;
            }
        }
    }
}

static void check_case(const struct gcase *c)
{
    struct ref r = {.b = build(c, GF_DOUBLE, true)};
    for (size_t p = 0; p < r.b.np; p++)
        assert_int_equal(gf_graph_add_input(r.b.m->graph,
                                            gf_graph_find(r.b.m->graph, r.b.params[p])), GF_OK);
    r.loss_at = output_index(r.b.m, "loss");
    static const enum gf_dtype dts[2] = {GF_DOUBLE, GF_FLOAT};
    for (int t = 0; t < 2; t++) {
        struct diff f = differentiate(c, dts[t], true), u = differentiate(c, dts[t], false);
        if (f.ok)
            check_fd(c, &r, &f);
        if (f.ok && u.ok)
            check_fallback(c, &f, &u);
        diff_free(&f);
        diff_free(&u);
    }
    gf_session_free(r.s);
    gf_model_free(r.b.m);
}

static void run_cases(const struct gcase *cs, size_t n)
{
    failures = 0;
    for (size_t i = 0; i < n; i++)
        check_case(&cs[i]);
    assert_int_equal(failures, 0);
}

#define RUN(cases) run_cases(cases, sizeof(cases) / sizeof(cases[0]))

/* ---- tests -------------------------------------------------------------------------- */

static void test_rms_norm(void **state)
{
    (void)state;
    static const struct gcase cases[] = {
        {"RMSNorm 3x8", RMS, 2, {3, 8}, -1, 1, 1e-6, 0, 0, "RMSNormGrad"},
        {"RMSNorm 7x13 eps outside", RMS, 2, {7, 13}, -1, 1, 1e-5, 0, 1, "RMSNormGrad"},
        {"RMSNorm 5x9 weight offset", RMS, 2, {5, 9}, -1, 1, 1e-6, 1.0, 0, "RMSNormGrad"},
        {"RMSNorm 5x9 offset, eps outside", RMS, 2, {5, 9}, -1, 1, 1e-2, -0.5, 1,
         "RMSNormGrad"},
        {"RMSNorm 3x11 no weight", RMS, 2, {3, 11}, -1, 0, 1e-6, 0, 0, "RMSNormGrad"},
        {"RMSNorm 3x11 no weight, eps outside", RMS, 2, {3, 11}, -1, 0, 1e-3, 0, 1,
         "RMSNormGrad"},
        {"RMSNorm 2x3x5x7 axis -2, W broadcast", RMS, 4, {2, 3, 5, 7}, -2, 1, 1e-6, 0, 0,
         "RMSNormGrad"},
        {"RMSNorm 2x3x5 axis 1, W 3x5", RMS, 3, {2, 3, 5}, 1, 2, 1e-6, 0.25, 0, "RMSNormGrad"},
        /* rows enough for dW to split over threads */
        {"RMSNorm 3x700x17", RMS, 3, {3, 700, 17}, -1, 1, 1e-6, 0, 0, "RMSNormGrad"},
    };
    RUN(cases);
}

static void test_add_rms_norm(void **state)
{
    (void)state;
    static const struct gcase cases[] = {
        {"AddRMSNorm 3x8", ADD_RMS, 2, {3, 8}, -1, 1, 1e-6, 0, 0, "RMSNormGrad"},
        {"AddRMSNorm 5x7 eps outside, offset", ADD_RMS, 2, {5, 7}, -1, 1, 1e-5, 1.0, 1,
         "RMSNormGrad"},
        {"AddRMSNorm 3x9 no weight", ADD_RMS, 2, {3, 9}, -1, 0, 1e-6, 0, 0, "RMSNormGrad"},
        {"AddRMSNorm 2x3x5 axis -2, W broadcast", ADD_RMS, 3, {2, 3, 5}, -2, 1, 1e-6, 0, 0,
         "RMSNormGrad"},
        {"AddRMSNorm 2x1100x15", ADD_RMS, 3, {2, 1100, 15}, -1, 1, 1e-6, 0, 0, "RMSNormGrad"},
    };
    RUN(cases);
}

static void test_glu(void **state)
{
    (void)state;
    static const struct gcase cases[] = {
        {"SwiGLU 3x7", SWIGLU, 2, {3, 7}, 0, 0, 0, 0, 0, "SwiGLUGrad"},
        {"SwiGLU 5x3x129", SWIGLU, 3, {5, 3, 129}, 0, 0, 0, 0, 0, "SwiGLUGrad"},
        {"GeGLU 3x7", GEGLU, 2, {3, 7}, 0, 0, 0, 0, 0, "GeGLUGrad"},
        {"GeGLU 2x5x33", GEGLU, 3, {2, 5, 33}, 0, 0, 0, 0, 0, "GeGLUGrad"},
        {"GeGLU tanh 3x7", GEGLU_TANH, 2, {3, 7}, 0, 0, 0, 0, 0, "GeGLUGrad"},
        {"GeGLU tanh 7x301", GEGLU_TANH, 2, {7, 301}, 0, 0, 0, 0, 0, "GeGLUGrad"},
    };
    RUN(cases);
}

static void test_rope(void **state)
{
    (void)state;
    /* axis: the rank of Cos / Sin (X's trailing dims: broadcast when lower) */
    static const struct gcase cases[] = {
        {"RoPE 3x8, Cos 3x8", ROPE, 2, {3, 8}, 2, 0, 0, 0, 0, "RoPEGrad"},
        {"RoPE 2x3x5x6, Cos 5x6", ROPE, 4, {2, 3, 5, 6}, 2, 0, 0, 0, 0, "RoPEGrad"},
        {"RoPE 2x3x7x10, Cos 3x7x10", ROPE, 4, {2, 3, 7, 10}, 3, 0, 0, 0, 0, "RoPEGrad"},
        {"RoPE 3x1x9x2, Cos 2", ROPE, 4, {3, 1, 9, 2}, 1, 0, 0, 0, 0, "RoPEGrad"},
        {"RoPE 2x4x65x16, Cos 65x16", ROPE, 4, {2, 4, 65, 16}, 2, 0, 0, 0, 0, "RoPEGrad"},
    };
    RUN(cases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_norm),
        cmocka_unit_test(test_add_rms_norm),
        cmocka_unit_test(test_glu),
        cmocka_unit_test(test_rope),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
