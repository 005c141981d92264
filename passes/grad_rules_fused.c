/*
 * Gradient rules, part 3: the fused ops with a backward op of their own
 * (graph/ops.def, "fused backward ops"; CPU kernels in
 * kernels/cpu/fused_grad.c; definitions in README "Training").
 *
 * Each rule writes its backward op when it can, and otherwise hands the
 * node to gf_grad_inline (the fused op's function body, differentiated op
 * by op): element types other than float, double, float16 and bfloat16,
 * ranks not known, G / U broadcast in SwiGLU / GeGLU, Cos / Sin that need
 * a gradient in RoPE.
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

/* The backward kernels take float and double, and float16 / bfloat16 (the
 * precision pass's, docs/precision.md): those compute in fp32 and round
 * each output once, as the forward kernels do. */
static bool kernel_dtype(const struct gf_value *v)
{
    enum gf_dtype t = gf_ad_dtype(v);
    return t == GF_FLOAT || t == GF_DOUBLE || t == GF_FLOAT16 || t == GF_BFLOAT16;
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

/* dX (and dR of the Add forms) = ds, of X's type; in the mixed form (an
 * fp32 X, a 16-bit R: kernels/checks.h) R's gradient is ds cast to R's. */
static void norm_input_grads(struct gf_grad_args *a, bool add, struct gf_value *ds)
{
    enum gf_dtype tx = gf_ad_dtype(in(a, 0));
    for (size_t i = 0; i < (add ? 2u : 1u); i++) {
        if (!need(a, i))
            continue;
        enum gf_dtype t = gf_ad_dtype(in(a, i));
        a->dx[i] = ds && i == 1 && t != tx
                       ? gf_ad_attr_int(a->ad, gf_ad_op1(a->ad, "Cast", ds), "to", t)
                       : ds;
    }
}

/* ---- RMSNorm, AddRMSNorm --------------------------------------------------------
 *   RMSNorm(X, W?) -> Y:           dX, dW = RMSNormGrad(g, X, W)
 *   AddRMSNorm(X, R, W?) -> Y, S:  dS = RMSNormGrad(g, S, W).dX + gS
 *                                  dX = dR = dS   (gS: S's other users)
 * In the mixed form (a 16-bit R, kernels/checks.h: the precision pass's,
 * run on CUDA and the CPU) RMSNormGrad adds gS itself (its input G) and
 * writes R's gradient in R's type too (its dXl): one pass for the Add and
 * the Cast; the fp32 form keeps the Add (what every backend runs).  S
 * omitted by the forward is recomputed as Add(X, R).  dW is X.shape[axis:],
 * summed down to W's shape when W was broadcast. */
enum gf_status gf_grad_rms_norm(struct gf_grad_args *a)
{
    bool add = a->n->op == GF_OP_ADD_RMS_NORM;
    struct gf_value *x = add ? out(a, 1) : in(a, 0), *w = in(a, add ? 2 : 1);
    struct gf_value *outs[3] = {NULL};
    struct gf_value *gs = add && a->n->n_outputs > 1 ? a->dy[1] : NULL;
    int ax = block_axis(a, in(a, 0));
    if (!kernel_dtype(in(a, 0)) || ax < 0)
        return gf_grad_inline(a);
    if (a->dy[0]) {
        if (!x)
            x = gf_ad_op2(a->ad, "Add", in(a, 0), in(a, 1));
        bool dw = w && need(a, add ? 2 : 1);
        bool low = add && need(a, 1) && gf_ad_dtype(in(a, 1)) != gf_ad_dtype(in(a, 0));
        struct gf_value *g = low ? gs : NULL;
        struct gf_value *ins[4] = {a->dy[0], x, w, g};
        struct gf_value *d = gf_ad_node(a->ad, "RMSNormGrad", g ? 4 : w ? 3 : 2, ins,
                                        low ? 3 : dw ? 2 : 1, outs);
        d = gf_ad_attr_int(a->ad, d, "axis", ax);
        d = gf_ad_attr_copy(a->ad, d, "epsilon");
        d = gf_ad_attr_copy(a->ad, d, "eps_outside");
        d = gf_ad_attr_copy(a->ad, d, "weight_offset");
        if (dw)
            a->dx[add ? 2 : 1] = is_block_shape(w, in(a, 0), ax)
                                     ? outs[1]
                                     : gf_ad_op2(a->ad, "SumToShape", outs[1],
                                                 gf_ad_shape(a->ad, w));
        if (low) {
            a->dx[0] = need(a, 0) ? d : NULL;
            a->dx[1] = outs[2];
            return gf_ad_status(a->ad);
        }
        if (gs)
            d = gf_ad_op2(a->ad, "Add", d, gs);
        norm_input_grads(a, add, d);
        return gf_ad_status(a->ad);
    }
    norm_input_grads(a, add, gs);
    return gf_ad_status(a->ad);
}

/* Gives the forward node output k when it lacks it (a fresh value named
 * after hint); the output, or NULL after a failure. */
static struct gf_value *extra_output(struct gf_grad_args *a, size_t k, const char *hint)
{
    struct gf_node *n = gf_ad_widen_outputs(a->ad, a->n, k + 1);
    if (!n)
        return NULL;
    a->n = n;
    struct gf_value *v = n->outputs[k];
    if (!v && (!(v = gf_graph_new_value(n->graph, NULL, hint)) ||
               gf_node_set_output(n, k, v) != GF_OK))
        return gf_ad_fail(a->ad, GF_ERR_NOMEM, "cannot add output %zu", k), NULL;
    return v;
}

/* g is the constant 1 (the seed of a loss differentiated as it is). */
static bool unit_grad(const struct gf_value *g)
{
    double x;
    return gf_ad_const_scalar(g, &x) && x == 1;
}

/* dW (or dB) of a norm: the backward op's output `d`, shaped x.shape[ax:],
 * summed down to p's shape when p was broadcast. */
static struct gf_value *block_grad(struct gf_grad_args *a, struct gf_value *d,
                                   struct gf_value *p, int ax)
{
    if (is_block_shape(p, in(a, 0), ax))
        return d;
    return gf_ad_op2(a->ad, "SumToShape", d, gf_ad_shape(a->ad, p));
}

/* Gives the forward node outputs first .. first + 1 (LayerNorm's Mean and
 * InvStdDev) when it lacks them; false after a failure. */
static bool stat_outputs(struct gf_grad_args *a, size_t first)
{
    return extra_output(a, first + 1, "ln_istd") && extra_output(a, first, "ln_mean");
}

/* ---- LayerNorm, AddLayerNorm ----------------------------------------------------------
 *   LayerNorm(X, W?, B?) -> Y, Mean, InvStdDev:
 *       dX, dW, dB = LayerNormGrad(g, X, W, Mean, InvStdDev)
 *   AddLayerNorm(X, R, W?, B?) -> Y, S, Mean, InvStdDev:
 *       dS = LayerNormGrad(g, S, W, Mean, InvStdDev).dX + gS,  dX = dR = dS
 * The forward node is given its Mean and InvStdDev outputs when it lacks
 * them, so the backward reads the statistics instead of recomputing
 * them.  S omitted by the forward is recomputed as Add(X, R); a gradient
 * reaching Mean or InvStdDev goes through the function body. */
enum gf_status gf_grad_fused_layer_norm(struct gf_grad_args *a)
{
    bool add = a->n->op == GF_OP_ADD_LAYER_NORM;
    size_t ws = add ? 2 : 1, bs = ws + 1, k0 = add ? 2 : 1;
    int ax = block_axis(a, in(a, 0));
    bool stat_grad = (k0 < a->n->n_outputs && a->dy[k0]) ||
                     (k0 + 1 < a->n->n_outputs && a->dy[k0 + 1]);
    if (!kernel_dtype(in(a, 0)) || ax < 0 || stat_grad)
        return gf_grad_inline(a);
    struct gf_value *ds = NULL;
    if (a->dy[0]) {
        if (!stat_outputs(a, k0))
            return gf_ad_status(a->ad);
        struct gf_value *x = add ? out(a, 1) : in(a, 0), *w = in(a, ws), *b = in(a, bs);
        struct gf_value *outs[3] = {NULL};
        if (!x)
            x = gf_ad_op2(a->ad, "Add", in(a, 0), in(a, 1));
        bool dw = w && need(a, ws), db = b && need(a, bs);
        struct gf_value *ins[5] = {a->dy[0], x, w, out(a, k0), out(a, k0 + 1)};
        struct gf_value *d = gf_ad_node(a->ad, "LayerNormGrad", 5, ins, db ? 3 : dw ? 2 : 1,
                                        outs);
        d = gf_ad_attr_int(a->ad, d, "axis", ax);
        d = gf_ad_attr_copy(a->ad, d, "epsilon");
        if (dw)
            a->dx[ws] = block_grad(a, outs[1], w, ax);
        if (db)
            a->dx[bs] = block_grad(a, outs[2], b, ax);
        ds = d;
    }
    if (add && a->n->n_outputs > 1 && a->dy[1])
        ds = ds ? gf_ad_op2(a->ad, "Add", ds, a->dy[1]) : a->dy[1];
    norm_input_grads(a, add, ds);
    return gf_ad_status(a->ad);
}

/* ---- MatMulEpilogue ---------------------------------------------------------------------
 * Y = act(Z) + Res,  Z = alpha A'B' + beta Bias  (A' = A^T when transA, B' alike):
 *   dRes = g (summed to Res's shape)
 *   dZ, dBias1 = MatMulEpilogueGrad(g, Z or Y)   (no activation: dZ = g)
 *       Z recomputed by MatMulEpilogue(A, B, Bias) without activation and
 *       Res; relu, tanh and sigmoid without Res read Y instead (from_output)
 *   dBias = dBias1 (Bias [N] or [1, ..., N]), else beta dZ summed to its shape
 *   dA' = alpha dZ B'^T,  dB' = alpha A'^T dZ, written as MatMulEpilogue
 *       GEMMs on the stored operands (transposes as attributes) and summed
 *       over broadcast batch dims; a 2-D B (a linear layer) gets dB from one
 *       GEMM over A's and dZ's rows flattened.
 * 1-D operands and other element types go through the function body. */

/* MatMulEpilogue(p, q) with transposes and alpha (no Bias, Res, activation). */
static struct gf_value *mme(struct gf_grad_args *a, struct gf_value *p, struct gf_value *q,
                            bool tp, bool tq, double alpha)
{
    struct gf_value *v = gf_ad_op2(a->ad, "MatMulEpilogue", p, q);
    if (tp)
        v = gf_ad_attr_int(a->ad, v, "transA", 1);
    if (tq)
        v = gf_ad_attr_int(a->ad, v, "transB", 1);
    return alpha != 1 ? gf_ad_attr_float(a->ad, v, "alpha", (float)alpha) : v;
}

/* x (of rank r) with its rows flattened to 2-D [rows, last] (x itself
 * when 2-D). */
static struct gf_value *rows2d(struct gf_grad_args *a, struct gf_value *x, int r)
{
    return r > 2 ? gf_ad_attr_int(a->ad, gf_ad_op1(a->ad, "Flatten", x), "axis", r - 1) : x;
}

/* The batch dims of x (all but the last two) are provably y's. */
static bool same_batch2(const struct gf_value *x, const struct gf_value *y)
{
    int r = gf_ad_rank(x);
    if (r < 2 || r != gf_ad_rank(y))
        return false;
    for (int i = 0; i < r - 2; i++) {
        const struct gf_dim *p = &x->type.dims[i], *q = &y->type.dims[i];
        if (p->value >= 0 || q->value >= 0 ? p->value != q->value
                                           : !p->param || !q->param || strcmp(p->param, q->param))
            return false;
    }
    return true;
}

/* Bias is [N] or [1, ..., 1, N] with N Y's last dim: MatMulEpilogueGrad's
 * column sums are its gradient. */
static bool bias_is_row(const struct gf_value *b, const struct gf_value *y)
{
    int rb = gf_ad_rank(b), ry = gf_ad_rank(y);
    if (rb < 1 || ry < 1 || rb > ry)
        return false;
    for (int i = 0; i < rb - 1; i++)
        if (b->type.dims[i].value != 1)
            return false;
    const struct gf_dim *n = &b->type.dims[rb - 1], *m = &y->type.dims[ry - 1];
    return n->value >= 0 && n->value == m->value;
}

/* dZ (and dBias's column sums in *db when db is not NULL). */
static struct gf_value *mme_dz(struct gf_grad_args *a, const char *act, struct gf_value **db)
{
    struct gf_value *g = a->dy[0], *z, *outs[2] = {NULL};
    bool res = in(a, 3) != NULL;
    bool from_y = !res && (!strcmp(act, "relu") || !strcmp(act, "tanh") ||
                           !strcmp(act, "sigmoid"));
    if (from_y) {
        z = out(a, 0);
    } else {
        struct gf_value *ins[3] = {in(a, 0), in(a, 1), in(a, 2)};
        z = gf_ad_node(a->ad, "MatMulEpilogue", in(a, 2) ? 3 : 2, ins, 0, NULL);
        static const char *const copied[4] = {"transA", "transB", "alpha", "beta"};
        for (size_t i = 0; i < 4; i++)
            z = gf_ad_attr_copy(a->ad, z, copied[i]);
    }
    struct gf_value *ins[2] = {g, z};
    struct gf_value *d = gf_ad_node(a->ad, "MatMulEpilogueGrad", 2, ins, db ? 2 : 1, outs);
    d = gf_ad_attr_string(a->ad, d, "activation", act);
    d = gf_ad_attr_copy(a->ad, d, "beta");
    if (from_y)
        d = gf_ad_attr_int(a->ad, d, "from_output", 1);
    if (db)
        *db = outs[1];
    return d;
}

static void mme_bias_grad(struct gf_grad_args *a, struct gf_value *dz, struct gf_value *db)
{
    struct gf_value *b = in(a, 2), *y = out(a, 0);
    if (db) {
        a->dx[2] = gf_ad_rank(b) == 1 ? db : gf_ad_reshape_like(a->ad, db, NULL, b);
        return;
    }
    double beta = gf_node_attr_float(a->n, "beta", 1.0f);
    struct gf_value *t = beta == 1 ? dz : gf_ad_op2(a->ad, "Mul", dz,
                                                    gf_ad_scalar(a->ad, gf_ad_dtype(y), beta));
    a->dx[2] = gf_ad_sum_to(a->ad, t, y, b);
}

static void mme_operand_grads(struct gf_grad_args *a, struct gf_value *dz)
{
    struct gf_value *A = in(a, 0), *B = in(a, 1), *y = out(a, 0);
    bool ta = gf_node_attr_int(a->n, "transA", 0), tb = gf_node_attr_int(a->n, "transB", 0);
    double alpha = gf_node_attr_float(a->n, "alpha", 1.0f);
    if (need(a, 0)) {
        struct gf_value *d = ta ? mme(a, B, dz, tb, true, alpha) : mme(a, dz, B, false, !tb, alpha);
        a->dx[0] = same_batch2(A, y) ? d : gf_ad_op2(a->ad, "SumToShape", d,
                                                      gf_ad_shape(a->ad, A));
    }
    if (need(a, 1) && gf_ad_rank(B) == 2 && !ta) {
        struct gf_value *a2 = rows2d(a, A, gf_ad_rank(A)), *g2 = rows2d(a, dz, gf_ad_rank(y));
        a->dx[1] = tb ? mme(a, g2, a2, true, false, alpha) : mme(a, a2, g2, true, false, alpha);
    } else if (need(a, 1)) {
        struct gf_value *d = tb ? mme(a, dz, A, true, ta, alpha) : mme(a, A, dz, !ta, false, alpha);
        a->dx[1] = same_batch2(B, y) ? d : gf_ad_op2(a->ad, "SumToShape", d,
                                                      gf_ad_shape(a->ad, B));
    }
}

enum gf_status gf_grad_matmul_epilogue(struct gf_grad_args *a)
{
    struct gf_value *y = out(a, 0), *db = NULL;
    if (!a->dy[0])
        return GF_OK;
    if (!kernel_dtype(in(a, 0)) || gf_ad_rank(in(a, 0)) < 2 || gf_ad_rank(in(a, 1)) < 2 ||
        gf_ad_rank(y) < 2)
        return gf_grad_inline(a);
    const char *act = gf_node_attr_string(a->n, "activation", "");
    bool bias_cols = need(a, 2) && bias_is_row(in(a, 2), y);
    if (need(a, 3))
        a->dx[3] = gf_ad_sum_to(a->ad, a->dy[0], y, in(a, 3));
    struct gf_value *dz = a->dy[0];
    if (*act || bias_cols)
        dz = mme_dz(a, act, bias_cols ? &db : NULL);
    if (need(a, 2))
        mme_bias_grad(a, dz, db);
    mme_operand_grads(a, dz);
    return gf_ad_status(a->ad);
}

/* ---- SoftmaxCrossEntropy --------------------------------------------------------------
 * The forward computes G = d Loss / d L for a unit upstream gradient as its
 * output 2, in the same pass as the loss (the executor writes it over the
 * logits when they die there, so no second softmax and no second buffer):
 *   dL = CrossEntropyGrad(g, G)   (G itself when g is the constant 1 and
 *                                  the loss a scalar)
 * A gradient of LogP and element types other than float, double, float16 and bfloat16 go
 * through the function body.  Class weights get no gradient (as with the
 * ONNX op: the rule table's mask makes one that is needed an error). */
enum gf_status gf_grad_fused_sce(struct gf_grad_args *a)
{
    if ((a->n->n_outputs > 1 && a->dy[1]) || !kernel_dtype(in(a, 0)))
        return gf_grad_inline(a);
    if (!a->dy[0] || !need(a, 0))
        return GF_OK;
    struct gf_value *g = extra_output(a, 2, "sce_grad");
    bool scalar = strcmp(gf_node_attr_string(a->n, "reduction", "mean"), "none") != 0;
    if (g && !(scalar && unit_grad(a->dy[0]))) {
        struct gf_value *ins[2] = {a->dy[0], g};
        g = gf_ad_node(a->ad, "CrossEntropyGrad", 2, ins, 0, NULL);
        g = gf_ad_attr_copy(a->ad, g, "reduction");
        g = gf_ad_attr_copy(a->ad, g, "shift");
    }
    a->dx[0] = g;
    return gf_ad_status(a->ad);
}

/* ---- LinearCrossEntropy -------------------------------------------------------------------
 * With reduction mean or sum the forward computes the gradients of the
 * loss for a unit upstream gradient, dH, dW and dBias, as its outputs 1-3,
 * chunk by chunk in the same pass (the logits never exist whole, forward
 * or backward; Liger Kernel's fused linear cross-entropy):
 *   dH = Mul(output 1, g), dW = Mul(output 2, g), dBias = Mul(output 3, g)
 * (the outputs themselves when g is the constant 1).  Reduction none (one
 * upstream gradient per position, which the forward cannot know) and
 * element types other than float, double, float16 and bfloat16 go through the function body. */
enum gf_status gf_grad_fused_lce(struct gf_grad_args *a)
{
    static const size_t input_of[4] = {0, 0, 1, 3}; /* output k: the gradient of input k */
    if (!a->dy[0])
        return GF_OK;
    if (!strcmp(gf_node_attr_string(a->n, "reduction", "mean"), "none") ||
        !kernel_dtype(in(a, 0)))
        return gf_grad_inline(a);
    size_t last = need(a, 3) ? 3 : need(a, 1) ? 2 : 1;
    if (!extra_output(a, last, "lce_grad"))
        return gf_ad_status(a->ad);
    bool unit = unit_grad(a->dy[0]);
    for (size_t k = 1; k <= last; k++) {
        struct gf_value *d = a->n->outputs[k];
        if (!need(a, input_of[k])) {
            if (d && gf_node_set_output(a->n, k, NULL) != GF_OK)
                return gf_ad_fail(a->ad, GF_ERR_NOMEM, "cannot drop output %zu", k);
            continue;
        }
        enum gf_dtype dt = gf_ad_dtype(d);
        if (unit)
            a->dx[input_of[k]] = d;
        else if (dt == gf_ad_dtype(a->dy[0]))
            a->dx[input_of[k]] = gf_ad_op2(a->ad, "Mul", d, a->dy[0]);
        else /* bf16 H, fp32 loss: the product in fp32, rounded back */
            a->dx[input_of[k]] = gf_ad_attr_int(
                a->ad,
                gf_ad_op1(a->ad, "Cast",
                          gf_ad_op2(a->ad, "Mul",
                                    gf_ad_attr_int(a->ad, gf_ad_op1(a->ad, "Cast", d), "to",
                                                   GF_FLOAT),
                                    a->dy[0])),
                "to", dt);
    }
    return gf_ad_status(a->ad);
}

/* ---- JSD ------------------------------------------------------------------------------------
 * dX, dY = JSDGrad(g, X, Y, T) (beta, ignore_index copied); other element
 * types go through the function body. */
enum gf_status gf_grad_fused_jsd(struct gf_grad_args *a)
{
    if (!a->dy[0])
        return GF_OK;
    if (!kernel_dtype(in(a, 0)))
        return gf_grad_inline(a);
    struct gf_value *ins[4] = {a->dy[0], in(a, 0), in(a, 1), in(a, 2)}, *outs[2] = {NULL};
    struct gf_value *d = gf_ad_node(a->ad, "JSDGrad", in(a, 2) ? 4 : 3, ins, 2, outs);
    d = gf_ad_attr_copy(a->ad, d, "beta");
    d = gf_ad_attr_copy(a->ad, d, "ignore_index");
    a->dx[0] = need(a, 0) ? outs[0] : NULL;
    a->dx[1] = need(a, 1) ? outs[1] : NULL;
    return gf_ad_status(a->ad);
}

/* ---- Attention -----------------------------------------------------------------------------
 * dQ, dK, dV = AttentionGrad(g, Q, K, V, Mask, O, Stats): the backward
 * recomputes the probabilities block by block, as the forward made them,
 * instead of reading them from the forward; the forward node is given its
 * Stats output (each row's max and 1 / sum) when it lacks it, which spares
 * a backward the pass that finds them (float Stats for 16-bit Q, K, V,
 * whose kernels compute in fp32).  A mask that needs a gradient, a
 * gradient reaching Stats and other element types go through the function
 * body. */
enum gf_status gf_grad_fused_attention(struct gf_grad_args *a)
{
    if (!a->dy[0] && !(a->n->n_outputs > 1 && a->dy[1]))
        return GF_OK;
    if (need(a, 3) || !kernel_dtype(in(a, 0)) ||
        (a->n->n_outputs > 1 && a->dy[1]))
        return gf_grad_inline(a);
    struct gf_value *stats = extra_output(a, 1, "attn_stats");
    if (!stats)
        return gf_ad_status(a->ad);
    struct gf_value *outs[3] = {NULL};
    struct gf_value *ins[7] = {a->dy[0], in(a, 0),  in(a, 1), in(a, 2),
                               in(a, 3), out(a, 0), stats};
    struct gf_value *d = gf_ad_node(a->ad, "AttentionGrad", 7, ins, 3, outs);
    d = gf_ad_attr_copy(a->ad, d, "scale");
    d = gf_ad_attr_copy(a->ad, d, "transB");
    d = gf_ad_attr_copy(a->ad, d, "zero_masked_rows");
    for (size_t i = 0; i < 3; i++)
        a->dx[i] = need(a, i) ? outs[i] : NULL;
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
