/* Attention: the scaled dot-product attention of the exporters' Llama-style
 * models, after the matmul patterns made its scores a MatMulEpilogue,
 * becomes one Attention node whose kernels never hold the probabilities of
 * every head at once (README "Fused ops").  Opt-in (gf_fuse_opts.enabled):
 * the trainer turns it on, for the memory the backward would otherwise keep.
 * Pattern format: pattern.h. */
#include <string.h>

#include "pattern.h"

enum { CQ, CK, CV, CM };
static const struct gf_pcap attn_caps[] = {
    [CQ] = GF_K_ANY("q"), [CK] = GF_K_ANY("k"), [CV] = GF_K_ANY("v"), [CM] = GF_K_ANY("mask"),
};

/* ---- softmax(scale q k' + mask) v ---------------------------------------------------
 *   q, k ─MatMulEpilogue(alpha, transB)─[Add(mask)]─Softmax(last axis)─┐
 *   v ───────────────────────────────────────────────────────────────MatMul── o
 *   = Attention(q, k, v, mask) {scale = alpha, transB}
 */
enum { A_MME, A_ADD, A_SRC, A_SM, A_ROOT };
static const struct gf_pnode attn_nodes[] = {
    [A_MME] = {GF_P("scores", GF_OP_MATMUL_EPILOGUE, GF_C(CQ), GF_C(CK))},
    [A_ADD] = {GF_P("mask", GF_OP_ADD, GF_N(A_MME), GF_C(CM)), .flags = GF_PF_COMMUTE},
    [A_SRC] = {GF_P("masked scores", GF_PAT_ALT, GF_N(A_ADD), GF_N(A_MME))},
    [A_SM] = {GF_P("softmax", GF_OP_SOFTMAX, GF_N(A_SRC))},
    [A_ROOT] = {GF_P("matmul", GF_OP_MATMUL, GF_N(A_SM), GF_C(CV))},
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

/* The Softmax normalizes the last axis (before opset 13 it flattens the
 * axes from `axis` on, the same thing when that is the last; its default
 * there is 1). */
static bool softmax_last(struct gf_match *m)
{
    const struct gf_node *sm = gf_match_node(m, A_SM);
    int r = gf_pat_rank(sm->inputs[0]);
    int64_t dflt = gf_model_opset(m->graph->model, "") >= 13 ? -1 : 1;
    int64_t axis = gf_node_attr_int(sm, "axis", dflt);
    if (r < 0 || (axis != -1 && axis != r - 1))
        return gf_match_fail(m, A_SM, "the softmax axis %lld is not the last of rank %d",
                             (long long)axis, r);
    return true;
}

static bool attn_check(struct gf_match *m)
{
    const struct gf_node *mme = gf_match_node(m, A_MME);
    struct gf_value *q = gf_match_cap(m, CQ), *k = gf_match_cap(m, CK), *v = gf_match_cap(m, CV);
    struct gf_value *mask = gf_match_cap(m, CM);
    if (gf_node_attr_int(mme, "transA", 0) || *gf_node_attr_string(mme, "activation", ""))
        return gf_match_fail(m, A_MME, "the scores have transA or an activation");
    if (!compute_dtype(q) || !compute_dtype(k) || !compute_dtype(v) ||
        (mask && !compute_dtype(mask)))
        return gf_match_fail(m, A_ROOT, "q, k, v (and the mask) must be float or double");
    if (q->type.dtype != k->type.dtype || q->type.dtype != v->type.dtype ||
        (mask && mask->type.dtype != q->type.dtype))
        return gf_match_fail(m, A_ROOT, "q, k, v and the mask differ in dtype");
    if (!same_batch(q, k) || !same_batch(q, v))
        return gf_match_fail(m, A_ROOT, "q, k and v do not provably share their batch dims");
    if (mask && gf_pat_rank(mask) > gf_pat_rank(q))
        return gf_match_fail(m, A_ADD, "the mask has a higher rank than the scores");
    return softmax_last(m);
}

static enum gf_status attn_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct gf_node *mme = gf_match_node(m, A_MME);
    float alpha = gf_node_attr_float(mme, "alpha", 1.0f);
    enum gf_status st = GF_OK;
    f->op = GF_OP_ATTENTION;
    for (int c = CQ; st == GF_OK && c <= CM; c++)
        st = gf_fused_input(f, gf_match_cap(m, c));
    if (st == GF_OK && alpha != 1.0f)
        st = gf_fused_attr_float(f, "scale", alpha);
    if (st == GF_OK && gf_node_attr_int(mme, "transB", 0))
        st = gf_fused_attr_int(f, "transB", 1);
    return st;
}

/* ---- the table ----------------------------------------------------------------------------- */

const struct gf_pattern gf_patterns_attn[] = {
    GF_PATTERN("attention", "softmax(scale q k' + mask) v", attn_nodes, attn_caps, attn_check,
               attn_rewrite),
};
const size_t gf_patterns_attn_count = sizeof(gf_patterns_attn) / sizeof(gf_patterns_attn[0]);
