/* Attention: the scaled dot-product attention of the exporters' Llama-style
 * models, after the matmul patterns made its scores a MatMulEpilogue,
 * becomes one Attention node whose kernels never hold the probabilities of
 * every head at once (README "Fused ops").  Opt-in (gf_fuse_opts.enabled):
 * the trainer turns it on, for the memory the backward would otherwise keep.
 * Pattern format: pattern.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pattern.h"

enum { CQ, CK, CV, CM };
static const struct gf_pcap attn_caps[] = {
    [CQ] = GF_K_ANY("q"), [CK] = GF_K_ANY("k"), [CV] = GF_K_ANY("v"), [CM] = GF_K_ANY("mask"),
};

/* ---- softmax(scale q k' + mask) v ---------------------------------------------------
 *   q, k ─MatMulEpilogue(alpha, transB)─[Cast]─[Add(mask)]─Softmax(last axis)─[Cast]─┐
 *   v ──────────────────────────────────────────────────────────────────────MatMul── o
 *   = Attention(q, k, v, mask) {scale = alpha, transB}
 * The optional Casts are the precision pass's (bf16 / fp16, docs/precision.md):
 * the scores widened to fp32 for the mask and the softmax, the probabilities
 * narrowed back for the MatMul.  Attention then takes q, k, v and the mask in
 * the low type and computes its softmax in fp32, as autocast's SDPA does. */
enum { A_MME, A_MMC, A_MMS, A_ADD, A_SRC, A_SM, A_SMC, A_P, A_ROOT };
static const struct gf_pnode attn_nodes[] = {
    [A_MME] = {GF_P("scores", GF_OP_MATMUL_EPILOGUE, GF_C(CQ), GF_C(CK))},
    [A_MMC] = {GF_P("scores to fp32", GF_OP_CAST, GF_N(A_MME))},
    [A_MMS] = {GF_P("scores, cast or not", GF_PAT_ALT, GF_N(A_MMC), GF_N(A_MME))},
    [A_ADD] = {GF_P("mask", GF_OP_ADD, GF_N(A_MMS), GF_C(CM)), .flags = GF_PF_COMMUTE},
    [A_SRC] = {GF_P("masked scores", GF_PAT_ALT, GF_N(A_ADD), GF_N(A_MMS))},
    [A_SM] = {GF_P("softmax", GF_OP_SOFTMAX, GF_N(A_SRC))},
    [A_SMC] = {GF_P("probabilities to the low type", GF_OP_CAST, GF_N(A_SM))},
    [A_P] = {GF_P("probabilities, cast or not", GF_PAT_ALT, GF_N(A_SMC), GF_N(A_SM))},
    [A_ROOT] = {GF_P("matmul", GF_OP_MATMUL, GF_N(A_P), GF_C(CV))},
};

/* a's and b's dims before the last two are provably the same. */
static bool same_batch(const struct gf_value *a, const struct gf_value *b)
{
    int r = gf_pat_rank(a);
    if (r < 2 || r != gf_pat_rank(b))
        return false;
    for (int i = 0; i < r - 2; i++) {
        const struct gf_dim *p = &a->type.dims[i], *q = &b->type.dims[i];
        if (p->value >= 0 || q->value >= 0 ? p->value != q->value
                                           : !p->param || !q->param || strcmp(p->param, q->param))
            return false;
    }
    return true;
}

static bool compute_dtype(const struct gf_value *v)
{
    return v && v->type.kind == GF_TYPE_TENSOR &&
           (v->type.dtype == GF_FLOAT || v->type.dtype == GF_DOUBLE);
}

static bool half_dtype(enum gf_dtype t)
{
    return t == GF_BFLOAT16 || t == GF_FLOAT16;
}

/* The type Attention computes in: the root MatMul's output type.  A 16-bit
 * one is the precision pass's low type; q, k, v and the mask are then cast
 * to it (the rewrite adds the Casts, as autocast casts SDPA's inputs). */
static enum gf_dtype attn_type(struct gf_match *m, int root)
{
    const struct gf_value *o = gf_match_node(m, root)->outputs[0];
    return o->type.kind == GF_TYPE_TENSOR ? o->type.dtype : GF_UNDEFINED;
}

/* The matched Casts (pattern nodes `pns`, -1 ends; NULL: not taken) are
 * between float types only. */
static bool float_casts(struct gf_match *m, const int *pns)
{
    for (; *pns >= 0; pns++) {
        const struct gf_node *c = gf_match_node(m, *pns);
        if (c && (!gf_pat_float(c->inputs[0]) || !gf_pat_float(c->outputs[0])))
            return gf_match_fail(m, *pns, "not a Cast between float types");
    }
    return true;
}

/* v in type t: v itself, or a new Cast placed before `before`. */
static enum gf_status input_as(struct gf_match *m, struct gf_fused *f, struct gf_value *v,
                               enum gf_dtype t, struct gf_node *before)
{
    if (!v || v->type.dtype == t)
        return gf_fused_input(f, v);
    struct gf_graph *g = m->graph;
    char hint[256];
    snprintf(hint, sizeof(hint), "%s_%s", v->name, gf_dtype_name(t));
    struct gf_value *y = gf_graph_new_value(g, NULL, hint);
    if (!y)
        return gf_error(GF_ERR_NOMEM, "attention: out of memory");
    gf_value_set_tensor_type(y, t, v->type.rank, v->type.dims);
    struct gf_node *c = gf_graph_add_node(g, "Cast", "", y->name, 1, &v, 1, &y);
    if (!c || gf_node_set_attr_int(c, "to", t) != GF_OK)
        return gf_error(GF_ERR_NOMEM, "attention: out of memory");
    gf_node_move_before(c, before);
    /* the matched nodes, removed right after, read the Cast too: the
     * engine checks that the match reads only fused inputs */
    for (int pn = 0; pn < m->pat->n_nodes; pn++)
        for (struct gf_node *n = gf_match_node(m, pn); n && n != c; n = NULL)
            for (size_t i = 0; i < n->n_inputs; i++)
                if (n->inputs[i] == v)
                    gf_node_set_input(n, i, y);
    for (int i = 0; i < m->n_cast; i++)
        for (size_t j = 0; j < m->cast[i]->n_inputs; j++)
            if (m->cast[i]->inputs[j] == v)
                gf_node_set_input(m->cast[i], j, y);
    return gf_fused_input(f, y);
}

/* The four inputs (captures cq..cq+3), in the low type when attention
 * computes in one. */
static enum gf_status attn_inputs(struct gf_match *m, struct gf_fused *f, int cq, int root)
{
    enum gf_dtype t = attn_type(m, root);
    struct gf_node *r = gf_match_node(m, root);
    enum gf_status st = GF_OK;
    for (int c = cq; st == GF_OK && c <= cq + 3; c++) {
        struct gf_value *v = gf_match_cap(m, c);
        st = half_dtype(t) ? input_as(m, f, v, t, r) : gf_fused_input(f, v);
    }
    return st;
}

/* The Softmax normalizes the last axis (before opset 13 it flattens the
 * axes from `axis` on, the same thing when that is the last; its default
 * there is 1). */
static bool softmax_last(struct gf_match *m, int pn)
{
    const struct gf_node *sm = gf_match_node(m, pn);
    int r = gf_pat_rank(sm->inputs[0]);
    int64_t dflt = gf_model_opset(m->graph->model, "") >= 13 ? -1 : 1;
    int64_t axis = gf_node_attr_int(sm, "axis", dflt);
    if (r < 0 || (axis != -1 && axis != r - 1))
        return gf_match_fail(m, pn, "the softmax axis %lld is not the last of rank %d",
                             (long long)axis, r);
    return true;
}

/* What both forms need of the operands (captures q, k, v, mask at cq..cq+3;
 * pattern nodes: the root, the mask's Add, the Softmax): float or double
 * alike, the same batch dims, a mask of no higher rank, the last axis. */
static bool operands_fit(struct gf_match *m, int cq, int root, int add, int softmax)
{
    struct gf_value *q = gf_match_cap(m, cq), *k = gf_match_cap(m, cq + 1);
    struct gf_value *v = gf_match_cap(m, cq + 2), *mask = gf_match_cap(m, cq + 3);
    if (half_dtype(attn_type(m, root))) { /* the precision pass's: cast in the rewrite */
        if (!gf_pat_float(q) || !gf_pat_float(k) || !gf_pat_float(v) ||
            (mask && !gf_pat_float(mask)))
            return gf_match_fail(m, root, "q, k, v (and the mask) must be float");
        if (!same_batch(q, k) || !same_batch(q, v))
            return gf_match_fail(m, root, "q, k and v do not provably share their batch dims");
        if (mask && gf_pat_rank(mask) > gf_pat_rank(q))
            return gf_match_fail(m, add, "the mask has a higher rank than the scores");
        return softmax_last(m, softmax);
    }
    if (!compute_dtype(q) || !compute_dtype(k) || !compute_dtype(v) ||
        (mask && !compute_dtype(mask)))
        return gf_match_fail(m, root, "q, k, v (and the mask) must be float or double");
    if (q->type.dtype != k->type.dtype || q->type.dtype != v->type.dtype ||
        (mask && mask->type.dtype != q->type.dtype))
        return gf_match_fail(m, root, "q, k, v and the mask differ in dtype");
    if (!same_batch(q, k) || !same_batch(q, v))
        return gf_match_fail(m, root, "q, k and v do not provably share their batch dims");
    if (mask && gf_pat_rank(mask) > gf_pat_rank(q))
        return gf_match_fail(m, add, "the mask has a higher rank than the scores");
    return softmax_last(m, softmax);
}

static bool attn_check(struct gf_match *m)
{
    const struct gf_node *mme = gf_match_node(m, A_MME);
    if (gf_node_attr_int(mme, "transA", 0) || *gf_node_attr_string(mme, "activation", ""))
        return gf_match_fail(m, A_MME, "the scores have transA or an activation");
    static const int casts[] = {A_MMC, A_SMC, -1};
    return float_casts(m, casts) && operands_fit(m, CQ, A_ROOT, A_ADD, A_SM);
}

static enum gf_status attn_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_node *mme = gf_match_node(m, A_MME);
    float alpha = gf_node_attr_float(mme, "alpha", 1.0f);
    enum gf_status st = GF_OK;
    f->op = GF_OP_ATTENTION;
    st = attn_inputs(m, f, CQ, A_ROOT);
    if (st == GF_OK && alpha != 1.0f)
        st = gf_fused_attr_float(f, "scale", alpha);
    if (st == GF_OK && gf_node_attr_int(mme, "transB", 0))
        st = gf_fused_attr_int(f, "transB", 1);
    return st;
}

/* ---- the exporters' SDPA math: q and k scaled apart, NaN rows zeroed ----------------------
 * torch's scaled_dot_product_attention, exported (legacy and dynamo) as its math
 * fallback, scales q and kᵀ by sqrt(scale) each and zeroes the rows a fully
 * masked softmax turns to NaN:
 *   q ──[Mul(sq)]───────────────────────────────────┐
 *   k ──Transpose | Reshape·Transpose·Reshape──[Mul(sk)]─MatMul─[Add(mask)]─Softmax─┐
 *                                      Where(IsNaN(p), 0, p) or p ──────────MatMul(v)── o
 *   = Attention(q, k, v, mask) {scale = sq sk, transB = 1, zero_masked_rows}
 * k without a transpose gives transB = 0 (k is then [b..., D, Sk]).  Under the
 * precision pass a Cast may stand after each scaled operand, the scores and
 * the probabilities (see the first form). */
enum { SQ, SK, SV, SM, SSQ, SSK, SZ };
static const struct gf_pcap sdpa_caps[] = {
    [SQ] = GF_K_ANY("q"),          [SK] = GF_K_ANY("k"),
    [SV] = GF_K_ANY("v"),          [SM] = GF_K_ANY("mask"),
    [SSQ] = GF_K_CONST("q scale"), [SSK] = GF_K_CONST("k scale"),
    [SZ] = GF_K_SCALAR("zero", 0.0, 0),
};
enum { S_QMUL, S_QC, S_Q, S_KT, S_KR1, S_KTR, S_KR2, S_KTA, S_KMUL, S_KC, S_K, S_MM, S_MMC,
       S_MMS, S_ADD, S_SRC, S_SM, S_NAN, S_WH, S_P, S_PC, S_PP, S_ROOT };
static const struct gf_pnode sdpa_nodes[] = {
    [S_QMUL] = {GF_P("q scale", GF_OP_MUL, GF_C(SQ), GF_C(SSQ)), .flags = GF_PF_COMMUTE},
    [S_QC] = {GF_P("scaled q cast", GF_OP_CAST, GF_N(S_QMUL))},
    [S_Q] = {GF_P("q", GF_PAT_ALT, GF_N(S_QMUL), GF_N(S_QC), GF_C(SQ))},
    [S_KT] = {GF_P("k transpose", GF_OP_TRANSPOSE, GF_C(SK))},
    [S_KR1] = {GF_P("k flattened", GF_OP_RESHAPE, GF_C(SK), GF_ANY)},
    [S_KTR] = {GF_P("flat k transpose", GF_OP_TRANSPOSE, GF_N(S_KR1))},
    [S_KR2] = {GF_P("k transposed", GF_OP_RESHAPE, GF_N(S_KTR), GF_ANY)},
    [S_KTA] = {GF_P("k'", GF_PAT_ALT, GF_N(S_KT), GF_N(S_KR2), GF_C(SK))},
    [S_KMUL] = {GF_P("k scale", GF_OP_MUL, GF_N(S_KTA), GF_C(SSK)), .flags = GF_PF_COMMUTE},
    [S_KC] = {GF_P("scaled k' cast", GF_OP_CAST, GF_N(S_KMUL))},
    [S_K] = {GF_P("scaled k'", GF_PAT_ALT, GF_N(S_KMUL), GF_N(S_KC), GF_N(S_KTA))},
    [S_MM] = {GF_P("scores", GF_OP_MATMUL, GF_N(S_Q), GF_N(S_K))},
    [S_MMC] = {GF_P("scores to fp32", GF_OP_CAST, GF_N(S_MM))},
    [S_MMS] = {GF_P("scores, cast or not", GF_PAT_ALT, GF_N(S_MMC), GF_N(S_MM))},
    [S_ADD] = {GF_P("mask", GF_OP_ADD, GF_N(S_MMS), GF_C(SM)), .flags = GF_PF_COMMUTE},
    [S_SRC] = {GF_P("masked scores", GF_PAT_ALT, GF_N(S_ADD), GF_N(S_MMS))},
    [S_SM] = {GF_P("softmax", GF_OP_SOFTMAX, GF_N(S_SRC))},
    [S_NAN] = {GF_P("isnan", GF_OP_IS_NAN, GF_N(S_SM))},
    [S_WH] = {GF_P("zero NaN rows", GF_OP_WHERE, GF_N(S_NAN), GF_C(SZ), GF_N(S_SM))},
    [S_P] = {GF_P("probabilities", GF_PAT_ALT, GF_N(S_WH), GF_N(S_SM))},
    [S_PC] = {GF_P("probabilities to the low type", GF_OP_CAST, GF_N(S_P))},
    [S_PP] = {GF_P("probabilities, cast or not", GF_PAT_ALT, GF_N(S_PC), GF_N(S_P))},
    [S_ROOT] = {GF_P("matmul", GF_OP_MATMUL, GF_N(S_PP), GF_C(SV))},
};

/* perm of a Transpose node swaps the last two of its rank axes, nothing else. */
static bool swaps_last_two(const struct gf_node *t, int rank)
{
    const struct gf_attr *a = gf_node_attr(t, "perm");
    if (rank < 2 || !a || a->type != GF_ATTR_INTS || (int)a->n != rank)
        return false;
    for (int i = 0; i < rank; i++)
        if (a->ints[i] != (i < rank - 2 ? i : i == rank - 2 ? rank - 1 : rank - 2))
            return false;
    return true;
}

/* Dims a[i] and b[j] are provably equal. */
static bool same_dim(const struct gf_value *a, int i, const struct gf_value *b, int j)
{
    const struct gf_dim *p = &a->type.dims[i], *q = &b->type.dims[j];
    return p->value >= 0 || q->value >= 0
               ? p->value == q->value
               : p->param && q->param && strcmp(p->param, q->param) == 0;
}

/* Reshape(Transpose(Reshape(k, [n, Sk, D]), perm 0 2 1), [b..., D, Sk]): kᵀ of
 * the last two axes with the batch dims flattened (the dynamo exporter's). */
static bool flat_transpose(struct gf_match *m, const struct gf_value *k)
{
    const struct gf_node *r1 = gf_match_node(m, S_KR1), *t = gf_match_node(m, S_KTR);
    const struct gf_value *flat = r1->outputs[0], *kt = gf_match_node(m, S_KR2)->outputs[0];
    int r = gf_pat_rank(k), fr = gf_pat_rank(flat);
    if (fr < 2 || !swaps_last_two(t, fr) || gf_pat_rank(kt) != r || r < 2)
        return gf_match_fail(m, S_KTR, "not a transpose of the last two axes of k");
    if (!same_dim(flat, fr - 2, k, r - 2) || !same_dim(flat, fr - 1, k, r - 1) ||
        !same_dim(kt, r - 2, k, r - 1) || !same_dim(kt, r - 1, k, r - 2))
        return gf_match_fail(m, S_KR2, "the reshapes do not provably keep k's last two axes");
    for (int i = 0; i < r - 2; i++)
        if (!same_dim(kt, i, k, i))
            return gf_match_fail(m, S_KR2, "the reshapes do not provably keep k's batch dims");
    return true;
}

/* A scale capture: one finite element (missing: 1). */
static bool scale_of(struct gf_match *m, int cap, int pn, double *s)
{
    const struct gf_tensor *t = gf_match_const(m, cap);
    *s = 1.0;
    if (!gf_match_cap(m, cap))
        return true;
    if (!t || !gf_pat_scalar(t, s) || !isfinite(*s))
        return gf_match_fail(m, pn, "the scale is not one finite constant");
    return true;
}

static bool sdpa_check(struct gf_match *m)
{
    struct gf_value *k = gf_match_cap(m, SK);
    double sq = 1, sk = 1;
    if (!scale_of(m, SSQ, S_QMUL, &sq) || !scale_of(m, SSK, S_KMUL, &sk))
        return false;
    const struct gf_node *kt = gf_match_node(m, S_KT);
    if (kt && !swaps_last_two(kt, gf_pat_rank(k)))
        return gf_match_fail(m, S_KT, "the transpose is not of k's last two axes");
    if (gf_match_node(m, S_KR2) && !flat_transpose(m, k))
        return false;
    m->f[0] = sq * sk;
    static const int casts[] = {S_QC, S_KC, S_MMC, S_PC, -1};
    if (!float_casts(m, casts))
        return false;
    return operands_fit(m, SQ, S_ROOT, S_ADD, S_SM);
}

static enum gf_status sdpa_rewrite(struct gf_match *m, struct gf_fused *f)
{
    enum gf_status st;
    bool tb = gf_match_node(m, S_KT) || gf_match_node(m, S_KR2);
    f->op = GF_OP_ATTENTION;
    st = attn_inputs(m, f, SQ, S_ROOT);
    if (st == GF_OK && m->f[0] != 1.0)
        st = gf_fused_attr_float(f, "scale", (float)m->f[0]);
    if (st == GF_OK && tb)
        st = gf_fused_attr_int(f, "transB", 1);
    if (st == GF_OK && gf_match_node(m, S_WH))
        st = gf_fused_attr_int(f, "zero_masked_rows", 1);
    return st;
}

/* ---- the table ----------------------------------------------------------------------------- */

const struct gf_pattern gf_patterns_attn[] = {
    GF_PATTERN("attention", "softmax(scale q k' + mask) v", attn_nodes, attn_caps, attn_check,
               attn_rewrite),
    GF_PATTERN("attention", "SDPA math: softmax(q s (k s)' + mask), NaN rows 0, v", sdpa_nodes,
               sdpa_caps, sdpa_check, sdpa_rewrite),
};
const size_t gf_patterns_attn_count = sizeof(gf_patterns_attn) / sizeof(gf_patterns_attn[0]);
