/*
 * The fused backward ops and their rules (passes/grad_rules_fused.c):
 * RMSNorm, AddRMSNorm, SwiGLU, GeGLU, RoPE, LayerNorm, AddLayerNorm,
 * MatMulEpilogue, SoftmaxCrossEntropy, LinearCrossEntropy (gradients made
 * by the forward), JSD and Attention.
 *
 * Each case is built twice from one seed: with the fused op (domain
 * graphfuse, differentiated by its rule into its backward op) and as the
 * standard ONNX ops the fused op stands for (differentiated op by op: what
 * the fallback gf_grad_inline does with the fused op's function body).
 * The loss is sum(Y * R), R a fixed random tensor (or the fused op's loss
 * itself, F_UNIT: an upstream gradient of 1).  Checks:
 *   - the fused build's gradients, in double and in float, against
 *     central finite differences of the double fused build (1e-3 relative);
 *   - fused against unfused gradients, same dtype (1e-5 relative; see
 *     tolerance() for the losses and attention);
 *   - the fused build really wrote the backward op and did not go through
 *     the function body.
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

enum kind { RMS, ADD_RMS, SWIGLU, GEGLU, GEGLU_TANH, ROPE, LN, ADD_LN, MME, SCE, LCE, JSD, ATTN };

enum {
    F_BIAS = 1,     /* LN: a B input; MME: Bias [N] */
    F_STATS = 2,    /* LN: Mean, InvStdDev listed as outputs */
    F_RES = 4,      /* MME: Res of Y's shape */
    F_TA = 8,       /* MME: transA */
    F_TB = 16,      /* MME: transB */
    F_BIAS_COL = 32, /* MME: Bias [M, 1] */
    F_WC = 64,       /* losses: class weights */
    F_SHIFT = 128,   /* losses: shift=1 */
    F_II = 256,      /* losses: ignore_index (some labels use it) */
    F_UNIT = 512,    /* losses: the loss is the graph's loss itself (upstream gradient 1) */
    F_SUM = 1024,    /* losses: reduction "sum" (default "mean") */
    F_NONE = 2048,   /* losses: reduction "none" */
    F_ACT = 4096,    /* losses: the logits are computed (L = 1.5 P): G may overwrite them */
    F_ZERO = 8192,   /* attention: zero_masked_rows, the mask [Sq, Sk] has a row of -inf */
    F_CAUSAL = 16384 /* attention: the mask -inf past each row's last key (live_cols) */
};

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
    int flags;         /* F_* */
    const struct mmspec *mm; /* MME: A is rank/dims */
};

/* MME: B as stored, Y = act(alpha A'B' + beta Bias) + Res */
struct mmspec {
    int brank;
    int64_t bdims[4];
    const char *act;
    double alpha, beta;
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

/* LayerNorm(X, W?, B?) as standard ops: ReduceMean Sub Mul ReduceMean Add
 * Sqrt Div (Mul W) (Add B) */
static void ln_unfused(struct tb *b, const struct gcase *c, int ax)
{
    int64_t axes[4];
    size_t na = 0;
    for (int i = ax; i < c->rank; i++)
        axes[na++] = i;
    ints(b->m, "axes", na, axes);
    scalar(b, "eps", c->eps);
    node(b, "ReduceMean", "", "X,axes", "M");
    node(b, "Sub", "", "X,M", "D");
    node(b, "Mul", "", "D,D", "P");
    node(b, "ReduceMean", "", "P,axes", "V");
    node(b, "Add", "", "V,eps", "E");
    node(b, "Sqrt", "", "E", "Q");
    const char *y = "N";
    node(b, "Div", "", "D,Q", y);
    if (c->w_rank) {
        node(b, "Mul", "", "N,W", "NW");
        y = "NW";
    }
    if (c->flags & F_BIAS)
        node(b, "Add", "", c->w_rank ? "NW,B" : "N,B", "Y0");
    else
        node(b, "Identity", "", y, "Y0");
}

static void build_ln(struct tb *b, const struct gcase *c, bool fused)
{
    bool add = c->kind == ADD_LN, bias = c->flags & F_BIAS;
    int ax = c->axis < 0 ? c->axis + c->rank : c->axis;
    tensor(b, add ? "A" : "X", c->rank, c->dims, true, -1, 3);
    if (add)
        tensor(b, "Rr", c->rank, c->dims, true, -1, 1);
    if (c->w_rank)
        tensor(b, "W", c->w_rank, c->dims + c->rank - c->w_rank, true, 0.5, 2);
    if (bias)
        tensor(b, "B", c->w_rank ? c->w_rank : 1, c->dims + c->rank - (c->w_rank ? c->w_rank : 1),
               true, -1, 1);
    if (add)
        tensor(b, "Cs", c->rank, c->dims, false, -1, 1);
    if (fused) {
        char ins[32], outs[32];
        snprintf(ins, sizeof(ins), "%s,%s,%s", add ? "A,Rr" : "X", c->w_rank ? "W" : "",
                 bias ? "B" : "");
        snprintf(outs, sizeof(outs), "Y0%s%s", add ? ",X" : "",
                 c->flags & F_STATS ? ",Mu,Is" : "");
        struct gf_node *n = node(b, add ? "AddLayerNorm" : "LayerNorm", "graphfuse", ins, outs);
        gf_node_set_attr_int(n, "axis", c->axis);
        gf_node_set_attr_float(n, "epsilon", (float)c->eps);
    } else {
        if (add)
            node(b, "Add", "", "A,Rr", "X");
        ln_unfused(b, c, ax);
    }
    if (add) {
        node(b, "Mul", "", "X,Cs", "T");
        node(b, "Add", "", "Y0,T", "Y");
    } else {
        node(b, "Identity", "", "Y0", "Y");
    }
}

/* x with its last two axes swapped, as a Transpose node */
static void swap_last2(struct tb *b, const char *x, int rank, const char *y)
{
    int64_t perm[4];
    for (int i = 0; i < rank; i++)
        perm[i] = i;
    perm[rank - 2] = rank - 1;
    perm[rank - 1] = rank - 2;
    gf_node_set_attr_ints(node(b, "Transpose", "", x, y), "perm", (size_t)rank, perm);
}

/* The activation as standard ops (opset 20: Gelu), Z -> Y0 */
static void act_unfused(struct tb *b, const char *act)
{
    if (!*act)
        node(b, "Identity", "", "Z", "Y0");
    else if (!strcmp(act, "relu"))
        node(b, "Relu", "", "Z", "Y0");
    else if (!strcmp(act, "tanh"))
        node(b, "Tanh", "", "Z", "Y0");
    else if (!strcmp(act, "sigmoid"))
        node(b, "Sigmoid", "", "Z", "Y0");
    else if (!strcmp(act, "silu")) {
        node(b, "Sigmoid", "", "Z", "Zs");
        node(b, "Mul", "", "Z,Zs", "Y0");
    } else {
        gf_node_set_attr_string(node(b, "Gelu", "", "Z", "Y0"), "approximate",
                                strcmp(act, "gelu") ? "tanh" : "none");
    }
}

/* MatMulEpilogue(A, B, Bias?, Res?), or MatMul Mul Add (activation) Add */
static void build_mme(struct tb *b, const struct gcase *c, bool fused)
{
    bool ta = c->flags & F_TA, tb = c->flags & F_TB;
    bool bias = c->flags & (F_BIAS | F_BIAS_COL), res = c->flags & F_RES;
    tensor(b, "A", c->rank, c->dims, true, -1, 1);
    const struct mmspec *mm = c->mm;
    tensor(b, "B", mm->brank, mm->bdims, true, -1, 1);
    int64_t m = c->dims[c->rank - (ta ? 1 : 2)];
    int64_t n = mm->bdims[mm->brank - (tb ? 2 : 1)];
    if (c->flags & F_BIAS)
        tensor(b, "Bias", 1, &n, true, -1, 1);
    if (c->flags & F_BIAS_COL)
        tensor(b, "Bias", 2, (int64_t[]){m, 1}, true, -1, 1);
    if (fused) {
        char ins[32];
        snprintf(ins, sizeof(ins), "A,B,%s,%s", bias ? "Bias" : "", res ? "Res" : "");
        if (res) { /* Res has Y's shape: the MatMul's, from a probe */
            struct gf_node *p = node(b, "MatMulEpilogue", "graphfuse", "A,B", "Probe");
            gf_node_set_attr_int(p, "transA", ta);
            gf_node_set_attr_int(p, "transB", tb);
            assert_int_equal(gf_graph_infer_shapes(b->m->graph), GF_OK);
            struct gf_value *pv = gf_graph_find(b->m->graph, "Probe");
            int64_t d[8];
            for (int i = 0; i < pv->type.rank; i++)
                d[i] = pv->type.dims[i].value;
            gf_graph_remove_node(b->m->graph, p);
            tensor(b, "Res", pv->type.rank, d, true, -1, 1);
        }
        struct gf_node *f = node(b, "MatMulEpilogue", "graphfuse", ins, "Y");
        gf_node_set_attr_int(f, "transA", ta);
        gf_node_set_attr_int(f, "transB", tb);
        gf_node_set_attr_float(f, "alpha", (float)mm->alpha);
        gf_node_set_attr_float(f, "beta", (float)mm->beta);
        gf_node_set_attr_string(f, "activation", mm->act);
        return;
    }
    if (ta)
        swap_last2(b, "A", c->rank, "At");
    if (tb)
        swap_last2(b, "B", mm->brank, "Bt");
    node(b, "MatMul", "", ta ? (tb ? "At,Bt" : "At,B") : (tb ? "A,Bt" : "A,B"), "P");
    if (res) {
        assert_int_equal(gf_graph_infer_shapes(b->m->graph), GF_OK);
        struct gf_value *pv = gf_graph_find(b->m->graph, "P");
        int64_t d[8];
        for (int i = 0; i < pv->type.rank; i++)
            d[i] = pv->type.dims[i].value;
        tensor(b, "Res", pv->type.rank, d, true, -1, 1);
    }
    scalar(b, "alpha", mm->alpha);
    scalar(b, "beta", mm->beta);
    node(b, "Mul", "", "P,alpha", "Pa");
    if (bias) {
        node(b, "Mul", "", "Bias,beta", "Bb");
        node(b, "Add", "", "Pa,Bb", "Z");
    } else {
        node(b, "Identity", "", "Pa", "Z");
    }
    act_unfused(b, mm->act);
    if (res)
        node(b, "Add", "", "Y0,Res", "Y");
    else
        node(b, "Identity", "", "Y0", "Y");
}

static const char *reduction_of(int flags)
{
    return flags & F_NONE ? "none" : flags & F_SUM ? "sum" : "mean";
}

#define IGNORE 2 /* ignore_index: a class index, as ONNX allows */

/* int64 labels of shape dims[rank] in [0, c), every fifth IGNORE with F_II */
static void labels(struct tb *b, const char *name, int rank, const int64_t *dims, int64_t c,
                   int flags)
{
    struct gf_tensor *t = gf_tensor_new(b->m, NULL, GF_INT64, rank, dims, NULL);
    assert_non_null(t);
    for (size_t i = 0; i < t->nelem; i++)
        ((int64_t *)t->data)[i] = flags & F_II && i % 5 == 1 ? IGNORE
                                                             : (int64_t)rnd(b, 0, (double)c);
    assert_non_null(gf_graph_add_initializer(b->m->graph, name, t));
}

/* SoftmaxCrossEntropy(L, T, Wc?) -> Y, or SoftmaxCrossEntropyLoss (after
 * the Hugging Face Slice, Reshape with shift) */
static void build_sce(struct tb *b, const struct gcase *c, bool fused)
{
    bool shift = c->flags & F_SHIFT;
    int64_t cls = c->dims[shift ? 2 : 1], tdims[4];
    int tr = 0;
    for (int i = 0; i < c->rank; i++)
        if (i != (shift ? 2 : 1))
            tdims[tr++] = c->dims[i];
    if (c->flags & F_ACT) {
        tensor(b, "P", c->rank, c->dims, true, -3, 3);
        scalar(b, "k", 1.5);
        node(b, "Mul", "", "P,k", "L");
    } else {
        tensor(b, "L", c->rank, c->dims, true, -4, 4);
    }
    labels(b, "T", tr, tdims, cls, c->flags);
    if (c->flags & F_WC)
        tensor(b, "Wc", 1, &cls, false, 0.5, 2);
    const char *wc = c->flags & F_WC ? ",Wc" : "", *y = c->flags & F_UNIT ? "loss" : "Y";
    char ins[32];
    struct gf_node *n;
    if (fused) {
        snprintf(ins, sizeof(ins), "L,T%s", wc);
        n = node(b, "SoftmaxCrossEntropy", "graphfuse", ins, y);
        gf_node_set_attr_int(n, "shift", shift);
    } else if (shift) {
        ints(b->m, "s0", 1, (int64_t[]){0});
        ints(b->m, "s1", 1, (int64_t[]){1});
        ints(b->m, "m1", 1, (int64_t[]){-1});
        ints(b->m, "big", 1, (int64_t[]){INT64_MAX});
        ints(b->m, "lshape", 2, (int64_t[]){-1, cls});
        node(b, "Slice", "", "L,s0,m1,s1", "Ls");
        node(b, "Reshape", "", "Ls,lshape", "L2");
        node(b, "Slice", "", "T,s1,big,s1", "Ts");
        node(b, "Reshape", "", "Ts,m1", "T2");
        snprintf(ins, sizeof(ins), "L2,T2%s", wc);
        n = node(b, "SoftmaxCrossEntropyLoss", "", ins, y);
    } else {
        snprintf(ins, sizeof(ins), "L,T%s", wc);
        n = node(b, "SoftmaxCrossEntropyLoss", "", ins, y);
    }
    gf_node_set_attr_string(n, "reduction", reduction_of(c->flags));
    if (c->flags & F_II)
        gf_node_set_attr_int(n, "ignore_index", IGNORE);
}

/* LinearCrossEntropy(H, W, T, Bias?) -> Y (chunk_rows: the case's axis),
 * or MatMul (Add) and SoftmaxCrossEntropyLoss (Slice, Reshape with shift).
 * H is [N, K] or with shift [B, S, K]; mm->bdims[0] is V. */
static void build_lce(struct tb *b, const struct gcase *c, bool fused)
{
    bool shift = c->flags & F_SHIFT, tb = c->flags & F_TB;
    int64_t k = c->dims[c->rank - 1], v = c->mm->bdims[0];
    int64_t wd[2] = {tb ? v : k, tb ? k : v};
    tensor(b, "H", c->rank, c->dims, true, -1, 1);
    tensor(b, "W", 2, wd, true, -1, 1);
    labels(b, "T", c->rank - 1, c->dims, v, c->flags);
    if (c->flags & F_BIAS)
        tensor(b, "Bias", 1, &v, true, -1, 1);
    const char *y = c->flags & F_UNIT ? "loss" : "Y";
    struct gf_node *n;
    if (fused) {
        n = node(b, "LinearCrossEntropy", "graphfuse", c->flags & F_BIAS ? "H,W,T,Bias" : "H,W,T",
                 y);
        gf_node_set_attr_int(n, "shift", shift);
        gf_node_set_attr_int(n, "transB", tb);
        gf_node_set_attr_int(n, "chunk_rows", c->axis);
    } else {
        if (tb)
            swap_last2(b, "W", 2, "Wt");
        node(b, "MatMul", "", tb ? "H,Wt" : "H,W", c->flags & F_BIAS ? "Z0" : "Z");
        if (c->flags & F_BIAS)
            node(b, "Add", "", "Z0,Bias", "Z");
        const char *l = "Z", *t = "T";
        if (shift) {
            ints(b->m, "s0", 1, (int64_t[]){0});
            ints(b->m, "s1", 1, (int64_t[]){1});
            ints(b->m, "m1", 1, (int64_t[]){-1});
            ints(b->m, "big", 1, (int64_t[]){INT64_MAX});
            ints(b->m, "lshape", 2, (int64_t[]){-1, v});
            node(b, "Slice", "", "Z,s0,m1,s1", "Zs");
            node(b, "Reshape", "", "Zs,lshape", "Z2");
            node(b, "Slice", "", "T,s1,big,s1", "Ts");
            node(b, "Reshape", "", "Ts,m1", "T2");
            l = "Z2", t = "T2";
        }
        char ins[16];
        snprintf(ins, sizeof(ins), "%s,%s", l, t);
        n = node(b, "SoftmaxCrossEntropyLoss", "", ins, y);
    }
    gf_node_set_attr_string(n, "reduction", reduction_of(c->flags));
    if (c->flags & F_II)
        gf_node_set_attr_int(n, "ignore_index", IGNORE);
}

/* sum over the last axis of p * (u - v), keepdims 0, into `out` */
static void kl_terms(struct tb *b, const char *p, const char *u, const char *v, const char *out)
{
    char ins[32], d[16], e[16];
    snprintf(d, sizeof(d), "%s_d", out);
    snprintf(e, sizeof(e), "%s_e", out);
    snprintf(ins, sizeof(ins), "%s,%s", u, v);
    node(b, "Sub", "", ins, d);
    snprintf(ins, sizeof(ins), "%s,%s", p, d);
    node(b, "Mul", "", ins, e);
    snprintf(ins, sizeof(ins), "%s,last", e);
    gf_node_set_attr_int(node(b, "ReduceSum", "", ins, out), "keepdims", 0);
}

/* JSD(X, Y, T?) -> Y (beta: the case's offset), or Exp, Log, Mul, Sub,
 * ReduceSum and the (masked) mean over rows */
static void build_jsd(struct tb *b, const struct gcase *c, bool fused)
{
    double beta = c->offset;
    tensor(b, "X", c->rank, c->dims, true, -3, 0);
    tensor(b, "Yp", c->rank, c->dims, true, -3, 0);
    if (c->flags & F_II)
        labels(b, "T", c->rank - 1, c->dims, c->dims[c->rank - 1], c->flags);
    const char *y = c->flags & F_UNIT ? "loss" : "Y";
    if (fused) {
        struct gf_node *n = node(b, "JSD", "graphfuse", c->flags & F_II ? "X,Yp,T" : "X,Yp", y);
        gf_node_set_attr_float(n, "beta", (float)beta);
        gf_node_set_attr_int(n, "ignore_index", IGNORE);
        return;
    }
    ints(b->m, "last", 1, (int64_t[]){-1});
    node(b, "Exp", "", "Yp", "P");
    node(b, "Exp", "", "X", "Q");
    if (beta == 0) {
        kl_terms(b, "P", "Yp", "X", "Rw");
    } else if (beta == 1) {
        kl_terms(b, "Q", "X", "Yp", "Rw");
    } else {
        scalar(b, "b", beta);
        scalar(b, "b1", 1 - beta);
        node(b, "Mul", "", "P,b", "bP");
        node(b, "Mul", "", "Q,b1", "bQ");
        node(b, "Add", "", "bP,bQ", "M");
        node(b, "Log", "", "M", "LM");
        kl_terms(b, "P", "Yp", "LM", "R1");
        kl_terms(b, "Q", "X", "LM", "R2");
        node(b, "Mul", "", "R1,b", "R1b");
        node(b, "Mul", "", "R2,b1", "R2b");
        node(b, "Add", "", "R1b,R2b", "Rw");
    }
    if (!(c->flags & F_II)) {
        gf_node_set_attr_int(node(b, "ReduceMean", "", "Rw", y), "keepdims", 0);
        return;
    }
    ints(b->m, "ii", 1, (int64_t[]){IGNORE});
    node(b, "Equal", "", "T,ii", "Eq");
    node(b, "Not", "", "Eq", "Ne");
    gf_node_set_attr_int(node(b, "Cast", "", "Ne", "Mk"), "to", b->dt);
    node(b, "Mul", "", "Rw,Mk", "Rm");
    gf_node_set_attr_int(node(b, "ReduceSum", "", "Rm", "Num"), "keepdims", 0);
    gf_node_set_attr_int(node(b, "ReduceSum", "", "Mk", "Den"), "keepdims", 0);
    node(b, "Div", "", "Num,Den", y);
}

/* Attention(Q, K, V, Mask?) -> Y, or MatMul (Transpose) Mul (Add) Softmax
 * MatMul.  Q is the case's rank/dims [b..., Sq, D]; Sk = axis, Dv = w_rank,
 * scale = offset; F_TB: K is [b..., Sk, D] (transB=1), else [b..., D, Sk];
 * the mask (a constant): F_BIAS [Sq, Sk], F_BIAS_COL Q's batch dims with
 * the one before last set to 1 (the heads) + [Sq, Sk], F_RES [Sk]. */
static void build_attn(struct tb *b, const struct gcase *c, bool fused)
{
    int r = c->rank;
    bool tb = c->flags & F_TB;
    int64_t sq = c->dims[r - 2], d = c->dims[r - 1], sk = c->axis, dv = c->w_rank;
    int64_t kd[4], vd[4], md[4];
    memcpy(kd, c->dims, sizeof(kd));
    memcpy(vd, c->dims, sizeof(vd));
    kd[r - 2] = tb ? sk : d, kd[r - 1] = tb ? d : sk;
    vd[r - 2] = sk, vd[r - 1] = dv;
    tensor(b, "Q", r, c->dims, true, -1, 1);
    tensor(b, "K", r, kd, true, -1, 1);
    tensor(b, "V", r, vd, true, -1, 1);
    int mr = 0;
    if (c->flags & F_BIAS)
        md[0] = sq, md[1] = sk, mr = 2;
    if (c->flags & F_RES)
        md[0] = sk, mr = 1;
    if (c->flags & F_BIAS_COL) {
        memcpy(md, c->dims, sizeof(md));
        md[r - 3 >= 0 ? r - 3 : 0] = r >= 3 ? 1 : md[0];
        md[r - 2] = sq, md[r - 1] = sk, mr = r;
    }
    if (mr) {
        struct gf_value *m = tensor(b, "Mask", mr, md, false, -2, 0);
        /* F_CAUSAL: row i sees keys j <= i + Sk - Sq (bottom-right aligned), every
         * third row only up to half that; the blocks of the fused kernel then stop
         * at different keys, and the products past them must be zeros */
        int64_t rows = mr == 1 ? 1 : m->init->nelem / sk;
        for (int64_t i = 0; (c->flags & F_CAUSAL) && i < rows; i++) {
            int64_t qi = i % sq, last = qi + sk - sq;
            last = qi % 3 == 1 ? last / 2 : last;
            for (int64_t j = last + 1; j < sk; j++) {
                if (b->dt == GF_DOUBLE)
                    ((double *)m->init->data)[i * sk + j] = -INFINITY;
                else
                    ((float *)m->init->data)[i * sk + j] = -INFINITY;
            }
        }
        /* F_ZERO: query row 0 sees no key, row 1 not key 0 */
        for (int64_t j = 0; (c->flags & F_ZERO) && j <= sk; j++) {
            size_t at = (size_t)(j < sk ? j : sk);
            if (b->dt == GF_DOUBLE)
                ((double *)m->init->data)[at] = -INFINITY;
            else
                ((float *)m->init->data)[at] = -INFINITY;
        }
    }
    if (fused) {
        struct gf_node *n = node(b, "Attention", "graphfuse", mr ? "Q,K,V,Mask" : "Q,K,V", "Y");
        gf_node_set_attr_float(n, "scale", (float)c->offset);
        gf_node_set_attr_int(n, "transB", tb);
        if (c->flags & F_ZERO)
            gf_node_set_attr_int(n, "zero_masked_rows", 1);
        return;
    }
    if (tb)
        swap_last2(b, "K", r, "Kt");
    node(b, "MatMul", "", tb ? "Q,Kt" : "Q,K", "S");
    scalar(b, "scale", c->offset);
    node(b, "Mul", "", "S,scale", mr ? "Ss" : "Sm");
    if (mr)
        node(b, "Add", "", "Ss,Mask", "Sm");
    gf_node_set_attr_int(node(b, "Softmax", "", "Sm", (c->flags & F_ZERO) ? "Pn" : "P"), "axis",
                         -1);
    if (c->flags & F_ZERO) { /* the exporters' Where(IsNaN(P), 0, P) */
        scalar(b, "zero", 0);
        node(b, "IsNaN", "", "Pn", "Nan");
        node(b, "Where", "", "Nan,zero,Pn", "P");
    }
    node(b, "MatMul", "", "P,V", "Y");
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
    else if (c->kind == LN || c->kind == ADD_LN)
        build_ln(&b, c, fused);
    else if (c->kind == MME)
        build_mme(&b, c, fused);
    else if (c->kind == SCE)
        build_sce(&b, c, fused);
    else if (c->kind == LCE)
        build_lce(&b, c, fused);
    else if (c->kind == JSD)
        build_jsd(&b, c, fused);
    else if (c->kind == ATTN)
        build_attn(&b, c, fused);
    else
        build_glu(&b, c, fused);
    if (c->flags & F_UNIT)
        assert_int_equal(gf_graph_add_output(b.m->graph, gf_graph_find(b.m->graph, "loss")),
                         GF_OK);
    else
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

/* gf_grad_inline names the nodes it copies ".../recompute/..." */
static bool recomputes(const struct gf_model *m)
{
    for (const struct gf_node *n = m->graph->first; n; n = n->next)
        if (n->name && strstr(n->name, "/recompute/"))
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
    else if (fused && recomputes(d.b.m))
        report("%s: the fused op went through its function body", c->name);
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

/* Fused against op by op: RTOL_FALLBACK, or the case's own (eps) for the
 * losses and attention, whose float gradients sum many terms of both signs
 * (dW, attention's dK over long rows) or subtract close logarithms (JSD's
 * Y - log M), each side rounding its own way. */
static double tolerance(const struct gcase *c)
{
    return (c->kind == LCE || c->kind == JSD || c->kind == ATTN) && c->eps ? c->eps
                                                                           : RTOL_FALLBACK;
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
            if (!close_rel(x, y, bmax, tolerance(c))) {
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
        /* F_ZERO: op by op, the softmax's backward multiplies by the NaN of the
         * masked row, so only finite differences are a reference */
        if (f.ok && u.ok && !(c->flags & F_ZERO))
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
        {"RMSNorm 3x8", RMS, 2, {3, 8}, -1, 1, 1e-6, 0, 0, "RMSNormGrad", 0, NULL},
        {"RMSNorm 7x13 eps outside", RMS, 2, {7, 13}, -1, 1, 1e-5, 0, 1, "RMSNormGrad", 0, NULL},
        {"RMSNorm 5x9 weight offset", RMS, 2, {5, 9}, -1, 1, 1e-6, 1.0, 0, "RMSNormGrad", 0, NULL},
        {"RMSNorm 5x9 offset, eps outside", RMS, 2, {5, 9}, -1, 1, 1e-2, -0.5, 1,
         "RMSNormGrad", 0, NULL},
        {"RMSNorm 3x11 no weight", RMS, 2, {3, 11}, -1, 0, 1e-6, 0, 0, "RMSNormGrad", 0, NULL},
        {"RMSNorm 3x11 no weight, eps outside", RMS, 2, {3, 11}, -1, 0, 1e-3, 0, 1,
         "RMSNormGrad", 0, NULL},
        {"RMSNorm 2x3x5x7 axis -2, W broadcast", RMS, 4, {2, 3, 5, 7}, -2, 1, 1e-6, 0, 0,
         "RMSNormGrad", 0, NULL},
        {"RMSNorm 2x3x5 axis 1, W 3x5", RMS, 3, {2, 3, 5}, 1, 2, 1e-6, 0.25, 0, "RMSNormGrad", 0,
         NULL},
        /* rows enough for dW to split over threads */
        {"RMSNorm 3x700x17", RMS, 3, {3, 700, 17}, -1, 1, 1e-6, 0, 0, "RMSNormGrad", 0, NULL},
    };
    RUN(cases);
}

static void test_add_rms_norm(void **state)
{
    (void)state;
    static const struct gcase cases[] = {
        {"AddRMSNorm 3x8", ADD_RMS, 2, {3, 8}, -1, 1, 1e-6, 0, 0, "RMSNormGrad", 0, NULL},
        {"AddRMSNorm 5x7 eps outside, offset", ADD_RMS, 2, {5, 7}, -1, 1, 1e-5, 1.0, 1,
         "RMSNormGrad", 0, NULL},
        {"AddRMSNorm 3x9 no weight", ADD_RMS, 2, {3, 9}, -1, 0, 1e-6, 0, 0, "RMSNormGrad", 0, NULL},
        {"AddRMSNorm 2x3x5 axis -2, W broadcast", ADD_RMS, 3, {2, 3, 5}, -2, 1, 1e-6, 0, 0,
         "RMSNormGrad", 0, NULL},
        {"AddRMSNorm 2x1100x15", ADD_RMS, 3, {2, 1100, 15}, -1, 1, 1e-6, 0, 0, "RMSNormGrad", 0,
         NULL},
    };
    RUN(cases);
}

static void test_glu(void **state)
{
    (void)state;
    static const struct gcase cases[] = {
        {"SwiGLU 3x7", SWIGLU, 2, {3, 7}, 0, 0, 0, 0, 0, "SwiGLUGrad", 0, NULL},
        {"SwiGLU 5x3x129", SWIGLU, 3, {5, 3, 129}, 0, 0, 0, 0, 0, "SwiGLUGrad", 0, NULL},
        {"GeGLU 3x7", GEGLU, 2, {3, 7}, 0, 0, 0, 0, 0, "GeGLUGrad", 0, NULL},
        {"GeGLU 2x5x33", GEGLU, 3, {2, 5, 33}, 0, 0, 0, 0, 0, "GeGLUGrad", 0, NULL},
        {"GeGLU tanh 3x7", GEGLU_TANH, 2, {3, 7}, 0, 0, 0, 0, 0, "GeGLUGrad", 0, NULL},
        {"GeGLU tanh 7x301", GEGLU_TANH, 2, {7, 301}, 0, 0, 0, 0, 0, "GeGLUGrad", 0, NULL},
    };
    RUN(cases);
}

static void test_rope(void **state)
{
    (void)state;
    /* axis: the rank of Cos / Sin (X's trailing dims: broadcast when lower) */
    static const struct gcase cases[] = {
        {"RoPE 3x8, Cos 3x8", ROPE, 2, {3, 8}, 2, 0, 0, 0, 0, "RoPEGrad", 0, NULL},
        {"RoPE 2x3x5x6, Cos 5x6", ROPE, 4, {2, 3, 5, 6}, 2, 0, 0, 0, 0, "RoPEGrad", 0, NULL},
        {"RoPE 2x3x7x10, Cos 3x7x10", ROPE, 4, {2, 3, 7, 10}, 3, 0, 0, 0, 0, "RoPEGrad", 0, NULL},
        {"RoPE 3x1x9x2, Cos 2", ROPE, 4, {3, 1, 9, 2}, 1, 0, 0, 0, 0, "RoPEGrad", 0, NULL},
        {"RoPE 2x4x65x16, Cos 65x16", ROPE, 4, {2, 4, 65, 16}, 2, 0, 0, 0, 0, "RoPEGrad", 0, NULL},
    };
    RUN(cases);
}

static void test_layer_norm(void **state)
{
    (void)state;
    /* w_rank 0: no W; B has W's rank (1 without W) */
    static const struct gcase cases[] = {
        {"LayerNorm 3x8 W B", LN, 2, {3, 8}, -1, 1, 1e-5, 0, 0, "LayerNormGrad", F_BIAS, NULL},
        {"LayerNorm 5x13 W", LN, 2, {5, 13}, -1, 1, 1e-5, 0, 0, "LayerNormGrad", 0, NULL},
        {"LayerNorm 4x9 B", LN, 2, {4, 9}, -1, 0, 1e-3, 0, 0, "LayerNormGrad", F_BIAS, NULL},
        {"LayerNorm 3x11 no W, no B", LN, 2, {3, 11}, -1, 0, 1e-5, 0, 0, "LayerNormGrad", 0, NULL},
        {"LayerNorm 3x7 stats listed", LN, 2, {3, 7}, -1, 1, 1e-5, 0, 0, "LayerNormGrad",
         F_BIAS | F_STATS, NULL},
        {"LayerNorm 2x3x5x7 axis -2, W B broadcast", LN, 4, {2, 3, 5, 7}, -2, 1, 1e-5, 0, 0,
         "LayerNormGrad", F_BIAS, NULL},
        {"LayerNorm 2x3x5 axis 1, W 3x5", LN, 3, {2, 3, 5}, 1, 2, 1e-5, 0, 0, "LayerNormGrad",
         F_BIAS, NULL},
        /* rows enough for dW and dB to split over threads */
        {"LayerNorm 3x700x17", LN, 3, {3, 700, 17}, -1, 1, 1e-5, 0, 0, "LayerNormGrad", F_BIAS,
         NULL},
    };
    RUN(cases);
}

static void test_add_layer_norm(void **state)
{
    (void)state;
    static const struct gcase cases[] = {
        {"AddLayerNorm 3x8", ADD_LN, 2, {3, 8}, -1, 1, 1e-5, 0, 0, "LayerNormGrad", F_BIAS, NULL},
        {"AddLayerNorm 5x7 no B", ADD_LN, 2, {5, 7}, -1, 1, 1e-5, 0, 0, "LayerNormGrad", 0, NULL},
        {"AddLayerNorm 3x9 no W, stats", ADD_LN, 2, {3, 9}, -1, 0, 1e-5, 0, 0, "LayerNormGrad",
         F_BIAS | F_STATS, NULL},
        {"AddLayerNorm 2x3x5 axis -2", ADD_LN, 3, {2, 3, 5}, -2, 1, 1e-5, 0, 0,
         "LayerNormGrad", F_BIAS, NULL},
        {"AddLayerNorm 2x1100x15", ADD_LN, 3, {2, 1100, 15}, -1, 1, 1e-5, 0, 0,
         "LayerNormGrad", F_BIAS, NULL},
    };
    RUN(cases);
}

static void test_matmul_epilogue(void **state)
{
    (void)state;
    /* A rank/dims; flags; B rank/dims, activation, alpha, beta */
#define SPEC(...) &(const struct mmspec){__VA_ARGS__}
#define GRAD "MatMulEpilogueGrad"
    const struct gcase cases[] = {
        {"MME 5x7 @ 7x6 + bias", MME, 2, {5, 7}, 0, 0, 0, 0, 0, GRAD, F_BIAS,
         SPEC(2, {7, 6}, "", 1, 1)},
        {"MME relu (from Y)", MME, 2, {5, 7}, 0, 0, 0, 0, 0, GRAD, F_BIAS,
         SPEC(2, {7, 6}, "relu", 1, 1)},
        {"MME relu + Res", MME, 2, {4, 3}, 0, 0, 0, 0, 0, GRAD, F_BIAS | F_RES,
         SPEC(2, {3, 5}, "relu", 1, 1)},
        {"MME tanh (from Y)", MME, 3, {2, 3, 4}, 0, 0, 0, 0, 0, GRAD, 0,
         SPEC(2, {4, 5}, "tanh", 0.5, 1)},
        {"MME sigmoid, Bias [M,1]", MME, 2, {4, 6}, 0, 0, 0, 0, 0, GRAD, F_BIAS_COL,
         SPEC(2, {6, 3}, "sigmoid", 1, 1)},
        {"MME sigmoid + Res, beta 2", MME, 2, {4, 6}, 0, 0, 0, 0, 0, GRAD, F_BIAS | F_RES,
         SPEC(2, {6, 3}, "sigmoid", 1, 2)},
        {"MME gelu transA transB alpha beta", MME, 3, {2, 7, 5}, 0, 0, 0, 0, 0, GRAD,
         F_BIAS | F_TA | F_TB, SPEC(2, {6, 7}, "gelu", 0.5, 2)},
        {"MME gelu_tanh batched + Res", MME, 3, {3, 4, 5}, 0, 0, 0, 0, 0, GRAD, F_BIAS | F_RES,
         SPEC(2, {5, 9}, "gelu_tanh", 1, 1)},
        {"MME silu, B batch broadcast", MME, 4, {2, 3, 4, 5}, 0, 0, 0, 0, 0, GRAD, F_BIAS,
         SPEC(3, {3, 5, 6}, "silu", 1, 1)},
        {"MME tanh + Res, A 2-D, B batched, transB", MME, 2, {4, 5}, 0, 0, 0, 0, 0, GRAD,
         F_RES | F_TB, SPEC(3, {2, 3, 5}, "tanh", 1, 1)},
        {"MME silu transA, B batched", MME, 3, {2, 5, 4}, 0, 0, 0, 0, 0, GRAD, F_TA,
         SPEC(3, {2, 5, 3}, "silu", 1.5, 1)},
        /* rows enough for the dBias partials to split over threads */
        {"MME gelu 700x9 @ 9x17", MME, 2, {700, 9}, 0, 0, 0, 0, 0, GRAD, F_BIAS,
         SPEC(2, {9, 17}, "gelu", 1, 1)},
        /* no activation and no row Bias: no epilogue kernel, only the GEMMs */
        {"MME Res only", MME, 2, {3, 4}, 0, 0, 0, 0, 0, "MatMulEpilogue", F_RES,
         SPEC(2, {4, 5}, "", 2, 1)},
        {"MME transB, batched", MME, 3, {2, 3, 4}, 0, 0, 0, 0, 0, "MatMulEpilogue", F_TB,
         SPEC(3, {2, 5, 4}, "", 1, 1)},
    };
#undef SPEC
#undef GRAD
    RUN(cases);
}

static void test_softmax_cross_entropy(void **state)
{
    (void)state;
#define CE(name, rank, dims, flags)                                                       \
    {name, SCE, rank, dims, 0, 0, 0, 0, 0, "SoftmaxCrossEntropy", flags, NULL}
#define D(...) {__VA_ARGS__}
    static const struct gcase cases[] = {
        CE("SCE 7x5 mean", 2, D(7, 5), 0),
        CE("SCE 7x5 mean, the loss itself", 2, D(7, 5), F_UNIT),
        CE("SCE 7x5 mean, computed logits", 2, D(7, 5), F_ACT | F_II),
        CE("SCE 3x4x5 none, computed logits", 3, D(3, 4, 5), F_ACT | F_NONE),
        CE("SCE shift 2x5x7 sum, computed logits", 3, D(2, 5, 7), F_ACT | F_SHIFT | F_SUM),
        CE("SCE 6x9 sum, ignore_index", 2, D(6, 9), F_SUM | F_II),
        CE("SCE 6x9 sum, the loss itself", 2, D(6, 9), F_SUM | F_UNIT | F_II),
        CE("SCE 5x4 none", 2, D(5, 4), F_NONE),
        CE("SCE 3x5x4 mean, weights, ignore_index", 3, D(3, 5, 4), F_WC | F_II),
        CE("SCE 2x6x3x5 none, weights", 4, D(2, 6, 3, 5), F_NONE | F_WC),
        CE("SCE shift 2x5x7 mean", 3, D(2, 5, 7), F_SHIFT),
        CE("SCE shift 3x4x6 sum, ignore_index, weights", 3, D(3, 4, 6),
           F_SHIFT | F_SUM | F_II | F_WC),
        CE("SCE shift 2x6x5 none, ignore_index", 3, D(2, 6, 5), F_SHIFT | F_NONE | F_II),
        CE("SCE shift 3x7x9 mean, the loss itself", 3, D(3, 7, 9), F_SHIFT | F_UNIT | F_II),
        /* positions enough to split over threads */
        CE("SCE 3000x11 mean", 2, D(3000, 11), F_II),
    };
#undef D
#undef CE
    RUN(cases);
}

static void test_linear_cross_entropy(void **state)
{
    (void)state;
    /* H rank/dims, chunk_rows (0: automatic), flags, V; eps: the tolerance of fused
     * against op by op when set */
#define CE(name, rank, dims, chunk, flags, v)                                             \
    {name, LCE, rank, dims, chunk, 0, 0, 0, 0, "LinearCrossEntropy", flags,               \
     &(const struct mmspec){1, {v}, "", 1, 1}}
#define D(...) {__VA_ARGS__}
    const struct gcase cases[] = {
        CE("LCE 7x5 @ 5x9 mean", 2, D(7, 5), 0, 0, 9),
        CE("LCE 7x5 @ 5x9 mean, the loss itself", 2, D(7, 5), 0, F_UNIT, 9),
        CE("LCE 7x5 @ 9x5^T sum, bias", 2, D(7, 5), 0, F_TB | F_SUM | F_BIAS, 9),
        CE("LCE 11x6 @ 6x13 mean, ignore_index, chunks of 3", 2, D(11, 6), 3, F_II | F_BIAS, 13),
        CE("LCE shift 2x5x4 @ 4x7 mean", 3, D(2, 5, 4), 0, F_SHIFT | F_BIAS, 7),
        CE("LCE shift 3x6x5 @ 8x5^T sum, ignore_index, chunks of 4", 3, D(3, 6, 5), 4,
           F_SHIFT | F_TB | F_SUM | F_II, 8),
        CE("LCE shift 2x7x3 @ 3x6 mean, the loss itself", 3, D(2, 7, 3), 2,
           F_SHIFT | F_UNIT | F_II, 6),
        /* rows enough for a chunk's rows to split over threads; dW sums 1200 rows of
         * terms of both signs in float, fused and op by op: 1e-4 between them */
        {"LCE 1200x7 @ 7x33 mean", LCE, 2, {1200, 7}, 0, 0, 1e-4, 0, 0, "LinearCrossEntropy",
         F_II | F_BIAS, &(const struct mmspec){1, {33}, "", 1, 1}},
    };
#undef D
#undef CE
    RUN(cases);
}

static void test_jsd(void **state)
{
    (void)state;
    /* beta: the offset field; fused against op by op within 1e-4 (tolerance()) */
#define J(name, rank, dims, beta, flags)                                                  \
    {name, JSD, rank, dims, 0, 0, 1e-4, beta, 0, "JSDGrad", flags, NULL}
#define D(...) {__VA_ARGS__}
    static const struct gcase cases[] = {
        J("JSD 5x7 beta 0.5", 2, D(5, 7), 0.5, 0),
        J("JSD 5x7 beta 0 (KL(P||Q))", 2, D(5, 7), 0, 0),
        J("JSD 5x7 beta 1 (KL(Q||P))", 2, D(5, 7), 1, 0),
        J("JSD 6x9 beta 0.3, labels", 2, D(6, 9), 0.3, F_II),
        J("JSD 2x5x8 beta 0.8, labels", 3, D(2, 5, 8), 0.8, F_II),
        J("JSD 4x6 beta 0, labels, the loss itself", 2, D(4, 6), 0, F_II | F_UNIT),
        J("JSD 900x33 beta 0.5", 2, D(900, 33), 0.5, F_II),
    };
#undef D
#undef J
    RUN(cases);
}

static void test_attention(void **state)
{
    (void)state;
    /* Q rank/dims, Sk, Dv, scale, flags (see build_attn) */
#define AT(name, rank, dims, sk, dv, scale, flags)                                        \
    {name, ATTN, rank, dims, sk, dv, 0, scale, 0, "AttentionGrad", flags, NULL}
#define D(...) {__VA_ARGS__}
    static const struct gcase cases[] = {
        AT("Attention 2x3x5x4, Sk 7, Dv 6, mask [Sq,Sk]", 4, D(2, 3, 5, 4), 7, 6, 0.5,
           F_TB | F_BIAS),
        AT("Attention 2x5x4, no mask", 3, D(2, 5, 4), 6, 3, 0.5, F_TB),
        AT("Attention K [D, Sk], mask [B,1,Sq,Sk]", 4, D(2, 3, 6, 5), 4, 5, 1.0,
           F_BIAS_COL),
        AT("Attention 3x7x3, mask [Sk], scale 0.3", 3, D(3, 7, 3), 9, 2, 0.3, F_TB | F_RES),
        AT("Attention 1x2x1x8, one query row", 4, D(1, 2, 1, 8), 5, 4, 0.35, F_TB | F_BIAS),
        /* Sk long enough for query blocks of 31 rows: 70 rows in 3 blocks; dK sums
         * 2100 products of both signs per element: fused and op by op within 1e-4 */
        {"Attention 2x70x3, Sk 2100", ATTN, 3, {2, 70, 3}, 2100, 2, 1e-4, 0.25, 0,
         "AttentionGrad", F_TB | F_BIAS, NULL},
        /* causal masks: blocks of 31 query rows stop at different keys (K as is,
         * transposed, and a mask per batch) */
        {"Attention 2x70x3, Sk 2100, causal", ATTN, 3, {2, 70, 3}, 2100, 2, 1e-4, 0.25, 0,
         "AttentionGrad", F_TB | F_BIAS | F_CAUSAL, NULL},
        {"Attention 2x2x70x3, Sk 2100, K [D, Sk], causal [B,1,Sq,Sk]", ATTN, 4, {2, 2, 70, 3},
         2100, 2, 1e-4, 0.25, 0, "AttentionGrad", F_BIAS_COL | F_CAUSAL, NULL},
        AT("Attention 2x3x9x4, Sk 9, causal", 4, D(2, 3, 9, 4), 9, 6, 0.5,
           F_TB | F_BIAS | F_CAUSAL),
        /* items enough for every thread */
        AT("Attention 4x8x9x5, Sk 11", 4, D(4, 8, 9, 5), 11, 5, 0.4, F_TB | F_BIAS_COL),
        /* a fully masked query row: O and its gradients 0 (zero_masked_rows) */
        AT("Attention 2x3x5x4, Sk 7, a row of -inf", 4, D(2, 3, 5, 4), 7, 6, 0.5,
           F_TB | F_BIAS | F_ZERO),
    };
#undef D
#undef AT
    RUN(cases);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_norm),
        cmocka_unit_test(test_add_rms_norm),
        cmocka_unit_test(test_glu),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_add_layer_norm),
        cmocka_unit_test(test_matmul_epilogue),
        cmocka_unit_test(test_softmax_cross_entropy),
        cmocka_unit_test(test_linear_cross_entropy),
        cmocka_unit_test(test_jsd),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
