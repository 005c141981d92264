/*
 * Gradient rules, part 3: the fused ops with a backward op of their own
 * (graph/ops.def, "fused backward ops"; CPU kernels in
 * kernels/cpu/fused_grad.c; definitions in README "Training").
 *
 * Each rule writes its backward op when it can, and otherwise hands the
 * node to gf_grad_inline (the fused op's function body, differentiated op
 * by op): element types other than float / double, ranks not known, G / U
 * broadcast in SwiGLU / GeGLU, Cos / Sin that need a gradient in RoPE.
 */
#include <string.h>

#include "grad_rules.h"

static struct gf_value *in(const struct gf_grad_args *a, size_t i)
{
    return i < a->n->n_inputs ? a->n->inputs[i] : NULL;
}

static struct gf_value *out(const struct gf_grad_args *a, size_t k)
{
    return k < a->n->n_outputs ? a->n->outputs[k] : NULL;
}

static bool need(const struct gf_grad_args *a, size_t i)
{
    return i < a->n->n_inputs && a->need[i];
}

/* The backward kernels take float and double. */
static bool kernel_dtype(const struct gf_value *v)
{
    enum gf_dtype t = gf_ad_dtype(v);
    return t == GF_FLOAT || t == GF_DOUBLE;
}

/* w's shape is x.shape[ax:] exactly (known dims): dW needs no SumToShape. */
static bool is_block_shape(const struct gf_value *w, const struct gf_value *x, int ax)
{
    int rw = gf_ad_rank(w), rx = gf_ad_rank(x);
    if (rw < 0 || rx < 0 || rw != rx - ax)
        return false;
    for (int i = 0; i < rw; i++) {
        const struct gf_dim *p = &w->type.dims[i], *q = &x->type.dims[ax + i];
        if (p->value < 0 || p->value != q->value)
            return false;
    }
    return true;
}

/* Attribute axis resolved against x's rank; -1 when the rank is unknown or
 * the axis out of range (the rule then falls back). */
static int block_axis(const struct gf_grad_args *a, const struct gf_value *x)
{
    int r = gf_ad_rank(x);
    int64_t axis = gf_node_attr_int(a->n, "axis", -1), ax = axis < 0 ? axis + r : axis;
    return r < 0 || ax < 0 || ax >= r ? -1 : (int)ax;
}

/* ---- RMSNorm, AddRMSNorm --------------------------------------------------------
 *   RMSNorm(X, W?) -> Y:           dX, dW = RMSNormGrad(g, X, W)
 *   AddRMSNorm(X, R, W?) -> Y, S:  dS = RMSNormGrad(g, S, W).dX + gS
 *                                  dX = dR = dS   (gS: S's other users)
 * S omitted by the forward is recomputed as Add(X, R).  dW is
 * X.shape[axis:], summed down to W's shape when W was broadcast. */
enum gf_status gf_grad_rms_norm(struct gf_grad_args *a)
{
    bool add = a->n->op == GF_OP_ADD_RMS_NORM;
    struct gf_value *x = add ? out(a, 1) : in(a, 0), *w = in(a, add ? 2 : 1);
    struct gf_value *outs[2] = {NULL}, *ds = NULL;
    int ax = block_axis(a, in(a, 0));
    if (!kernel_dtype(in(a, 0)) || ax < 0)
        return gf_grad_inline(a);
    if (a->dy[0]) {
        if (!x)
            x = gf_ad_op2(a->ad, "Add", in(a, 0), in(a, 1));
        bool dw = w && need(a, add ? 2 : 1);
        struct gf_value *ins[3] = {a->dy[0], x, w};
        struct gf_value *d = gf_ad_node(a->ad, "RMSNormGrad", w ? 3 : 2, ins, dw ? 2 : 1, outs);
        d = gf_ad_attr_int(a->ad, d, "axis", ax);
        d = gf_ad_attr_copy(a->ad, d, "epsilon");
        d = gf_ad_attr_copy(a->ad, d, "eps_outside");
        d = gf_ad_attr_copy(a->ad, d, "weight_offset");
        if (dw)
            a->dx[add ? 2 : 1] = is_block_shape(w, in(a, 0), ax)
                                     ? outs[1]
                                     : gf_ad_op2(a->ad, "SumToShape", outs[1],
                                                 gf_ad_shape(a->ad, w));
        ds = d;
    }
    if (add && a->n->n_outputs > 1 && a->dy[1])
        ds = ds ? gf_ad_op2(a->ad, "Add", ds, a->dy[1]) : a->dy[1];
    for (size_t i = 0; i < (add ? 2u : 1u); i++)
        if (need(a, i))
            a->dx[i] = ds;
    return gf_ad_status(a->ad);
}

/* ---- SwiGLU, GeGLU ------------------------------------------------------------------
 * dG, dU = SwiGLUGrad / GeGLUGrad(g, G, U) (approximate copied), when G
 * and U have Y's shape; broadcast operands go through the function body. */
enum gf_status gf_grad_glu(struct gf_grad_args *a)
{
    struct gf_value *g = in(a, 0), *u = in(a, 1), *y = out(a, 0), *outs[2] = {NULL};
    if (!a->dy[0])
        return GF_OK;
    if (!kernel_dtype(g) || !gf_ad_same_shape(g, y) || !gf_ad_same_shape(u, y))
        return gf_grad_inline(a);
    bool swi = a->n->op == GF_OP_SWIGLU;
    struct gf_value *ins[3] = {a->dy[0], g, u};
    struct gf_value *d = gf_ad_node(a->ad, swi ? "SwiGLUGrad" : "GeGLUGrad", 3, ins, 2, outs);
    if (!swi)
        gf_ad_attr_copy(a->ad, d, "approximate");
    a->dx[0] = need(a, 0) ? outs[0] : NULL;
    a->dx[1] = need(a, 1) ? outs[1] : NULL;
    return gf_ad_status(a->ad);
}

/* ---- RoPE ------------------------------------------------------------------------------
 * dX = RoPEGrad(g, Cos, Sin), the transposed rotation.  Cos and Sin are
 * constants in practice; when they lie on a parameter's path the node goes
 * through its function body instead. */
enum gf_status gf_grad_rope(struct gf_grad_args *a)
{
    if (!a->dy[0])
        return GF_OK;
    if (need(a, 1) || need(a, 2) || !kernel_dtype(in(a, 0)))
        return gf_grad_inline(a);
    struct gf_value *ins[3] = {a->dy[0], in(a, 1), in(a, 2)};
    struct gf_value *d = gf_ad_node(a->ad, "RoPEGrad", 3, ins, 0, NULL);
    a->dx[0] = need(a, 0) ? d : NULL;
    return gf_ad_status(a->ad);
}
