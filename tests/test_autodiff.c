/*
 * gf_pass_autodiff: every gradient rule against central finite
 * differences, the pass's structure (summed uses, tied initializers, shape
 * paths, missing rules, the loss and parameter choice), and the bundled
 * models.
 *
 * Reference path: each op test is a small graph written in a one-line
 * language (below) and built twice from one seed.  The double-precision
 * build is the reference: its loss is evaluated with each parameter element
 * moved by +-h, giving central differences accurate to ~1e-9.  The
 * analytic gradients of the double build and of the float build (the fp32
 * kernels) must match them within 1e-3 relative.  The loss of a test is
 * sum(Y * R) for a fixed random R, so every element of Y matters.
 *
 * Graph language: statements separated by ';'
 *   p NAME DIMS      parameter, uniform in [-1, 1]   (DIMS: 3x7, or s: scalar)
 *   pp NAME DIMS     parameter, uniform in [0.5, 2]
 *   c NAME DIMS      constant (not a parameter), uniform in [-1, 1]; cp: in [0.5, 2]
 *   k NAME VALUE     constant float scalar
 *   i NAME DIMS V/V  constant int64 tensor;  b NAME DIMS V/V  constant bool tensor
 *   Op(a,b)->y,z [attr=1 list=1/2 f=0.5 s="str" to=DT]   a node (empty input: omitted)
 * The output Y is the one differentiated.
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

#define MAX_PARAMS 64
#define FD_ELEMS 40   /* elements checked per parameter (all when fewer) */
#define RTOL 1e-3

/* ---- the graph language ----------------------------------------------------- */

struct built {
    struct gf_model *m;
    size_t n_params;
    const char *params[MAX_PARAMS];
};

static uint64_t rng_state;

static double rnd(void) /* uniform [0, 1), exactly representable in float */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(float)((double)(rng_state >> 40) / (double)(1ull << 24));
}

static int parse_dims(const char *s, int64_t *dims)
{
    int r = 0;
    if (strcmp(s, "s") == 0)
        return 0;
    for (const char *p = s; *p; r++) {
        dims[r] = strtoll(p, (char **)&p, 10);
        if (*p == 'x')
            p++;
    }
    return r;
}

static void put(struct gf_tensor *t, size_t i, double v)
{
    if (t->dtype == GF_FLOAT)
        ((float *)t->data)[i] = (float)v;
    else if (t->dtype == GF_DOUBLE)
        ((double *)t->data)[i] = v;
    else if (t->dtype == GF_INT64)
        ((int64_t *)t->data)[i] = (int64_t)v;
    else
        ((uint8_t *)t->data)[i] = v != 0;
}

/* "p A 3x4", "i I 2 0/3", ... */
static void stmt_value(struct built *b, enum gf_dtype dt, char *kind, char *name, char *dims,
                       char *vals)
{
    int64_t d[16];
    int r = strcmp(kind, "k") == 0 ? 0 : parse_dims(dims, d);
    bool ints = kind[0] == 'i', bools = kind[0] == 'b';
    struct gf_tensor *t = gf_tensor_new(b->m, NULL, ints ? GF_INT64 : bools ? GF_BOOL : dt, r,
                                        d, NULL);
    assert_non_null(t);
    char *p = strcmp(kind, "k") == 0 ? dims : vals;
    for (size_t i = 0; i < t->nelem; i++) {
        if (ints || bools || kind[0] == 'k') {
            assert_non_null(p);
            put(t, i, strtod(p, &p));
            p += *p == '/';
        } else {
            bool pos = strlen(kind) > 1 && kind[1] == 'p';
            put(t, i, pos ? 0.5 + 1.5 * rnd() : 2 * rnd() - 1);
        }
    }
    struct gf_value *v = gf_graph_add_initializer(b->m->graph, name, t);
    assert_non_null(v);
    if (kind[0] == 'p') {
        assert_true(b->n_params < MAX_PARAMS);
        b->params[b->n_params++] = v->name;
    }
}

static void set_attr(struct gf_node *n, char *kv, enum gf_dtype dt)
{
    char *eq = strchr(kv, '=');
    assert_non_null(eq);
    *eq = 0;
    char *v = eq + 1;
    if (strcmp(v, "DT") == 0) {
        assert_int_equal(gf_node_set_attr_int(n, kv, dt), GF_OK);
    } else if (v[0] == '"') {
        v[strlen(v) - 1] = 0;
        assert_int_equal(gf_node_set_attr_string(n, kv, v + 1), GF_OK);
    } else if (strchr(v, '/') || v[0] == '[') {
        int64_t list[16];
        size_t k = 0;
        for (char *p = v + (v[0] == '['); *p && *p != ']'; p += *p == '/')
            list[k++] = strtoll(p, &p, 10);
        assert_int_equal(gf_node_set_attr_ints(n, kv, k, list), GF_OK);
    } else if (strchr(v, '.') || strchr(v, 'e')) {
        assert_int_equal(gf_node_set_attr_float(n, kv, strtof(v, NULL)), GF_OK);
    } else {
        assert_int_equal(gf_node_set_attr_int(n, kv, strtoll(v, NULL, 10)), GF_OK);
    }
}

/* "Op(a,,b)->y,z [k=v k=v]" */
static void stmt_node(struct built *b, enum gf_dtype dt, char *s, int id)
{
    struct gf_graph *g = b->m->graph;
    struct gf_value *in[16], *out[16];
    size_t ni = 0, no = 0;
    char *lp = strchr(s, '('), *rp = strchr(s, ')'), *arrow = strstr(s, "->");
    assert_true(lp && rp && arrow);
    *lp = *rp = 0;
    char *attrs = strchr(arrow, '[');
    if (attrs)
        *attrs++ = 0;
    for (char *p = lp + 1, *tok; (tok = strsep(&p, ",")) && lp[1];) {
        in[ni] = tok[0] ? gf_graph_find(g, tok) : NULL;
        if (tok[0] && !in[ni])
            fail_msg("unknown value '%s'", tok);
        ni++;
    }
    for (char *p = arrow + 2, *tok; (tok = strsep(&p, ", "));) {
        if (!tok[0])
            continue;
        out[no] = gf_graph_new_value(g, tok, NULL);
        assert_non_null(out[no++]);
    }
    char name[64];
    snprintf(name, sizeof(name), "n%d_%s", id, s);
    struct gf_node *n = gf_graph_add_node(g, s, "", name, ni, in, no, out);
    assert_non_null(n);
    for (char *p = attrs, *tok; p && (tok = strsep(&p, " ]"));)
        if (tok[0])
            set_attr(n, tok, dt);
}

/* loss = ReduceSum(Y * R), R a fixed random constant of Y's shape. */
static void add_loss(struct built *b, enum gf_dtype dt)
{
    struct gf_graph *g = b->m->graph;
    struct gf_value *y = gf_graph_find(g, "Y");
    assert_non_null(y);
    assert_int_equal(gf_graph_infer_shapes(g), GF_OK);
    assert_true(y->type.rank >= 0);
    int64_t d[16];
    for (int i = 0; i < y->type.rank; i++)
        d[i] = y->type.dims[i].value;
    struct gf_tensor *t = gf_tensor_new(b->m, NULL, dt, y->type.rank, d, NULL);
    for (size_t i = 0; i < t->nelem; i++)
        put(t, i, 2 * rnd() - 1);
    struct gf_value *r = gf_graph_add_initializer(g, "R_weight", t);
    struct gf_value *yr = gf_graph_new_value(g, "YR", NULL);
    struct gf_value *loss = gf_graph_new_value(g, "loss", NULL);
    struct gf_value *in2[2] = {y, r};
    assert_non_null(gf_graph_add_node(g, "Mul", "", "loss_mul", 2, in2, 1, &yr));
    struct gf_node *n = gf_graph_add_node(g, "ReduceSum", "", "loss_sum", 1, &yr, 1, &loss);
    assert_non_null(n);
    assert_int_equal(gf_node_set_attr_int(n, "keepdims", 0), GF_OK);
    assert_int_equal(gf_graph_add_output(g, loss), GF_OK);
}

/* Builds `spec` in dtype dt from a fixed seed (so both builds hold the
 * same values, float-representable). */
static struct built build(const char *spec, int64_t opset, enum gf_dtype dt, bool with_loss)
{
    struct built b = {.m = gf_model_new(8, "t")};
    char buf[8192], *p = buf, *st;
    assert_non_null(b.m);
    assert_int_equal(gf_model_set_opset(b.m, "", opset), GF_OK);
    rng_state = 0x9e3779b97f4a7c15ull;
    assert_true(strlen(spec) < sizeof(buf));
    snprintf(buf, sizeof(buf), "%s", spec);
    for (int id = 0; (st = strsep(&p, ";")); id++) {
        while (*st == ' ')
            st++;
        if (!*st)
            continue;
        if (strchr(st, '(')) {
            stmt_node(&b, dt, st, id);
            continue;
        }
        char *w[4] = {NULL};
        char *q = st;
        for (int k = 0; k < 4 && (w[k] = strsep(&q, " ")); k++)
            ;
        stmt_value(&b, dt, w[0], w[1], w[2], w[3]);
    }
    if (with_loss)
        add_loss(&b, dt);
    return b;
}

/* ---- running and finite differences ------------------------------------------------ */

static int failures; /* checks failed so far (each is printed) */

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

static struct gf_tensor **run(struct gf_model *m, struct gf_session **s, size_t *n_out)
{
    struct gf_tensor **out;
    if (!*s && gf_session_new(m, NULL, s) != GF_OK)
        fail_msg("session: %s", gf_last_error());
    if (gf_session_run(*s, 0, NULL, &out, n_out) != GF_OK)
        fail_msg("run: %s", gf_last_error());
    return out;
}

static size_t output_index(const struct gf_model *m, const char *name)
{
    for (size_t i = 0; i < m->graph->n_outputs; i++)
        if (strcmp(m->graph->outputs[i]->name, name) == 0)
            return i;
    fail_msg("no output '%s'", name);
    return 0;
}

static double max_abs(const struct gf_tensor *t)
{
    double m = 0;
    for (size_t i = 0; i < t->nelem; i++)
        m = fmax(m, fabs(gf_tensor_get_f64(t, i)));
    return m;
}

/* |a - b| <= RTOL * max(|b|, 0.01 * scale) */
static bool close_to(double a, double b, double scale)
{
    return fabs(a - b) <= RTOL * fmax(fabs(b), 0.01 * scale) + 1e-15;
}

/* Reference: a double build whose parameters are graph inputs (so the
 * planner does not fold what depends on them); loss(theta) by moving one
 * element at a time. */
struct ref {
    struct built b;
    struct gf_session *s;
    size_t loss_at;
};

static long n_runs;
static double ref_loss(struct ref *r)
{
    size_t n;
    n_runs++;
    struct gf_tensor **out = run(r->b.m, &r->s, &n);
    return gf_tensor_get_f64(out[r->loss_at], 0);
}

static double ref_fd(struct ref *r, struct gf_tensor *t, size_t i)
{
    double *p = (double *)t->data + i, x = *p, h = 1e-6 * (fabs(x) > 1 ? fabs(x) : 1);
    *p = x + h;
    double lp = ref_loss(r);
    *p = x - h;
    double lm = ref_loss(r);
    *p = x;
    return (lp - lm) / (2 * h);
}

/* Elements to check: all, or FD_ELEMS spread pseudo-randomly. */
static size_t pick(size_t n, size_t k)
{
    return n <= FD_ELEMS ? k : (k * 2654435761u + 17) % n;
}

/* Compares the gradients `got` (output of a differentiated build) of each
 * parameter with central differences on the reference. */
static bool compare_fd(const char *what, struct ref *r, struct gf_model *m,
                       struct gf_tensor **got, const struct built *b)
{
    for (size_t p = 0; p < b->n_params; p++) {
        char gname[256];
        snprintf(gname, sizeof(gname), "%s_grad", b->params[p]);
        const struct gf_tensor *g = got[output_index(m, gname)];
        struct gf_value *pv = gf_graph_find(r->b.m->graph, b->params[p]);
        struct gf_tensor *t = pv->init;
        size_t n = t->nelem < FD_ELEMS ? t->nelem : FD_ELEMS;
        double fd[FD_ELEMS], fmax = 0;
        assert_int_equal(g->nelem, t->nelem);
        for (size_t k = 0; k < n; k++) {
            fd[k] = ref_fd(r, t, pick(t->nelem, k));
            fmax = fabs(fd[k]) > fmax ? fabs(fd[k]) : fmax;
        }
        for (size_t k = 0; k < n; k++) {
            double a = gf_tensor_get_f64(g, pick(t->nelem, k));
            double scale = fabs(fd[k]) > 0.01 * fmax ? fabs(fd[k]) : 0.01 * fmax;
            if (!(fabs(a - fd[k]) <= RTOL * scale + 1e-12)) {
                report("%s: d loss / d %s[%zu]: analytic %.9g, finite differences %.9g",
                       what, b->params[p], pick(t->nelem, k), a, fd[k]);
                return false;
            }
        }
    }
    return true;
}

static void ref_open(struct ref *r, const char *spec, int64_t opset)
{
    r->b = build(spec, opset, GF_DOUBLE, true);
    r->s = NULL;
    for (size_t p = 0; p < r->b.n_params; p++)
        assert_int_equal(gf_graph_add_input(r->b.m->graph,
                                            gf_graph_find(r->b.m->graph, r->b.params[p])),
                         GF_OK);
    r->loss_at = output_index(r->b.m, "loss");
}

static void ref_close(struct ref *r)
{
    gf_session_free(r->s);
    gf_model_free(r->b.m);
}

struct optest {
    const char *name;
    int64_t opset; /* 0: 18 */
    const char *spec;
};

/* Fuses b (its parameters made graph inputs first); true when op `want`
 * was written. */
static bool fuse_built(struct built *b, const char *want)
{
    bool found = false;
    for (size_t p = 0; p < b->n_params; p++)
        assert_int_equal(gf_graph_add_input(b->m->graph, gf_graph_find(b->m->graph,
                                                                       b->params[p])), GF_OK);
    assert_int_equal(gf_pass_fuse(b->m, NULL, NULL), GF_OK);
    for (const struct gf_node *n = b->m->graph->first; n; n = n->next)
        found |= strncmp(n->op_type, want, strlen(want)) == 0 && n->domain &&
                 strcmp(n->domain, "graphfuse") == 0;
    return found;
}

/* Differentiates a build of t in dt (fused first when `fused` names the
 * fused op gf_pass_fuse must write) and checks it against r. */
static void check_build(const struct optest *t, const char *fused, int64_t opset,
                        enum gf_dtype dt, struct ref *r)
{
    char what[256];
    const char *name = t->name, *spec = t->spec;
    struct built b = build(spec, opset, dt, true);
    /* some patterns refuse double (LayerNorm): the float build must fuse */
    if (fused && !fuse_built(&b, fused) && dt == GF_FLOAT) {
        report("%s (%s): no %s after fusion", name, gf_dtype_name(dt), fused);
        gf_model_free(b.m);
        return;
    }
    struct gf_autodiff_opts o = {.n_params = b.n_params, .params = b.params};
    struct gf_autodiff_result res;
    struct gf_session *s = NULL;
    struct gf_tensor **out;
    size_t n;
    snprintf(what, sizeof(what), "%s (%s)", name, gf_dtype_name(dt));
    if (gf_pass_autodiff(b.m, &o, &res) != GF_OK)
        report("%s: autodiff: %s", what, gf_last_error());
    else if (gf_graph_validate(b.m->graph) != GF_OK)
        report("%s: validate: %s", what, gf_last_error());
    else if (res.n_params != b.n_params)
        report("%s: %zu parameters, expected %zu", what, res.n_params, b.n_params);
    else if (gf_session_new(b.m, NULL, &s) != GF_OK ||
             gf_session_run(s, 0, NULL, &out, &n) != GF_OK)
        report("%s: run: %s", what, gf_last_error());
    else
        compare_fd(what, r, b.m, out, &b);
    gf_session_free(s);
    gf_model_free(b.m);
}

static void check_op_fused(const struct optest *t, const char *fused)
{
    int64_t opset = t->opset ? t->opset : 18;
    struct ref r;
    ref_open(&r, t->spec, opset);
    check_build(t, fused, opset, GF_DOUBLE, &r);
    check_build(t, fused, opset, GF_FLOAT, &r);
    ref_close(&r);
}

static void check_op(const struct optest *t)
{
    check_op_fused(t, NULL);
}

/* ---- every op with a rule --------------------------------------------------------- */

static const struct optest op_tests[] = {
    /* binary, with broadcasting both ways */
    {"Add", 0, "p A 3x7; p B 7; Add(A,B)->Y"},
    {"Add outer", 0, "p A 3x1; p B 1x7; Add(A,B)->Y"},
    {"Sub", 0, "p A 2x3x4; p B 3x1; Sub(A,B)->Y"},
    {"Mul", 0, "p A 2x3x5; p B 3x1; Mul(A,B)->Y"},
    {"Mul self", 0, "p A 4x3; Mul(A,A)->Y"},
    {"Div", 0, "p A 3x4; pp B 4; Div(A,B)->Y"},
    {"Div scalar", 0, "pp A 5; pp B s; Div(B,A)->Y"},
    {"Pow 3", 0, "pp A 3x5; k e 3.0; Pow(A,e)->Y"},
    {"Pow 2", 0, "p A 3x5; k e 2.0; Pow(A,e)->Y"},
    {"Pow 0.5", 0, "pp A 7; k e 0.5; Pow(A,e)->Y"},
    {"Pow var", 0, "pp A 3x5; pp E 5; Pow(A,E)->Y"},
    /* unary */
    {"Sqrt", 0, "pp A 3x7; Sqrt(A)->Y"},
    {"Reciprocal", 0, "pp A 3x7; Reciprocal(A)->Y"},
    {"Neg", 0, "p A 3x7; Neg(A)->Y"},
    {"Abs", 0, "p A 3x7; Abs(A)->Y"},
    {"Exp", 0, "p A 3x7; Exp(A)->Y"},
    {"Log", 0, "pp A 3x7; Log(A)->Y"},
    {"Sin", 0, "p A 3x7; Sin(A)->Y"},
    {"Cos", 0, "p A 3x7; Cos(A)->Y"},
    {"Tanh", 0, "p A 3x7; Tanh(A)->Y"},
    {"Sigmoid", 0, "p A 3x7; Sigmoid(A)->Y"},
    {"Relu", 0, "p A 3x7; Relu(A)->Y"},
    {"LeakyRelu", 0, "p A 3x7; LeakyRelu(A)->Y [alpha=0.2]"},
    {"Elu", 0, "p A 3x7; Elu(A)->Y [alpha=0.7]"},
    {"Selu", 0, "p A 3x7; Selu(A)->Y"},
    {"Softplus", 0, "p A 3x7; Softplus(A)->Y"},
    {"Softsign", 0, "p A 3x7; Softsign(A)->Y"},
    {"HardSigmoid", 0, "p A 3x7; HardSigmoid(A)->Y [alpha=0.9 beta=0.4]"},
    {"HardSwish", 0, "p A 5x7; k f 4.5; Mul(A,f)->X; HardSwish(X)->Y"},
    {"Erf", 0, "p A 3x7; Erf(A)->Y"},
    {"Gelu", 20, "p A 3x7; Gelu(A)->Y"},
    {"Gelu tanh", 20, "p A 3x7; Gelu(A)->Y [approximate=\"tanh\"]"},
    {"Clip", 0, "p A 4x5; k lo -0.5; k hi 0.5; Clip(A,lo,hi)->Y"},
    {"Clip min only", 0, "p A 4x5; k lo -0.3; Clip(A,lo)->Y"},
    {"Clip bounds", 0, "p A 4x5; p lo s; p hi s; Clip(A,lo,hi)->Y"},
    {"Clip attrs", 6, "p A 4x5; Clip(A)->Y [min=-0.4 max=0.6]"},
    /* variadic */
    {"Max", 0, "p A 3x4; p B 4; p C 3x1; Max(A,B,C)->Y"},
    {"Min", 0, "p A 3x4; p B 4; Min(A,B)->Y"},
    {"Max one", 0, "p A 3x4; Max(A)->Y"},
    {"Mean", 0, "p A 3x4; p B 4; p C 3x1; Mean(A,B,C)->Y"},
    {"Sum", 0, "p A 3x4; p B 4; p C 3x1; Sum(A,B,C)->Y"},
    {"Where", 0, "b C 3x4 1/0/1/1/0/0/1/0/1/1/0/1; p A 3x4; p B 4; Where(C,A,B)->Y"},
    /* plumbing */
    {"Cast", 0, "p A 3x4; Cast(A)->T [to=11]; Mul(T,T)->U; Cast(U)->Y [to=DT]"},
    {"CastLike", 0, "p A 3x4; CastLike(A,A)->Y"},
    {"Identity", 0, "p A 3x4; Identity(A)->Y"},
    {"Dropout train", 13, "p A 5x6; k r 0.3; b t s 1; Dropout(A,r,t)->Y,M [seed=7]"},
    {"Dropout no mask", 13, "p A 5x6; k r 0.4; b t s 1; Dropout(A,r,t)->Y [seed=3]"},
    {"Dropout eval", 13, "p A 5x6; k r 0.4; Dropout(A,r)->Y"},
    {"Dropout legacy", 6, "p A 5x6; Dropout(A)->Y,M [ratio=0.25 is_test=0]"},
    /* reductions */
    {"ReduceSum", 13, "p A 3x4x5; i ax 2 0/2; ReduceSum(A,ax)->Y [keepdims=0]"},
    {"ReduceSum neg keep", 13, "p A 3x4x5; i ax 1 -1; ReduceSum(A,ax)->Y"},
    {"ReduceSum all", 13, "p A 3x4x5; ReduceSum(A)->Y [keepdims=0]"},
    {"ReduceSum attr", 11, "p A 3x4x5; ReduceSum(A)->Y [axes=[1] keepdims=0]"},
    {"ReduceMean", 18, "p A 3x4x5; i ax 1 1; ReduceMean(A,ax)->Y [keepdims=0]"},
    {"ReduceMean attr", 17, "p A 3x4x5; ReduceMean(A)->Y [axes=-1/0]"},
    {"ReduceMax", 18, "p A 3x4x5; i ax 1 2; ReduceMax(A,ax)->Y [keepdims=0]"},
    {"ReduceMin", 18, "p A 3x4x5; ReduceMin(A)->Y"},
    {"ReduceProd", 18, "pp A 3x4x5; i ax 1 1; ReduceProd(A,ax)->Y [keepdims=0]"},
    {"ReduceL1", 18, "p A 3x4x5; i ax 1 0; ReduceL1(A,ax)->Y"},
    {"ReduceL2", 18, "p A 3x4x5; i ax 2 0/2; ReduceL2(A,ax)->Y [keepdims=0]"},
    {"ReduceSumSquare", 18, "p A 3x4x5; i ax 1 1; ReduceSumSquare(A,ax)->Y"},
    {"ReduceLogSumExp", 18, "p A 3x4x5; i ax 1 -1; ReduceLogSumExp(A,ax)->Y [keepdims=0]"},
    /* matrix products */
    {"MatMul 2-D", 0, "p A 3x4; p B 4x5; MatMul(A,B)->Y"},
    {"MatMul linear", 0, "p A 2x3x4; p B 4x5; MatMul(A,B)->Y"},
    {"MatMul batched", 0, "p A 2x3x4; p B 2x4x5; MatMul(A,B)->Y"},
    {"MatMul bcast", 0, "p A 2x1x3x4; p B 3x4x5; MatMul(A,B)->Y"},
    {"MatMul A 2-D", 0, "p A 3x4; p B 2x4x5; MatMul(A,B)->Y"},
    {"MatMul vec A", 0, "p A 4; p B 2x4x5; MatMul(A,B)->Y"},
    {"MatMul vec B", 0, "p A 2x3x4; p B 4; MatMul(A,B)->Y"},
    {"MatMul dot", 0, "p A 7; p B 7; MatMul(A,B)->Y"},
    {"Gemm", 0, "p A 3x4; p B 4x5; p C 5; Gemm(A,B,C)->Y [alpha=0.7 beta=1.3]"},
    {"Gemm tA tB", 0, "p A 4x3; p B 5x4; p C 3x1; Gemm(A,B,C)->Y [transA=1 transB=1]"},
    {"Gemm tA", 0, "p A 4x3; p B 4x5; Gemm(A,B)->Y [transA=1 alpha=2.0]"},
    {"Gemm tB", 0, "p A 3x4; p B 5x4; p C 3x5; Gemm(A,B,C)->Y [transB=1]"},
    /* layout */
    {"Transpose", 0, "p A 2x3x4; Transpose(A)->Y [perm=2/0/1]"},
    {"Transpose default", 0, "p A 2x3x4; Transpose(A)->Y"},
    {"Reshape", 0, "p A 2x3x4; i s 2 4/-1; Reshape(A,s)->Y"},
    {"Flatten", 0, "p A 2x3x4; Flatten(A)->Y [axis=2]"},
    {"Squeeze", 0, "p A 3x1x4; i ax 1 1; Squeeze(A,ax)->Y"},
    {"Unsqueeze", 0, "p A 3x4; i ax 2 0/3; Unsqueeze(A,ax)->Y"},
    {"Unsqueeze attr", 11, "p A 3x4; Unsqueeze(A)->Y [axes=[1]]"},
    {"Concat", 0, "p A 2x3; p B 2x1; p C 2x4; Concat(A,B,C)->Y [axis=1]"},
    {"Concat attr", 11, "p A 2x3; p B 3x3; Concat(A,B)->Y [axis=0]"},
    {"Split", 0, "p A 2x7; i sp 3 2/4/1; Split(A,sp)->Y,Q,R [axis=1]"},
    {"Split equal", 18, "p A 2x6; Split(A)->P,Q [axis=1 num_outputs=2]; Mul(P,Q)->Y"},
    {"Split attr", 11, "p A 6x2; Split(A)->P,Q [split=2/4]; Sum(Q)->Y"},
    {"Slice", 0, "p A 5x7; i st 2 1/-1; i en 2 4/-8; i ax 2 0/1; i sp 2 1/-2; "
                 "Slice(A,st,en,ax,sp)->Y"},
    {"Slice default axes", 0, "p A 5x7; i st 1 2; i en 1 100; Slice(A,st,en)->Y"},
    {"Slice attrs", 9, "p A 5x7; Slice(A)->Y [starts=1/0 ends=3/5]"},
    {"Expand", 0, "p A 3x1; i s 3 2/3/4; Expand(A,s)->Y"},
    {"Tile", 0, "p A 2x3; i r 2 2/3; Tile(A,r)->Y"},
    {"Pad", 0, "p A 3x4; i pd 4 1/0/2/1; Pad(A,pd)->Y [mode=\"constant\"]"},
    {"Pad crop", 0, "p A 3x4; i pd 4 0/-1/1/0; Pad(A,pd)->Y"},
    {"Pad attr", 10, "p A 3x4; Pad(A)->Y [pads=1/1/0/2]"},
    {"CumSum", 0, "p A 3x5; i ax s 1; CumSum(A,ax)->Y"},
    {"CumSum excl rev", 0, "p A 3x5; i ax s 0; CumSum(A,ax)->Y [exclusive=1 reverse=1]"},
    {"Trilu", 0, "p A 4x5; Trilu(A)->Y"},
    {"Trilu lower k", 0, "p A 4x5; i kk s 1; Trilu(A,kk)->Y [upper=0]"},
    {"Einsum matmul", 12, "p A 3x4; p B 4x5; Einsum(A,B)->Y [equation=\"ij,jk->ik\"]"},
    {"Einsum batched", 12, "p A 2x3x4; p B 2x4x5; Einsum(A,B)->Y [equation=\"bij,bjk->bik\"]"},
    {"Einsum ellipsis", 12, "p A 2x3x4; p B 4x5; "
                            "Einsum(A,B)->Y [equation=\"...ij,jk->...ik\"]"},
    {"Einsum bcast", 12, "p A 1x3x4; p B 2x4x5; Einsum(A,B)->Y [equation=\"...ij,...jk\"]"},
    {"Einsum implicit", 12, "p A 3x4; p B 4x5; Einsum(A,B)->Y [equation=\"ij,jk\"]"},
    {"Einsum outer", 12, "p A 3; p B 4; Einsum(A,B)->Y [equation=\"i,j->ij\"]"},
    {"Einsum dot", 12, "p A 3x4; p B 3x4; Einsum(A,B)->Y [equation=\"ij,ij->\"]"},
    {"Einsum transpose", 12, "p A 3x4; Einsum(A)->Y [equation=\"ij->ji\"]"},
    {"Einsum three", 12, "p A 2x3; p B 3x4; p C 4x2; "
                         "Einsum(A,B,C)->Y [equation=\"ij,jk,kl->il\"]"},
    /* indexing */
    {"Gather", 0, "p A 5x3; i I 2x3 0/2/2/4/-1/0; Gather(A,I)->Y"},
    {"Gather axis1", 0, "p A 3x4x2; i I 3 3/0/3; Gather(A,I)->Y [axis=1]"},
    {"Gather scalar", 0, "p A 3x4; i I s 2; Gather(A,I)->Y [axis=1]"},
    {"GatherElements", 0, "p A 3x4; i I 2x4 0/1/2/0/2/2/0/1; GatherElements(A,I)->Y"},
    {"GatherElements ax1", 0, "p A 3x4; i I 3x2 3/3/0/-1/1/2; GatherElements(A,I)->Y [axis=1]"},
    {"GatherND", 16, "p D 4x3; i I 3x1 1/3/1; GatherND(D,I)->Y"},
    {"ScatterND", 16, "p D 4x3; i I 2x1 1/3; p U 2x3; ScatterND(D,I,U)->Y"},
    {"ScatterND add", 16, "p D 4x3; i I 3x1 1/3/1; p U 3x3; ScatterND(D,I,U)->Y "
                          "[reduction=\"add\"]"},
    {"ScatterElements", 16, "p D 3x4; i I 2x4 0/1/2/0/2/2/0/1; p U 2x4; "
                            "ScatterElements(D,I,U)->Y"},
    {"TopK", 0, "p A 3x6; i kk 1 3; TopK(A,kk)->Y,Ix [axis=1]"},
    /* softmax, normalization, losses */
    {"Softmax", 0, "p A 2x3x4; Softmax(A)->Y [axis=1]"},
    {"Softmax last", 0, "p A 3x5; Softmax(A)->Y"},
    {"Softmax coerced", 11, "p A 2x3x4; Softmax(A)->Y [axis=1]"},
    {"LogSoftmax", 0, "p A 2x3x4; LogSoftmax(A)->Y [axis=-1]"},
    {"LogSoftmax coerced", 11, "p A 2x3x4; LogSoftmax(A)->Y"},
    {"LayerNorm", 17, "p A 2x3x5; p S 5; p B 5; LayerNormalization(A,S,B)->Y"},
    {"LayerNorm axis1", 17, "p A 2x3x5; p S 3x5; LayerNormalization(A,S)->Y [axis=1 "
                            "epsilon=0.01]"},
    {"LayerNorm bcast", 17, "p A 2x3x5; p S 1x5; p B 5; LayerNormalization(A,S,B)->Y "
                            "[axis=1]"},
    {"LayerNorm stats", 17, "p A 4x6; p S 6; p B 6; LayerNormalization(A,S,B)->Y,Mu,Rs"},
    {"SCE mean", 13, "p A 5x4; i L 5 1/0/3/-100/2; SoftmaxCrossEntropyLoss(A,L)->Y "
                     "[ignore_index=-100]"},
    {"SCE weights sum", 13, "p A 5x4; i L 5 1/0/3/3/2; cp W 4; "
                            "SoftmaxCrossEntropyLoss(A,L,W)->Y [reduction=\"sum\"]"},
    {"SCE weights mean", 13, "p A 5x4; i L 5 1/0/3/1/2; cp W 4; "
                             "SoftmaxCrossEntropyLoss(A,L,W)->Y [ignore_index=1]"},
    {"SCE 3-D none", 13, "p A 3x4x2; i L 3x2 1/0/3/-1/2/2; "
                         "SoftmaxCrossEntropyLoss(A,L)->Y [reduction=\"none\" ignore_index=-1]"},
    {"SCE log_prob", 13, "p A 5x4; i L 5 1/0/3/2/2; SoftmaxCrossEntropyLoss(A,L)->T,LP; "
                         "ReduceSum(LP)->U [keepdims=0]; k h 0.1; Mul(U,h)->V; Add(T,V)->Y"},
    {"NLL", 13, "p A 5x4; i L 5 1/0/3/1/2; NegativeLogLikelihoodLoss(A,L)->Y [ignore_index=1]"},
    {"NLL weights", 13, "p A 5x4; i L 5 1/0/3/3/2; cp W 4; "
                        "NegativeLogLikelihoodLoss(A,L,W)->Y"},
    {"NLL 3-D none", 13, "p A 3x4x2; i L 3x2 1/0/3/2/2/0; "
                         "NegativeLogLikelihoodLoss(A,L)->Y [reduction=\"none\"]"},
    /* an integer path carries no gradient: only the direct use of A counts */
    {"int path", 0, "p A 3x4; k s 3.0; Mul(A,s)->B; Cast(B)->I [to=7]; Cast(I)->F [to=DT]; "
                    "Add(F,A)->Y"},
    /* a value with several users; a chain through several rules */
    {"several users", 0, "p A 3x4; Exp(A)->E; Mul(E,A)->F; Add(F,E)->G; Tanh(G)->Y"},
    {"attention", 0, "p Q 2x3x4; p K 2x3x4; Transpose(K)->KT [perm=0/2/1]; "
                     "MatMul(Q,KT)->S; k sc 0.5; Mul(S,sc)->T; Softmax(T)->P; MatMul(P,K)->Y"},
};

/* Fused ops made by the fusion passes, differentiated by their own rules
 * (grad_rules_fused.c) or, for SiLU, Gelu and LinearCrossEntropy with
 * reduction none, through their function bodies (gf_grad_inline). */
static const struct {
    struct optest t;
    const char *fused; /* the op gf_pass_fuse must write */
} fused_tests[] = {
    /* (a Neg keeps the loss's Mul by R from making these SwiGLU / GeGLU) */
    {{"fused SiLU", 18, "p A 3x7; Sigmoid(A)->S; Mul(A,S)->T; Neg(T)->Y"}, "SiLU"},
    {{"fused SwiGLU", 18, "p A 3x7; p U 3x7; Sigmoid(A)->S; Mul(A,S)->T; Mul(T,U)->Y"},
     "SwiGLU"},
    {{"fused Gelu", 18, "p A 3x7; k h 0.5; k c 0.044715; k s 0.7978845608028654; k one 1.0; "
                        "k three 3.0; Pow(A,three)->P; Mul(P,c)->Q; Add(A,Q)->R; Mul(R,s)->S; "
                        "Tanh(S)->T; Add(T,one)->U; Mul(A,h)->H; Mul(H,U)->G; Neg(G)->Y"},
     "Gelu"},
    {{"fused GeGLU", 20, "p A 3x7; p U 3x7; Gelu(A)->G; Mul(G,U)->Y"}, "GeGLU"},
    {{"fused RMSNorm", 18, "p A 3x8; p W 8; k two 2.0; k eps 0.000001; i ax 1 -1; "
                           "Pow(A,two)->P; ReduceMean(P,ax)->M; Add(M,eps)->E; Sqrt(E)->R; "
                           "Reciprocal(R)->I; Mul(A,I)->N; Mul(W,N)->Y"}, "RMSNorm"},
    {{"fused LayerNorm", 18, "p A 3x8; p S 8; p B 8; LayerNormalization(A,S,B)->Y"},
     "LayerNorm"},
    {{"fused AddLayerNorm", 18, "p A 3x8; p S 8; p B 8; p R0 3x8; Add(A,R0)->X; "
                                "LayerNormalization(X,S,B)->Y"}, "AddLayerNorm"},
    {{"fused AddRMSNorm", 18, "p A 3x8; p R0 3x8; p W 8; k two 2.0; k eps 0.000001; i ax 1 -1; "
                              "Add(A,R0)->X; Pow(X,two)->P; ReduceMean(P,ax)->M; Add(M,eps)->E; "
                              "Sqrt(E)->R; Reciprocal(R)->I; Mul(X,I)->N; Mul(W,N)->T; "
                              "Add(T,X)->Y"}, "AddRMSNorm"},
    {{"fused MatMulEpilogue", 18, "p A 2x3x4; p W 4x5; p B 5; MatMul(A,W)->M; Add(M,B)->Y"},
     "MatMulEpilogue"},
    {{"fused MatMulEpilogue relu", 18, "p A 2x3x4; p W 4x5; p B 5; MatMul(A,W)->M; Add(M,B)->N; "
                                       "Relu(N)->Y"}, "MatMulEpilogue"},
    {{"fused SoftmaxCrossEntropy", 18, "p L 4x5; i T 4 0/3/1/4; "
                                       "SoftmaxCrossEntropyLoss(L,T)->Y [reduction=\"sum\"]"},
     "SoftmaxCrossEntropy"},
    {{"fused SoftmaxCrossEntropy none", 18, "p L 4x5x2; i T 4x2 0/3/1/4/2/2/0/1; "
                                            "SoftmaxCrossEntropyLoss(L,T)->Y [reduction=\"none\"]"},
     "SoftmaxCrossEntropy"},
    {{"fused LinearCrossEntropy", 18, "p H 4x3; p W 3x5; i T 4 0/3/1/4; MatMul(H,W)->Z; "
                                      "SoftmaxCrossEntropyLoss(Z,T)->Y"}, "LinearCrossEntropy"},
    {{"fused LinearCrossEntropy none", 18, "p H 4x3; p W 3x5; i T 4 0/3/1/4; MatMul(H,W)->Z; "
                                           "SoftmaxCrossEntropyLoss(Z,T)->Y [reduction=\"none\"]"},
     "LinearCrossEntropy"},
};

static void test_fused(void **state)
{
    (void)state;
    failures = 0;
    for (size_t i = 0; i < sizeof(fused_tests) / sizeof(fused_tests[0]); i++)
        check_op_fused(&fused_tests[i].t, fused_tests[i].fused);
    assert_int_equal(failures, 0);
}

static void test_ops(void **state)
{
    (void)state;
    failures = 0;
    for (size_t i = 0; i < sizeof(op_tests) / sizeof(op_tests[0]); i++)
        check_op(&op_tests[i]);
    print_message("%ld evaluations of reference losses\n", n_runs);
    assert_int_equal(failures, 0);
}

/* ---- random shapes --------------------------------------------------------------- */

static uint64_t shape_rng = 777;

static int pick_int(int n)
{
    shape_rng = shape_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((shape_rng >> 33) % (uint64_t)n);
}

static void dims_str(char *buf, size_t len, int rank, const int *d)
{
    size_t k = 0;
    if (rank == 0)
        snprintf(buf, len, "s");
    for (int i = 0; i < rank; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d", i ? "x" : "", d[i]);
}

/* Binary elementwise ops on random shapes of odd sizes, the second operand
 * broadcast (fewer axes, some of size 1), and MatMul with random batch
 * broadcasting. */
static void test_random_shapes(void **state)
{
    static const int sizes[] = {1, 2, 3, 5, 7};
    static const char *ops[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
    char spec[512], da[64], db[64], name[192];
    (void)state;
    failures = 0;
    for (int t = 0; t < 28; t++) {
        int ra = 1 + pick_int(4), rb = pick_int(ra + 1), a[4], b[4];
        for (int i = 0; i < ra; i++)
            a[i] = sizes[pick_int(5)];
        for (int i = 0; i < rb; i++)
            b[i] = pick_int(3) == 0 ? 1 : a[ra - rb + i];
        const char *op = ops[t % 7];
        bool swap = pick_int(2);
        dims_str(da, sizeof(da), ra, a);
        dims_str(db, sizeof(db), rb, b);
        snprintf(spec, sizeof(spec), "pp A %s; pp B %s; %s(%s)->Y", da, db, op,
                 swap ? "B,A" : "A,B");
        snprintf(name, sizeof(name), "random %s [%s] [%s]", op, da, db);
        check_op(&(struct optest){name, 0, spec});
    }
    for (int t = 0; t < 8; t++) {
        int m = sizes[pick_int(5)], k = sizes[pick_int(5)], n = sizes[pick_int(5)];
        int b1 = 1 + pick_int(3), b2 = pick_int(2) ? b1 : 1;
        char batch[16] = ""; /* B batched like A, broadcast (1), or 2-D */
        if (t % 2 == 0)
            snprintf(batch, sizeof(batch), "%dx", b2);
        snprintf(spec, sizeof(spec), "p A %dx%dx%d; p B %s%dx%d; MatMul(A,B)->Y", b1, m, k,
                 batch, k, n);
        snprintf(name, sizeof(name), "random MatMul %d", t);
        check_op(&(struct optest){name, 0, spec});
    }
    assert_int_equal(failures, 0);
}

/* ---- the pass's structure ----------------------------------------------------------- */

static size_t count_outputs_with_prefix(const struct gf_graph *g, const char *prefix)
{
    size_t n = 0;
    for (size_t i = 0; i < g->n_outputs; i++)
        n += strncmp(g->outputs[i]->name, prefix, strlen(prefix)) == 0;
    return n;
}

/* A tied weight (the same initializer read by Gather and by a Transpose
 * feeding MatMul, as gpt2's embedding and lm head): one summed gradient. */
static void test_tied(void **state)
{
    static const char *spec =
        "p W 5x3; i I 4 1/0/4/1; Gather(W,I)->H; Transpose(W)->WT [perm=1/0]; MatMul(H,WT)->Y";
    (void)state;
    struct built b = build(spec, 18, GF_FLOAT, true);
    struct gf_autodiff_opts o = {.n_params = 1, .params = b.params};
    struct gf_autodiff_result r;
    assert_int_equal(gf_pass_autodiff(b.m, &o, &r), GF_OK);
    assert_int_equal(r.n_params, 1);
    assert_string_equal(r.grads[0]->name, "W_grad");
    assert_int_equal(count_outputs_with_prefix(b.m->graph, "W_grad"), 1);
    assert_non_null(r.grads[0]->producer);
    assert_string_equal(r.grads[0]->producer->op_type, "Add"); /* the two uses summed */
    gf_model_free(b.m);
    failures = 0;
    check_op(&(struct optest){"tied", 18, spec});
    assert_int_equal(failures, 0);
}

/* MatMul's gradients read B^T and A^T through MatMulEpilogue's transB /
 * transA, no Transpose node, also with broadcast batch dims (summed back
 * by SumToShape) and a vector A; still equal to finite differences. */
static void test_matmul_transposes(void **state)
{
    static const struct {
        const char *spec;
        int ta, tb; /* backward MatMulEpilogues with transA / transB */
    } cases[] = {
        {"p A 2x1x3x4; p B 3x4x5; MatMul(A,B)->Y", 1, 1},
        {"p A 3x4; p B 2x4x5; MatMul(A,B)->Y", 1, 1},
        {"p A 2x3x4; p B 2x4x5; MatMul(A,B)->Y", 1, 1},
        {"p A 2x3x4; p B 4x5; MatMul(A,B)->Y", 0, 1}, /* dB: one Gemm over the rows */
        {"p A 4; p B 2x4x5; MatMul(A,B)->Y", 0, 1},
    };
    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct built b = build(cases[c].spec, 18, GF_FLOAT, true);
        size_t nodes = b.m->graph->n_nodes, k = 0;
        struct gf_autodiff_opts o = {.n_params = b.n_params, .params = b.params};
        struct gf_autodiff_result r;
        int ta = 0, tb = 0, transposes = 0;
        assert_int_equal(gf_pass_autodiff(b.m, &o, &r), GF_OK);
        assert_int_equal(gf_graph_validate(b.m->graph), GF_OK);
        for (const struct gf_node *n = b.m->graph->first; n; n = n->next, k++) {
            if (k < nodes)
                continue;
            transposes += n->op == GF_OP_TRANSPOSE;
            if (n->op == GF_OP_MATMUL_EPILOGUE) {
                assert_string_equal(n->domain, "graphfuse");
                ta += gf_node_attr_int(n, "transA", 0) != 0;
                tb += gf_node_attr_int(n, "transB", 0) != 0;
            }
        }
        if (transposes || ta != cases[c].ta || tb != cases[c].tb)
            fail_msg("%s: %d Transpose, %d transA, %d transB in the backward graph",
                     cases[c].spec, transposes, ta, tb);
        gf_model_free(b.m);
        failures = 0;
        check_op(&(struct optest){cases[c].spec, 18, cases[c].spec});
        assert_int_equal(failures, 0);
    }
}

/* Defaults: float initializers of rank >= 1 the loss depends on, in file
 * order; they become graph inputs keeping their data; "<p>_grad" outputs
 * of the same type.  A value only read by Shape gets no gradient. */
static void test_default_params(void **state)
{
    (void)state;
    struct built b = build("p P 3x4; p A 3x4; c U 3x4; k s 2.0; i ax 1 1; Shape(P)->S; "
                           "Reshape(A,S)->B; Mul(B,s)->Y", 18, GF_FLOAT, true);
    size_t nodes = b.m->graph->n_nodes;
    struct gf_autodiff_result r;
    assert_int_equal(gf_pass_autodiff(b.m, NULL, &r), GF_OK);
    assert_string_equal(r.loss->name, "loss");
    assert_int_equal(r.n_params, 2); /* A and the loss's R_weight: not P, U, s, ax */
    assert_string_equal(r.params[0]->name, "A");
    assert_string_equal(r.params[1]->name, "R_weight");
    for (size_t i = 0; i < r.n_params; i++) {
        assert_true(r.params[i]->is_input);
        assert_non_null(r.params[i]->init);
        assert_true(r.grads[i]->is_output);
        assert_int_equal(r.grads[i]->type.dtype, GF_FLOAT);
        assert_int_equal(r.grads[i]->type.rank, 2);
        assert_int_equal(r.grads[i]->type.dims[1].value, 4);
    }
    assert_string_equal(r.grads[0]->name, "A_grad");
    /* nothing differentiates the Shape node */
    int k = 0;
    for (const struct gf_node *n = b.m->graph->first; n; n = n->next, k++)
        if (k >= (int)nodes)
            assert_null(strstr(n->name, "Shape_grad"));
    assert_false(gf_graph_find(b.m->graph, "P")->is_input);
    assert_int_equal(gf_graph_validate(b.m->graph), GF_OK);
    gf_model_free(b.m);
}

/* A parameter the loss does not depend on, named explicitly: zeros. */
static void test_unreachable_param(void **state)
{
    (void)state;
    struct built b = build("p P 3x4; p A 3x4; Shape(P)->S; Reshape(A,S)->Y", 18, GF_FLOAT,
                           true);
    struct gf_autodiff_opts o = {.n_params = 2, .params = b.params};
    struct gf_autodiff_result r;
    assert_int_equal(gf_pass_autodiff(b.m, &o, &r), GF_OK);
    assert_string_equal(r.params[0]->name, "P");
    struct gf_session *s = NULL;
    size_t n;
    struct gf_tensor **out = run(b.m, &s, &n);
    const struct gf_tensor *g = out[output_index(b.m, "P_grad")];
    assert_int_equal(g->nelem, 12);
    for (size_t i = 0; i < g->nelem; i++)
        assert_true(gf_tensor_get_f64(g, i) == 0.0);
    gf_session_free(s);
    gf_model_free(b.m);
}

/* An op without a rule on the path is refused, naming node and op, before
 * the graph changes; so is an input the rule cannot differentiate. */
static void test_unsupported(void **state)
{
    static const struct {
        const char *spec, *want1, *want2;
    } cases[] = {
        {"p A 3x4; k b 0.7; Mod(A,b)->Y [fmod=1]", "n2_Mod", "no gradient rule for op Mod"},
        {"p A 3x4; p V s; i pd 4 1/0/0/0; Pad(A,pd,V)->Y", "n3_Pad", "input 2 ('V')"},
        {"p A 3x4; i pd 4 1/0/0/0; Pad(A,pd)->Y [mode=\"reflect\"]", "n2_Pad", "reflect"},
        {"p A 3x4; Einsum(A)->Y [equation=\"ij->i\"]", "n1_Einsum", "summed within it"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct built b = build(cases[i].spec, 18, GF_FLOAT, true);
        size_t nodes = b.m->graph->n_nodes, outs = b.m->graph->n_outputs;
        struct gf_autodiff_opts o = {.n_params = b.n_params, .params = b.params};
        struct gf_autodiff_result r;
        assert_int_equal(gf_pass_autodiff(b.m, &o, &r), GF_ERR_UNSUPPORTED);
        const char *msg = gf_last_error();
        if (!strstr(msg, cases[i].want1) || !strstr(msg, cases[i].want2))
            fail_msg("message '%s' lacks '%s' or '%s'", msg, cases[i].want1, cases[i].want2);
        if (i < 2) { /* found before anything is built */
            assert_int_equal(b.m->graph->n_nodes, nodes);
            assert_int_equal(b.m->graph->n_outputs, outs);
        }
        gf_model_free(b.m);
    }
}

/* A fused op's input its rule does not differentiate: the same error,
 * before anything is built (SoftmaxCrossEntropy's class weights, as the
 * ONNX op's). */
static void test_unsupported_fused(void **state)
{
    (void)state;
    struct built b = build("p L 4x5; pp Wc 5; i T 4 0/3/1/4; SoftmaxCrossEntropyLoss(L,T,Wc)->Y",
                           18, GF_FLOAT, true);
    assert_true(fuse_built(&b, "SoftmaxCrossEntropy"));
    size_t nodes = b.m->graph->n_nodes;
    struct gf_autodiff_opts o = {.n_params = b.n_params, .params = b.params};
    assert_int_equal(gf_pass_autodiff(b.m, &o, NULL), GF_ERR_UNSUPPORTED);
    const char *msg = gf_last_error();
    if (!strstr(msg, "SoftmaxCrossEntropy") || !strstr(msg, "input 2 ('Wc')"))
        fail_msg("message '%s' does not name the op and input 2 ('Wc')", msg);
    assert_int_equal(b.m->graph->n_nodes, nodes);
    gf_model_free(b.m);
}

/* The loss: the option, else the output "loss", else the only scalar float
 * output; otherwise an error naming the candidates. */
static void test_loss_choice(void **state)
{
    (void)state;
    const char *spec = "p A 3x4; ReduceSum(A)->a [keepdims=0]; ReduceMax(A)->b [keepdims=0]";
    struct gf_autodiff_result r;
    struct built b = build(spec, 18, GF_FLOAT, false);
    assert_int_equal(gf_graph_add_output(b.m->graph, gf_graph_find(b.m->graph, "a")), GF_OK);
    assert_int_equal(gf_graph_add_output(b.m->graph, gf_graph_find(b.m->graph, "b")), GF_OK);
    assert_int_equal(gf_pass_autodiff(b.m, NULL, &r), GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "'a', 'b'"));
    struct gf_autodiff_opts o = {.loss = "b"};
    assert_int_equal(gf_pass_autodiff(b.m, &o, &r), GF_OK);
    assert_string_equal(r.loss->name, "b");
    gf_model_free(b.m);

    b = build("p A 3x4; Relu(A)->h; ReduceSum(h)->total [keepdims=0]", 18, GF_FLOAT, false);
    assert_int_equal(gf_graph_add_output(b.m->graph, gf_graph_find(b.m->graph, "h")), GF_OK);
    assert_int_equal(gf_graph_add_output(b.m->graph, gf_graph_find(b.m->graph, "total")),
                     GF_OK);
    assert_int_equal(gf_pass_autodiff(b.m, NULL, &r), GF_OK);
    assert_string_equal(r.loss->name, "total");
    gf_model_free(b.m);

    b = build("p A 3x4; Relu(A)->h", 18, GF_FLOAT, false);
    assert_int_equal(gf_graph_add_output(b.m->graph, gf_graph_find(b.m->graph, "h")), GF_OK);
    assert_int_equal(gf_pass_autodiff(b.m, NULL, &r), GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "'h'"));
    struct gf_autodiff_opts bad = {.loss = "h", .n_params = 1,
                                   .params = (const char *[]){"nope"}};
    assert_int_equal(gf_pass_autodiff(b.m, &bad, &r), GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "'nope'"));
    gf_model_free(b.m);
}

/* The training graph saves and loads back (graphfuse opset imported). */
static void test_save(void **state)
{
    (void)state;
    struct built b = build("p A 3x4; Relu(A)->H; Softmax(H)->Y", 18, GF_FLOAT, true);
    struct gf_autodiff_result r;
    uint8_t *buf;
    size_t len;
    struct gf_model *back;
    assert_int_equal(gf_pass_autodiff(b.m, NULL, &r), GF_OK);
    assert_int_equal(gf_model_opset(b.m, "graphfuse"), 1);
    assert_int_equal(gf_model_save_buffer(b.m, &buf, &len), GF_OK);
    assert_int_equal(gf_model_load_buffer(buf, len, NULL, NULL, &back), GF_OK);
    assert_non_null(gf_graph_find(back->graph, "A_grad"));
    free(buf);
    gf_model_free(back);
    gf_model_free(b.m);
}

/* ---- the backward kernels: threads and bad data ------------------------------------ */

/* Runs b (no graph inputs) with n threads; returns the outputs (owned by *s). */
static struct gf_tensor **run_threads(struct built *b, int n, struct gf_session **s)
{
    struct gf_exec_opts o = {.n_threads = n};
    struct gf_tensor **out;
    size_t k;
    if (gf_session_new(b->m, &o, s) != GF_OK || gf_session_run(*s, 0, NULL, &out, &k) != GF_OK)
        fail_msg("run: %s", gf_last_error());
    return out;
}

/* Shapes large enough that every backward kernel splits its work: the
 * gradients with 4 threads equal those with 1 (up to summation order). */
static void test_kernel_threads(void **state)
{
    char gather[2048] = "p A 64x3x300; i I 200 ", labels[4096] = "p A 500x100; i L 500 ";
    for (int k = 0; k < 200; k++) /* every row, some several times */
        snprintf(gather + strlen(gather), sizeof(gather) - strlen(gather), "%s%d", k ? "/" : "",
                 (k * 37) % 64);
    strcat(gather, "; Gather(A,I)->G; Tanh(G)->Y");
    for (int k = 0; k < 500; k++)
        snprintf(labels + strlen(labels), sizeof(labels) - strlen(labels), "%s%d", k ? "/" : "",
                 (k * 7) % 100);
    strcat(labels, "; SoftmaxCrossEntropyLoss(A,L)->Y");
    const char *specs[] = {
        "p A 96x400; p B 400; p C 96x1; Add(A,B)->T; Mul(T,C)->Y",
        gather,
        "p A 300x200; p S 200; p B 200; LayerNormalization(A,S,B)->H; Sigmoid(H)->Y",
        "p A 200x300; Softmax(A)->S; Relu(S)->Y",
        labels,
        "p A 300x200; i st 2 1/0; i en 2 299/199; i ax 2 0/1; i sp 2 1/2; "
        "Slice(A,st,en,ax,sp)->Y",
    };
    (void)state;
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        struct built b = build(specs[i], 18, GF_FLOAT, true);
        struct gf_autodiff_opts o = {.n_params = b.n_params, .params = b.params};
        struct gf_session *s1, *s4;
        assert_int_equal(gf_pass_autodiff(b.m, &o, NULL), GF_OK);
        struct gf_tensor **o1 = run_threads(&b, 1, &s1), **o4 = run_threads(&b, 4, &s4);
        for (size_t k = 0; k < b.m->graph->n_outputs; k++) {
            double worst, scale = max_abs(o1[k]);
            if (!gf_tensor_allclose(o4[k], o1[k], 1e-5, 1e-6 * scale, &worst))
                fail_msg("spec %zu, output %s: 4 threads differ from 1 by %g", i,
                         o1[k]->name, worst);
        }
        gf_session_free(s1);
        gf_session_free(s4);
        gf_model_free(b.m);
    }
}

/* Bad data reaching a backward kernel is GF_ERR_INVALID naming the node. */
static void test_kernel_errors(void **state)
{
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"c D 4x3; i S 2 4/3; i I 2 1/4; GatherGrad(D,S,I)->Y", "out of range"},
        {"c D 2x3; i S 2 4/3; i I 2x3 0/1/2/3/9/0; GatherElementsGrad(D,S,I)->Y",
         "out of range"},
        {"k g 1.0; c X 3x4; i L 3 0/7/1; SoftmaxCrossEntropyLossGrad(g,X,L)->Y", "is 7: outside"},
        {"k g 1.0; i S 2 3/4; i L 3 0/-1/1; NLLLossGrad(g,S,L)->Y", "is -1: outside"},
        {"c D 2x3; i S 2 4/3; i st 1 0; i en 1 3; SliceGrad(D,S,st,en)->Y", "the slice takes"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct built b = build(cases[i].spec, 18, GF_FLOAT, false);
        struct gf_graph *g = b.m->graph;
        struct gf_session *s;
        struct gf_tensor **out;
        size_t n;
        g->last->domain = "graphfuse"; /* the test language writes ai.onnx nodes */
        g->last->op = gf_op_lookup("graphfuse", g->last->op_type);
        assert_int_equal(gf_graph_add_output(g, gf_graph_find(g, "Y")), GF_OK);
        assert_int_equal(gf_session_new(b.m, NULL, &s), GF_OK);
        assert_int_equal(gf_session_run(s, 0, NULL, &out, &n), GF_ERR_INVALID);
        const char *msg = gf_last_error();
        if (!strstr(msg, g->last->name) || !strstr(msg, cases[i].want))
            fail_msg("message '%s' lacks the node or '%s'", msg, cases[i].want);
        gf_session_free(s);
        gf_model_free(b.m);
    }
}

/* ---- the bundled models ---------------------------------------------------------------- */

static struct gf_tensor *tensor_to_double(struct gf_model *m, const struct gf_tensor *t)
{
    struct gf_tensor *d = gf_tensor_new(m, t->name, GF_DOUBLE, t->rank, t->dims, NULL);
    assert_non_null(d);
    for (size_t i = 0; i < t->nelem; i++)
        ((double *)d->data)[i] = gf_tensor_get_f64(t, i);
    return d;
}

/* The same model in double: float initializers, Constant and
 * ConstantOfShape values, Cast targets and declared types. */
static void model_to_double(struct gf_model *m)
{
    struct gf_graph *g = m->graph;
    for (size_t i = 0; i < g->n_inits; i++)
        if (g->inits[i]->init->dtype == GF_FLOAT)
            assert_int_equal(gf_value_set_initializer(g->inits[i],
                                                      tensor_to_double(m, g->inits[i]->init)),
                             GF_OK);
    for (struct gf_node *n = g->first; n; n = n->next) {
        const struct gf_attr *a = gf_node_attr(n, "value");
        assert_null(gf_node_attr(n, "value_float"));
        if ((n->op == GF_OP_CONSTANT || n->op == GF_OP_CONSTANT_OF_SHAPE) && a && a->t &&
            a->t->dtype == GF_FLOAT)
            assert_int_equal(gf_node_set_attr_tensor(n, "value", tensor_to_double(m, a->t)),
                             GF_OK);
        if (n->op == GF_OP_CAST && gf_node_attr_int(n, "to", 0) == GF_FLOAT)
            assert_int_equal(gf_node_set_attr_int(n, "to", GF_DOUBLE), GF_OK);
    }
    for (size_t i = 0; i < g->n_values; i++)
        if (g->values[i]->type.kind == GF_TYPE_TENSOR && g->values[i]->type.dtype == GF_FLOAT)
            g->values[i]->type.dtype = GF_DOUBLE;
}

struct model_run {
    struct gf_model *m;
    struct gf_session *s;
    struct gf_tensor *in[8];
    size_t n_in;
};

/* Fuses m (gf_pass_fuse) after making like's parameters graph inputs,
 * then differentiates it for those parameters. */
static void fuse_and_differentiate(struct gf_model *m, const struct gf_autodiff_result *like,
                                   struct gf_autodiff_result *res)
{
    const char **names = calloc(like->n_params + 1, sizeof(*names));
    assert_non_null(names);
    for (size_t p = 0; p < like->n_params; p++) {
        names[p] = like->params[p]->name;
        assert_int_equal(gf_graph_add_input(m->graph, gf_graph_find(m->graph, names[p])), GF_OK);
    }
    assert_int_equal(gf_pass_fuse(m, NULL, NULL), GF_OK);
    int fused = 0;
    for (const struct gf_node *n = m->graph->first; n; n = n->next)
        fused += n->domain && strcmp(n->domain, "graphfuse") == 0;
    assert_true(fused > 0);
    struct gf_autodiff_opts o = {.n_params = like->n_params, .params = names};
    if (gf_pass_autodiff(m, &o, res) != GF_OK)
        fail_msg("fused: autodiff: %s", gf_last_error());
    free(names);
}

/* Loads dir/model.onnx (in double when asked), differentiates it (fused
 * first when `fused_like` gives the parameters) unless `res` is NULL, and
 * loads the recorded training batch, input files matched by name. */
static void model_open(struct model_run *mr, const char *dir, bool dbl,
                       const struct gf_autodiff_result *fused_like,
                       struct gf_autodiff_result *res)
{
    char path[640], data[512];
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    snprintf(data, sizeof(data), "%.*s/train_data/test_data_set_0",
             (int)(strrchr(dir, '/') - dir), dir);
    if (gf_model_load(path, NULL, &mr->m) != GF_OK)
        fail_msg("%s", gf_last_error());
    if (dbl)
        model_to_double(mr->m);
    if (fused_like)
        fuse_and_differentiate(mr->m, fused_like, res);
    else if (res && gf_pass_autodiff(mr->m, NULL, res) != GF_OK)
        fail_msg("%s: autodiff: %s", dir, gf_last_error());
    if (res && gf_graph_validate(mr->m->graph) != GF_OK)
        fail_msg("%s: validate: %s", dir, gf_last_error());
    if (gf_session_new(mr->m, NULL, &mr->s) != GF_OK)
        fail_msg("%s", gf_last_error());
    mr->n_in = gf_session_input_count(mr->s);
    assert_true(mr->n_in <= 8);
    for (size_t k = 0; k < mr->n_in; k++) {
        struct gf_tensor *t;
        snprintf(path, sizeof(path), "%s/input_%zu.pb", data, k);
        assert_int_equal(gf_tensor_load(mr->m, path, &t), GF_OK);
        if (dbl && t->dtype == GF_FLOAT)
            t = tensor_to_double(mr->m, t);
        for (size_t i = 0; i < mr->n_in; i++)
            if (strcmp(gf_session_input(mr->s, i)->name, t->name) == 0)
                mr->in[i] = t;
    }
}

static struct gf_tensor **model_run(struct model_run *mr)
{
    struct gf_tensor **out;
    size_t n;
    if (gf_session_run(mr->s, mr->n_in, mr->in, &out, &n) != GF_OK)
        fail_msg("run: %s", gf_last_error());
    return out;
}

static void model_close(struct model_run *mr)
{
    gf_session_free(mr->s);
    gf_model_free(mr->m);
}

/* The fused build's gradients against the unfused ones (fp32). */
static void check_fused(const char *dir, const struct gf_autodiff_result *r32,
                        struct gf_tensor **o32, const struct gf_model *m32)
{
    struct model_run fu;
    struct gf_autodiff_result rf;
    model_open(&fu, dir, false, r32, &rf);
    struct gf_tensor **of = model_run(&fu);
    for (size_t p = 0; p < r32->n_params; p++) {
        const struct gf_tensor *g = o32[output_index(m32, r32->grads[p]->name)];
        const struct gf_tensor *gf = of[output_index(fu.m, rf.grads[p]->name)];
        double scale = max_abs(g);
        for (size_t i = 0; i < g->nelem; i++)
            if (!close_to(gf_tensor_get_f64(gf, i), gf_tensor_get_f64(g, i), scale)) {
                report("%s fused: d loss / d %s[%zu]: %.9g, unfused %.9g", dir,
                       r32->params[p]->name, i, gf_tensor_get_f64(gf, i),
                       gf_tensor_get_f64(g, i));
                break;
            }
    }
    model_close(&fu);
}

/* ---- PyTorch's gradients (tests/data/grads/<model>.txt) ---------------------------- */

#define TORCH_MAX 64

struct torch_param {
    char name[128];
    int rank;
    int64_t dims[4];
    size_t n;
    double sumsq, maxabs;
    double *acc;  /* graphfuse's gradient, summed over the initializers it feeds */
    int sources;  /* initializers mapped to it */
};

static struct torch_param *torch_find(struct torch_param *tp, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(tp[i].name, name) == 0)
            return &tp[i];
    return NULL;
}

/* The "param" lines of the record: name, shape and norms of each gradient. */
static size_t torch_read_params(FILE *f, struct torch_param *tp)
{
    char line[512];
    size_t n = 0;
    while (fgets(line, sizeof(line), f)) {
        struct torch_param *p = &tp[n];
        char *q = line + 6;
        if (strncmp(line, "param ", 6) != 0 || n == TORCH_MAX)
            continue;
        memset(p, 0, sizeof(*p));
        assert_int_equal(sscanf(q, "%127s %d", p->name, &p->rank), 2);
        q = strchr(strchr(q, ' ') + 1, ' ');
        p->n = 1;
        for (int d = 0; d < p->rank; d++)
            p->n *= (size_t)(p->dims[d] = strtoll(q, &q, 10));
        p->sumsq = (strtod(q, &q), strtod(q, &q));
        p->maxabs = strtod(q, &q);
        p->acc = calloc(p->n, sizeof(double));
        assert_non_null(p->acc);
        n++;
    }
    return n;
}

/* Adds each trained initializer's gradient (from the differentiated model's
 * outputs) to its torch parameter, through initializers.txt: layout
 * "same", or "transposed" (the exporter stored W^T). */
static void torch_gather(const char *dir, struct torch_param *tp, size_t n_tp,
                         struct gf_tensor **out, const struct gf_model *m)
{
    char path[600], line[512], onnx_name[256], dt[32], shape[64], kind[32], src[256], lay[32];
    snprintf(path, sizeof(path), "%s/initializers.txt", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || sscanf(line, "%255s %31s %63s %31s %255s %31s", onnx_name, dt,
                                     shape, kind, src, lay) != 6 || strcmp(kind, "param"))
            continue;
        *strchrnul(src, '=') = 0; /* a tied parameter: its first name */
        struct torch_param *p = torch_find(tp, n_tp, src);
        char gname[300];
        snprintf(gname, sizeof(gname), "%s_grad", onnx_name);
        const struct gf_tensor *g = out[output_index(m, gname)];
        assert_non_null(p);
        assert_int_equal(g->nelem, p->n);
        bool tr = strcmp(lay, "transposed") == 0;
        size_t rows = p->rank == 2 ? (size_t)p->dims[0] : 1, cols = p->n / rows;
        for (size_t i = 0; i < p->n; i++) /* torch index i = (r, c); W^T holds it at (c, r) */
            p->acc[i] += gf_tensor_get_f64(g, tr ? (i % cols) * rows + i / cols : i);
        p->sources++;
    }
    fclose(f);
}

/* The fp32 gradients of one export against PyTorch's: every parameter
 * covered, sampled elements and the sums of squares within 1e-4. */
static void check_torch(const char *dir, struct gf_tensor **out, const struct gf_model *m)
{
    char path[600], line[512], name[128];
    const char *model = strstr(dir, "models/") + 7;
    snprintf(path, sizeof(path), "tests/data/grads/%.*s.txt", (int)(strchr(model, '/') - model),
             model);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    struct torch_param tp[TORCH_MAX];
    size_t n = torch_read_params(f, tp);
    assert_true(n > 0);
    torch_gather(dir, tp, n, out, m);
    rewind(f);
    size_t idx;
    double want;
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || !strncmp(line, "param ", 6) ||
            sscanf(line, "%127s %zu %lf", name, &idx, &want) != 3)
            continue;
        struct torch_param *p = torch_find(tp, n, name);
        assert_non_null(p);
        if (fabs(p->acc[idx] - want) > 1e-4 * p->maxabs + 1e-4 * fabs(want))
            report("%s: d loss / d %s[%zu]: graphfuse %.9g, PyTorch %.9g", dir, name, idx,
                   p->acc[idx], want);
    }
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        double ss = 0;
        for (size_t k = 0; k < tp[i].n; k++)
            ss += tp[i].acc[k] * tp[i].acc[k];
        if (!tp[i].sources)
            report("%s: no initializer holds %s", dir, tp[i].name);
        else if (fabs(ss - tp[i].sumsq) > 1e-4 * tp[i].sumsq)
            report("%s: |d loss / d %s|^2: graphfuse %.9g, PyTorch %.9g", dir, tp[i].name, ss,
                   tp[i].sumsq);
        free(tp[i].acc);
    }
}

/* For one exported model: the double build's gradients against central
 * differences of its loss on elements of every parameter, the float
 * build's gradients (the fp32 kernels) against the double ones everywhere,
 * and the fused build's against the float ones. */
static void check_model(const char *dir)
{
    struct model_run f32, f64, ref;
    struct gf_autodiff_result r32, r64;
    model_open(&f32, dir, false, NULL, &r32);
    model_open(&f64, dir, true, NULL, &r64);
    model_open(&ref, dir, true, NULL, NULL);
    assert_int_equal(r32.n_params, r64.n_params);
    for (size_t p = 0; p < r64.n_params; p++) /* variables, not constants to fold */
        assert_int_equal(gf_graph_add_input(ref.m->graph,
                                            gf_graph_find(ref.m->graph, r64.params[p]->name)),
                         GF_OK);
    gf_session_free(ref.s);
    assert_int_equal(gf_session_new(ref.m, NULL, &ref.s), GF_OK);
    size_t loss_at = output_index(ref.m, "loss");
    struct gf_tensor **o32 = model_run(&f32), **o64 = model_run(&f64);
    for (size_t p = 0; p < r64.n_params; p++) {
        const char *name = r64.params[p]->name;
        const struct gf_tensor *g64 = o64[output_index(f64.m, r64.grads[p]->name)];
        const struct gf_tensor *g32 = o32[output_index(f32.m, r32.grads[p]->name)];
        struct gf_tensor *w = gf_graph_find(ref.m->graph, name)->init;
        double scale = max_abs(g64);
        assert_string_equal(r32.params[p]->name, name);
        for (size_t i = 0; i < g64->nelem; i++)
            if (!close_to(gf_tensor_get_f64(g32, i), gf_tensor_get_f64(g64, i), scale))
                report("%s: d loss / d %s[%zu]: float %.9g, double %.9g", dir, name, i,
                       gf_tensor_get_f64(g32, i), gf_tensor_get_f64(g64, i));
        for (size_t k = 0; k < 3; k++) { /* elements spread over the tensor */
            size_t i = (k * 7919 + p * 104729 + 11) % w->nelem;
            double *x = (double *)w->data + i, x0 = *x, h = 1e-5;
            *x = x0 + h;
            double lp = gf_tensor_get_f64(model_run(&ref)[loss_at], 0);
            *x = x0 - h;
            double lm = gf_tensor_get_f64(model_run(&ref)[loss_at], 0);
            *x = x0;
            double fd = (lp - lm) / (2 * h), a = gf_tensor_get_f64(g64, i);
            if (!close_to(a, fd, scale))
                report("%s: d loss / d %s[%zu]: analytic %.9g, finite differences %.9g", dir,
                       name, i, a, fd);
        }
    }
    check_fused(dir, &r32, o32, f32.m);
    check_torch(dir, o32, f32.m);
    model_close(&f32);
    model_close(&f64);
    model_close(&ref);
}

static void test_models(void **state)
{
    static const char *const dirs[] = {
        "models/mlp/legacy",        "models/mlp/dynamo",       "models/llama_tiny/legacy",
        "models/llama_tiny/dynamo", "models/gpt2_tiny/legacy", "models/gpt2_tiny/dynamo",
    };
    (void)state;
    failures = 0;
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        check_model(dirs[i]);
    assert_int_equal(failures, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops),
        cmocka_unit_test(test_random_shapes),
        cmocka_unit_test(test_fused),
        cmocka_unit_test(test_tied),
        cmocka_unit_test(test_matmul_transposes),
        cmocka_unit_test(test_default_params),
        cmocka_unit_test(test_unreachable_param),
        cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_unsupported_fused),
        cmocka_unit_test(test_loss_choice),
        cmocka_unit_test(test_save),
        cmocka_unit_test(test_kernel_threads),
        cmocka_unit_test(test_kernel_errors),
        cmocka_unit_test(test_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
