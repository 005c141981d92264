/* MatMulEpilogue: a MatMul (or Gemm) with what the exporters put around it
 * folded in: a Transpose of an operand (transA / transB), a constant scale
 * (alpha), a bias Add, an activation, a residual Add.  Each pattern adds
 * one of these to a MatMul, a Gemm or a MatMulEpilogue an earlier rewrite
 * made, so the forms compose in whatever order the walk meets them.
 * Pattern format: pattern.h; the fused op: README "Fused ops". */
#include <float.h>
#include <math.h>
#include <string.h>

#include "pattern.h"

enum { CA, CB, CC, CR, CD };
static const struct gf_pcap mm_caps[] = {
    [CA] = GF_K_ANY("a"), [CB] = GF_K_ANY("b"), [CC] = GF_K_ANY("bias"),
    [CR] = GF_K_ANY("residual"), [CD] = GF_K_ANY("operand"),
};
static const struct gf_pcap scale_caps[] = {
    [CA] = GF_K_ANY("a"), [CB] = GF_K_ANY("b"), [CC] = GF_K_ANY("bias"),
    [CR] = GF_K_ANY("residual"), [CD] = GF_K_CONST("scale"),
};

/* The product a pattern extends: a MatMul, a Gemm (C = bias), or a
 * MatMulEpilogue.  Its output must have no other reader (engine rule). */
enum { P_MM, P_GEMM, P_MME, P_SRC, P_ROOT };
#define PRODUCT                                                                              \
    [P_MM] = {GF_P("matmul", GF_OP_MATMUL, GF_C(CA), GF_C(CB))},                              \
    [P_GEMM] = {GF_P("gemm", GF_OP_GEMM, GF_C(CA), GF_C(CB), GF_OPT(CC))},                    \
    [P_MME] = {GF_P("epilogue", GF_OP_MATMUL_EPILOGUE, GF_C(CA), GF_C(CB), GF_OPT(CC),        \
                    GF_OPT(CR))},                                                             \
    [P_SRC] = {GF_P("product", GF_PAT_ALT, GF_N(P_MM), GF_N(P_GEMM), GF_N(P_MME))}

/* What the product computes so far: Y = act(alpha·(A'@B') + beta·Bias) + Res. */
struct prod {
    const struct gf_value *y;
    struct gf_value *a, *b, *bias, *res;
    int64_t ta, tb;
    float alpha, beta;
    const char *act;
};

static void prod_of(const struct gf_match *m, struct prod *p)
{
    const struct gf_node *n = gf_match_node(m, P_MM);
    n = n ? n : gf_match_node(m, P_GEMM);
    n = n ? n : gf_match_node(m, P_MME);
    /* MatMul has none of these attributes: the defaults are its values */
    *p = (struct prod){
        .y = n->outputs[0],
        .a = gf_match_cap(m, CA), .b = gf_match_cap(m, CB),
        .bias = gf_match_cap(m, CC), .res = gf_match_cap(m, CR),
        .ta = gf_node_attr_int(n, "transA", 0), .tb = gf_node_attr_int(n, "transB", 0),
        .alpha = gf_node_attr_float(n, "alpha", 1.0f),
        .beta = gf_node_attr_float(n, "beta", 1.0f),
        .act = gf_node_attr_string(n, "activation", ""),
    };
    if (!p->bias)
        p->beta = 1.0f; /* Gemm's beta scales C alone */
}

/* A floating-point product of matrices (operands of rank >= 2). */
static bool prod_ok(struct gf_match *m, int pn, const struct prod *p)
{
    if (!gf_pat_float(p->y))
        return gf_match_fail(m, pn, "'%s' is not a floating-point tensor (or its dtype is "
                             "unknown)", p->y->name);
    if (gf_pat_rank(p->a) < 2 || gf_pat_rank(p->b) < 2)
        return gf_match_fail(m, pn, "an operand has rank %d / %d: the fused op multiplies "
                             "matrices (rank >= 2)", gf_pat_rank(p->a), gf_pat_rank(p->b));
    return true;
}

/* Y = act(alpha·(A'@B') + beta·Bias) + Res as a fused node; attributes
 * at their defaults are left out. */
static enum gf_status emit(struct gf_fused *f, const struct prod *p)
{
    struct gf_value *in[4] = {p->a, p->b, p->bias, p->res};
    enum gf_status st = GF_OK;
    f->op = GF_OP_MATMUL_EPILOGUE;
    for (int i = 0; st == GF_OK && i < 4; i++)
        st = gf_fused_input(f, in[i]);
    if (st == GF_OK && p->ta)
        st = gf_fused_attr_int(f, "transA", 1);
    if (st == GF_OK && p->tb)
        st = gf_fused_attr_int(f, "transB", 1);
    if (st == GF_OK && p->alpha != 1.0f)
        st = gf_fused_attr_float(f, "alpha", p->alpha);
    if (st == GF_OK && p->bias && p->beta != 1.0f)
        st = gf_fused_attr_float(f, "beta", p->beta);
    if (st == GF_OK && p->act[0])
        st = gf_fused_attr_string(f, "activation", p->act);
    return st;
}

static const char *shape_of(const struct gf_value *v, char *buf, size_t len)
{
    snprintf(buf, len, "?");
    if (v && v->type.kind == GF_TYPE_TENSOR)
        gf_type_format(&v->type, buf, len);
    return buf;
}

/* ---- Transpose of an operand -------------------------------------------------------
 *   a ─(Transpose: last two axes)─┐
 *   b ─(Transpose: last two axes)─MatMul── y      (one or both)
 *   = MatMulEpilogue(a, b) {transA, transB}
 */
enum { T_TA, T_A, T_TB, T_B, T_ROOT };
static const struct gf_pnode tr_nodes[] = {
    [T_TA] = {GF_P("transpose(a)", GF_OP_TRANSPOSE, GF_C(CA))},
    [T_A] = {GF_P("a", GF_PAT_ALT, GF_N(T_TA), GF_C(CA))},
    [T_TB] = {GF_P("transpose(b)", GF_OP_TRANSPOSE, GF_C(CB))},
    [T_B] = {GF_P("b", GF_PAT_ALT, GF_N(T_TB), GF_C(CB))},
    [T_ROOT] = {GF_P("matmul", GF_OP_MATMUL, GF_N(T_A), GF_N(T_B))},
};

/* The Transpose swaps the last two axes and nothing else (no perm: it
 * reverses the axes, which is that swap for rank 2 only). */
static bool swaps_last_two(struct gf_match *m, int pn)
{
    const struct gf_node *t = gf_match_node(m, pn);
    int r = gf_pat_rank(t->inputs[0]);
    size_t n = 0;
    const int64_t *perm = gf_node_attr_ints(t, "perm", &n);
    bool ok = r >= 2 && (perm ? n == (size_t)r : r == 2);
    for (int i = 0; ok && perm && i < r; i++)
        ok = perm[i] == (i < r - 2 ? i : i == r - 2 ? r - 1 : r - 2);
    return ok || gf_match_fail(m, pn, "perm does not swap only the last two axes of a rank-%d "
                               "tensor", r);
}

static bool tr_check(struct gf_match *m)
{
    bool ta = gf_match_node(m, T_TA) != NULL, tb = gf_match_node(m, T_TB) != NULL;
    const struct prod p = {.y = gf_match_node(m, T_ROOT)->outputs[0],
                           .a = gf_match_cap(m, CA), .b = gf_match_cap(m, CB)};
    if (!ta && !tb)
        return gf_match_fail(m, T_ROOT, "neither operand is a Transpose");
    if ((ta && !swaps_last_two(m, T_TA)) || (tb && !swaps_last_two(m, T_TB)))
        return false;
    return prod_ok(m, T_ROOT, &p);
}

static enum gf_status tr_rewrite(struct gf_match *m, struct gf_fused *f)
{
    const struct prod p = {.a = gf_match_cap(m, CA), .b = gf_match_cap(m, CB),
                           .ta = gf_match_node(m, T_TA) != NULL,
                           .tb = gf_match_node(m, T_TB) != NULL,
                           .alpha = 1.0f, .beta = 1.0f, .act = ""};
    return emit(f, &p);
}

/* ---- Transpose of an operand of a MatMulEpilogue ---------------------------------------
 *   a ─(Transpose: last two axes)─┐
 *   b ─(Transpose: last two axes)─MatMulEpilogue {transA, transB, ...}── y   (one or both)
 *   = MatMulEpilogue(a, b) {transA / transB toggled, the rest kept}
 * (an earlier rewrite, an optimized model or the backward graph made the
 * product; a transposed operand transposed again reads it as it is) */
enum { U_TA, U_A, U_TB, U_B, U_ROOT };
static const struct gf_pnode tr_mme_nodes[] = {
    [U_TA] = {GF_P("transpose(a)", GF_OP_TRANSPOSE, GF_C(CA))},
    [U_A] = {GF_P("a", GF_PAT_ALT, GF_N(U_TA), GF_C(CA))},
    [U_TB] = {GF_P("transpose(b)", GF_OP_TRANSPOSE, GF_C(CB))},
    [U_B] = {GF_P("b", GF_PAT_ALT, GF_N(U_TB), GF_C(CB))},
    [U_ROOT] = {GF_P("epilogue", GF_OP_MATMUL_EPILOGUE, GF_N(U_A), GF_N(U_B), GF_OPT(CC),
                     GF_OPT(CR))},
};

/* The root's attributes, with the flag of each transposed operand toggled. */
static void tr_mme_prod(const struct gf_match *m, struct prod *p)
{
    const struct gf_node *n = gf_match_node(m, U_ROOT);
    *p = (struct prod){
        .y = n->outputs[0],
        .a = gf_match_cap(m, CA), .b = gf_match_cap(m, CB),
        .bias = gf_match_cap(m, CC), .res = gf_match_cap(m, CR),
        .ta = gf_node_attr_int(n, "transA", 0) != 0,
        .tb = gf_node_attr_int(n, "transB", 0) != 0,
        .alpha = gf_node_attr_float(n, "alpha", 1.0f),
        .beta = gf_node_attr_float(n, "beta", 1.0f),
        .act = gf_node_attr_string(n, "activation", ""),
    };
    p->ta ^= gf_match_node(m, U_TA) != NULL;
    p->tb ^= gf_match_node(m, U_TB) != NULL;
}

static bool tr_mme_check(struct gf_match *m)
{
    bool ta = gf_match_node(m, U_TA) != NULL, tb = gf_match_node(m, U_TB) != NULL;
    struct prod p;
    if (!ta && !tb)
        return gf_match_fail(m, U_ROOT, "neither operand is a Transpose");
    if ((ta && !swaps_last_two(m, U_TA)) || (tb && !swaps_last_two(m, U_TB)))
        return false;
    tr_mme_prod(m, &p);
    return prod_ok(m, U_ROOT, &p);
}

static enum gf_status tr_mme_rewrite(struct gf_match *m, struct gf_fused *f)
{
    struct prod p;
    tr_mme_prod(m, &p);
    return emit(f, &p);
}

/* ---- constant scale ------------------------------------------------------------------
 *   a ─┐
 *   b ─MatMul | Gemm | MatMulEpilogue ─Mul(s) | Div(s)── y     (s: one constant element)
 *   = MatMulEpilogue {alpha·s | alpha/s}        (a product without bias or epilogue)
 */
static const struct gf_pnode scale_mul_nodes[] = {
    PRODUCT,
    [P_ROOT] = {GF_P("*scale", GF_OP_MUL, GF_N(P_SRC), GF_C(CD)), .flags = GF_PF_COMMUTE},
};
static const struct gf_pnode scale_div_nodes[] = {
    PRODUCT,
    [P_ROOT] = {GF_P("/scale", GF_OP_DIV, GF_N(P_SRC), GF_C(CD))},
};

static bool scale_check(struct gf_match *m)
{
    struct prod p;
    prod_of(m, &p);
    if (!prod_ok(m, P_ROOT, &p))
        return false;
    /* scaling a sum (P + bias) would round differently from the fused op */
    if (p.bias || p.res || p.act[0])
        return gf_match_fail(m, P_ROOT, "the product already has a bias, activation or "
                             "residual: only a bare product takes a scale");
    const struct gf_value *sv = gf_match_cap(m, CD);
    const struct gf_tensor *t = gf_match_const(m, CD);
    double s;
    if (!gf_pat_scalar(t, &s) || t->dtype != p.y->type.dtype || t->rank > gf_pat_rank(p.y))
        return gf_match_fail(m, P_ROOT, "the scale '%s' is not one element of the product's "
                             "dtype that leaves its shape alone", sv->name);
    double alpha = gf_match_node(m, P_ROOT)->op == GF_OP_DIV ? p.alpha / s : p.alpha * s;
    /* alpha is a float attribute: a double product must not lose bits to it */
    if (!isfinite(alpha) || fabs(alpha) > FLT_MAX || fabs(alpha) < FLT_MIN ||
        (t->dtype == GF_DOUBLE && (double)(float)alpha != alpha))
        return gf_match_fail(m, P_ROOT, "alpha %g (scale %g) is zero, not finite or not "
                             "exact as a float", alpha, s);
    m->f[0] = alpha;
    return true;
}

static enum gf_status scale_rewrite(struct gf_match *m, struct gf_fused *f)
{
    struct prod p;
    prod_of(m, &p);
    p.alpha = (float)m->f[0];
    return emit(f, &p);
}

/* ---- bias ---------------------------------------------------------------------------
 *   a ─┐
 *   b ─MatMul | Gemm (no C) | MatMulEpilogue (no bias) ─┐
 *   bias [.., 1, N] ────────────────────────────────────Add── y   (either order)
 */
static const struct gf_pnode bias_nodes[] = {
    PRODUCT,
    [P_ROOT] = {GF_P("+bias", GF_OP_ADD, GF_N(P_SRC), GF_C(CD)), .flags = GF_PF_COMMUTE},
};

/* v varies along the last axis of y alone: rank(v) <= rank(y), every dim
 * but the last 1, the last 1 or y's; same dtype. */
static bool fits_last_axis(const struct gf_value *v, const struct gf_value *y)
{
    int rv = gf_pat_rank(v), ry = gf_pat_rank(y);
    if (rv < 0 || ry < 1 || rv > ry || v->type.dtype != y->type.dtype)
        return false;
    for (int i = 0; i + 1 < rv; i++)
        if (v->type.dims[i].value != 1)
            return false;
    if (rv == 0)
        return true;
    const struct gf_dim *dv = &v->type.dims[rv - 1], *dy = &y->type.dims[ry - 1];
    return dv->value == 1 || (dv->value >= 0 && dv->value == dy->value) ||
           (dv->value < 0 && dv->param && dy->param && strcmp(dv->param, dy->param) == 0);
}

static bool bias_check(struct gf_match *m)
{
    struct prod p;
    char sv[128], sy[128];
    prod_of(m, &p);
    if (!prod_ok(m, P_ROOT, &p))
        return false;
    if (p.bias || p.res || p.act[0])
        return gf_match_fail(m, P_ROOT, "the product already has a bias, activation or "
                             "residual");
    const struct gf_value *d = gf_match_cap(m, CD);
    if (!fits_last_axis(d, p.y))
        return gf_match_fail(m, P_ROOT, "'%s' %s does not vary along the last axis of the "
                             "product %s alone (or differs in dtype): not a bias", d->name,
                             shape_of(d, sv, sizeof(sv)), shape_of(p.y, sy, sizeof(sy)));
    return true;
}

static enum gf_status bias_rewrite(struct gf_match *m, struct gf_fused *f)
{
    struct prod p;
    prod_of(m, &p);
    p.bias = gf_match_cap(m, CD);
    p.beta = 1.0f;
    return emit(f, &p);
}

/* ---- residual -------------------------------------------------------------------------
 *   a ─┐
 *   b ─MatMul | Gemm | MatMulEpilogue (no residual) ─┐
 *   r (the product's shape) ─────────────────────────Add── y   (not before a norm)
 */
static const struct gf_pnode res_nodes[] = {
    PRODUCT,
    [P_ROOT] = {GF_P("+residual", GF_OP_ADD, GF_N(P_SRC), GF_C(CD)), .flags = GF_PF_COMMUTE},
};

/* s is normalized next: read by a LayerNormalization or a fused norm, or
 * by what starts a decomposed one (ReduceMean, Pow, s·s; Flatten in the
 * LayerNormalization function body), also through a Cast. */
static bool feeds_norm(const struct gf_value *s, bool through_cast)
{
    for (size_t u = 0; u < s->n_uses; u++) {
        const struct gf_node *n = s->uses[u].node;
        switch (n ? n->op : GF_OP_UNKNOWN) {
        case GF_OP_LAYER_NORMALIZATION: case GF_OP_LAYER_NORM: case GF_OP_RMS_NORM:
        case GF_OP_REDUCE_MEAN: case GF_OP_POW: case GF_OP_FLATTEN:
            return true;
        case GF_OP_MUL:
            if (n->n_inputs == 2 && n->inputs[0] == n->inputs[1])
                return true;
            break;
        case GF_OP_CAST:
            if (through_cast && n->outputs[0] && feeds_norm(n->outputs[0], false))
                return true;
            break;
        default:
            break;
        }
    }
    return false;
}

static bool res_check(struct gf_match *m)
{
    struct prod p;
    char sv[128], sy[128];
    prod_of(m, &p);
    if (!prod_ok(m, P_ROOT, &p))
        return false;
    if (p.res)
        return gf_match_fail(m, P_ROOT, "the product already has a residual");
    const struct gf_value *d = gf_match_cap(m, CD), *y = gf_match_node(m, P_ROOT)->outputs[0];
    if (!gf_pat_same_type(d, p.y))
        return gf_match_fail(m, P_ROOT, "'%s' %s is not of the product's dtype and shape %s",
                             d->name, shape_of(d, sv, sizeof(sv)),
                             shape_of(p.y, sy, sizeof(sy)));
    /* AddLayerNorm / AddRMSNorm take this Add with the norm (see README) */
    if (feeds_norm(y, true))
        return gf_match_fail(m, P_ROOT, "the sum '%s' is normalized next: the Add is left to "
                             "add_layernorm / add_rmsnorm", y->name);
    return true;
}

static enum gf_status res_rewrite(struct gf_match *m, struct gf_fused *f)
{
    struct prod p;
    prod_of(m, &p);
    p.res = gf_match_cap(m, CD);
    return emit(f, &p);
}

/* ---- activation -------------------------------------------------------------------------
 *   a ─┐
 *   b ─MatMul | Gemm | MatMulEpilogue (no activation, no residual) ─┐
 *   Relu | Tanh | Sigmoid | Gelu (fused or ONNX; erf or tanh) | SiLU ─┴── y
 */
#define ACT_NODES(name, op)                                                                  \
    static const struct gf_pnode name[] = {                                                  \
        PRODUCT,                                                                             \
        [P_ROOT] = {GF_P("activation", op, GF_N(P_SRC))},                                    \
    }
ACT_NODES(relu_nodes, GF_OP_RELU);
ACT_NODES(tanh_nodes, GF_OP_TANH);
ACT_NODES(sigmoid_nodes, GF_OP_SIGMOID);
ACT_NODES(gelu_nodes, GF_OP_FUSED_GELU);
ACT_NODES(gelu_onnx_nodes, GF_OP_GELU);
ACT_NODES(silu_nodes, GF_OP_SILU);

/* The fused op's name of the activation node n; NULL if it has none. */
static const char *act_name(const struct gf_node *n)
{
    switch (n->op) {
    case GF_OP_RELU: return "relu";
    case GF_OP_TANH: return "tanh";
    case GF_OP_SIGMOID: return "sigmoid";
    case GF_OP_SILU: return "silu";
    case GF_OP_FUSED_GELU:
    case GF_OP_GELU: {
        const char *a = gf_node_attr_string(n, "approximate", "none");
        return strcmp(a, "none") == 0 ? "gelu" : strcmp(a, "tanh") == 0 ? "gelu_tanh" : NULL;
    }
    default: return NULL;
    }
}

static bool act_check(struct gf_match *m)
{
    struct prod p;
    prod_of(m, &p);
    const struct gf_node *r = gf_match_node(m, P_ROOT);
    const struct gf_value *y = r->outputs[0];
    if (!prod_ok(m, P_ROOT, &p))
        return false;
    if (p.act[0] || p.res)
        return gf_match_fail(m, P_ROOT, "the product already has an activation or residual");
    if (!act_name(r))
        return gf_match_fail(m, P_ROOT, "approximate='%s' is not none or tanh",
                             gf_node_attr_string(r, "approximate", "none"));
    /* silu(g)·u and gelu(g)·u are SwiGLU / GeGLU, which fuse the gate too */
    bool glu = r->op == GF_OP_SILU || r->op == GF_OP_FUSED_GELU || r->op == GF_OP_GELU;
    if (glu && y->n_uses == 1 && y->uses[0].node && y->uses[0].node->op == GF_OP_MUL)
        return gf_match_fail(m, P_ROOT, "the activation gates a Mul: left to swiglu / geglu");
    return true;
}

static enum gf_status act_rewrite(struct gf_match *m, struct gf_fused *f)
{
    struct prod p;
    prod_of(m, &p);
    p.act = act_name(gf_match_node(m, P_ROOT));
    return emit(f, &p);
}

/* ---- the table ------------------------------------------------------------------------- */

const struct gf_pattern gf_patterns_matmul[] = {
    GF_PATTERN("matmul_transpose", "MatMul(Transpose(a), b) and (a, Transpose(b))", tr_nodes,
               mm_caps, tr_check, tr_rewrite),
    GF_PATTERN("matmul_transpose", "MatMulEpilogue(Transpose(a), b) and (a, Transpose(b))",
               tr_mme_nodes, mm_caps, tr_mme_check, tr_mme_rewrite),
    GF_PATTERN("matmul_scale", "product*s", scale_mul_nodes, scale_caps, scale_check,
               scale_rewrite),
    GF_PATTERN("matmul_scale", "product/s", scale_div_nodes, scale_caps, scale_check,
               scale_rewrite),
    GF_PATTERN("matmul_bias", "product+bias", bias_nodes, mm_caps, bias_check, bias_rewrite),
    GF_PATTERN("matmul_act", "Relu(product)", relu_nodes, mm_caps, act_check, act_rewrite),
    GF_PATTERN("matmul_act", "Tanh(product)", tanh_nodes, mm_caps, act_check, act_rewrite),
    GF_PATTERN("matmul_act", "Sigmoid(product)", sigmoid_nodes, mm_caps, act_check,
               act_rewrite),
    GF_PATTERN("matmul_act", "Gelu(product)", gelu_nodes, mm_caps, act_check, act_rewrite),
    GF_PATTERN("matmul_act", "Gelu op(product)", gelu_onnx_nodes, mm_caps, act_check,
               act_rewrite),
    GF_PATTERN("matmul_act", "SiLU(product)", silu_nodes, mm_caps, act_check, act_rewrite),
    /* after the bias: an Add that fits both is a bias */
    GF_PATTERN("matmul_residual", "product+r", res_nodes, mm_caps, res_check, res_rewrite),
};
const size_t gf_patterns_matmul_count =
    sizeof(gf_patterns_matmul) / sizeof(gf_patterns_matmul[0]);
