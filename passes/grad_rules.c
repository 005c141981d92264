/*
 * Gradient rules, part 1: elementwise ops, reductions, matrix products, and
 * the rule table (gf_grad_rules) for every op.  Part 2 (layout, indexing,
 * softmax, normalization, losses) is grad_rules_nn.c.
 *
 * Notation in the comments: g = d loss / d Y (output 0), dA = d loss / d A.
 * Every rule reduces a broadcast input's gradient to the input's shape with
 * gf_ad_sum_to (a SumToShape node, omitted when shapes provably agree).
 */
#include <math.h>
#include <string.h>

#include "grad_rules.h"

/* ---- helpers -------------------------------------------------------------- */

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

/* A scalar constant of output 0's dtype. */
static struct gf_value *k(struct gf_grad_args *a, double x)
{
    return gf_ad_scalar(a->ad, gf_ad_dtype(out(a, 0)), x);
}

/* dx[i] = g, an output-0-shaped gradient, reduced to input i's shape. */
static void give(struct gf_grad_args *a, size_t i, struct gf_value *g)
{
    if (need(a, i) && g)
        a->dx[i] = gf_ad_sum_to(a->ad, g, out(a, 0), in(a, i));
}

#define OP1(op, x) gf_ad_op1(a->ad, op, x)
#define OP2(op, x, y) gf_ad_op2(a->ad, op, x, y)
#define OP3(op, x, y, z) gf_ad_op3(a->ad, op, x, y, z)

/* Opsets before 7 broadcast B onto A from an `axis`: not numpy's rule. */
static enum gf_status check_numpy_bcast(struct gf_grad_args *a)
{
    if (gf_ad_opset(a->ad) < 7 && gf_node_attr_int(a->n, "broadcast", 0))
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "legacy broadcast=1 (opset %lld)",
                          (long long)gf_ad_opset(a->ad));
    return GF_OK;
}

/* ---- binary arithmetic ------------------------------------------------------ */

/* dA = g, dB = g */
static enum gf_status rule_add(struct gf_grad_args *a)
{
    if (check_numpy_bcast(a))
        return GF_ERR_UNSUPPORTED;
    give(a, 0, a->dy[0]);
    give(a, 1, a->dy[0]);
    return gf_ad_status(a->ad);
}

/* dA = g, dB = -g */
static enum gf_status rule_sub(struct gf_grad_args *a)
{
    if (check_numpy_bcast(a))
        return GF_ERR_UNSUPPORTED;
    give(a, 0, a->dy[0]);
    if (need(a, 1))
        give(a, 1, OP1("Neg", a->dy[0]));
    return gf_ad_status(a->ad);
}

/* dA = g * B, dB = g * A */
static enum gf_status rule_mul(struct gf_grad_args *a)
{
    if (check_numpy_bcast(a))
        return GF_ERR_UNSUPPORTED;
    if (need(a, 0))
        give(a, 0, OP2("Mul", a->dy[0], in(a, 1)));
    if (need(a, 1))
        give(a, 1, OP2("Mul", a->dy[0], in(a, 0)));
    return gf_ad_status(a->ad);
}

/* dA = g / B, dB = -g * A / B^2 = -(g / B) * Y */
static enum gf_status rule_div(struct gf_grad_args *a)
{
    if (check_numpy_bcast(a))
        return GF_ERR_UNSUPPORTED;
    struct gf_value *ga = OP2("Div", a->dy[0], in(a, 1));
    give(a, 0, ga);
    if (need(a, 1))
        give(a, 1, OP1("Neg", OP2("Mul", ga, out(a, 0))));
    return gf_ad_status(a->ad);
}

/* dA = g * B * A^(B-1) (a constant exponent folded in), dB = g * Y * log(A) */
static enum gf_status rule_pow(struct gf_grad_args *a)
{
    struct gf_value *x = in(a, 0), *e = in(a, 1), *g = a->dy[0];
    enum gf_dtype dt = gf_ad_dtype(x);
    double c;
    if (check_numpy_bcast(a))
        return GF_ERR_UNSUPPORTED;
    if (need(a, 0) && gf_ad_const_scalar(e, &c)) {
        if (c == 1)
            give(a, 0, g);
        else if (c == 2)
            give(a, 0, OP2("Mul", g, OP2("Mul", x, k(a, 2))));
        else if (c != 0)
            give(a, 0, OP2("Mul", g, OP2("Mul", OP2("Pow", x, k(a, c - 1)), k(a, c))));
    } else if (need(a, 0)) {
        struct gf_value *ef = e;
        if (gf_ad_dtype(e) != dt)
            ef = gf_ad_attr_int(a->ad, OP1("Cast", e), "to", dt);
        struct gf_value *pw = OP2("Pow", x, OP2("Sub", ef, k(a, 1)));
        give(a, 0, OP2("Mul", g, OP2("Mul", pw, ef)));
    }
    if (need(a, 1))
        give(a, 1, OP2("Mul", g, OP2("Mul", out(a, 0), OP1("Log", x))));
    return gf_ad_status(a->ad);
}

/* ---- unary math -------------------------------------------------------------- */

/* dX = g * 0.5 / Y */
static enum gf_status rule_sqrt(struct gf_grad_args *a)
{
    give(a, 0, OP2("Div", OP2("Mul", a->dy[0], k(a, 0.5)), out(a, 0)));
    return gf_ad_status(a->ad);
}

/* dX = -g * Y^2 */
static enum gf_status rule_reciprocal(struct gf_grad_args *a)
{
    struct gf_value *y = out(a, 0);
    give(a, 0, OP1("Neg", OP2("Mul", a->dy[0], OP2("Mul", y, y))));
    return gf_ad_status(a->ad);
}

static enum gf_status rule_neg(struct gf_grad_args *a)
{
    give(a, 0, OP1("Neg", a->dy[0]));
    return gf_ad_status(a->ad);
}

/* dX = g * sign(X) */
static enum gf_status rule_abs(struct gf_grad_args *a)
{
    give(a, 0, OP2("Mul", a->dy[0], OP1("Sign", in(a, 0))));
    return gf_ad_status(a->ad);
}

/* dX = g * Y */
static enum gf_status rule_exp(struct gf_grad_args *a)
{
    give(a, 0, OP2("Mul", a->dy[0], out(a, 0)));
    return gf_ad_status(a->ad);
}

/* dX = g / X */
static enum gf_status rule_log(struct gf_grad_args *a)
{
    give(a, 0, OP2("Div", a->dy[0], in(a, 0)));
    return gf_ad_status(a->ad);
}

/* dX = g * cos(X) */
static enum gf_status rule_sin(struct gf_grad_args *a)
{
    give(a, 0, OP2("Mul", a->dy[0], OP1("Cos", in(a, 0))));
    return gf_ad_status(a->ad);
}

/* dX = -g * sin(X) */
static enum gf_status rule_cos(struct gf_grad_args *a)
{
    give(a, 0, OP1("Neg", OP2("Mul", a->dy[0], OP1("Sin", in(a, 0)))));
    return gf_ad_status(a->ad);
}

/* TanhGrad(g, Y) = g * (1 - Y^2) */
static enum gf_status rule_tanh(struct gf_grad_args *a)
{
    give(a, 0, OP2("TanhGrad", a->dy[0], out(a, 0)));
    return gf_ad_status(a->ad);
}

/* SigmoidGrad(g, Y) = g * Y * (1 - Y) */
static enum gf_status rule_sigmoid(struct gf_grad_args *a)
{
    give(a, 0, OP2("SigmoidGrad", a->dy[0], out(a, 0)));
    return gf_ad_status(a->ad);
}

/* ReluGrad(g, Y) = g where Y > 0, else 0 */
static enum gf_status rule_relu(struct gf_grad_args *a)
{
    give(a, 0, OP2("ReluGrad", a->dy[0], out(a, 0)));
    return gf_ad_status(a->ad);
}

/* dX = g where X > 0, g * alpha elsewhere */
static enum gf_status rule_leaky_relu(struct gf_grad_args *a)
{
    struct gf_value *g = a->dy[0], *pos = OP2("Greater", in(a, 0), k(a, 0));
    float alpha = gf_node_attr_float(a->n, "alpha", 0.01f);
    give(a, 0, OP3("Where", pos, g, OP2("Mul", g, k(a, alpha))));
    return gf_ad_status(a->ad);
}

/* Elu: dX = g where X > 0, g * (Y + alpha) elsewhere */
static enum gf_status rule_elu(struct gf_grad_args *a)
{
    struct gf_value *g = a->dy[0], *pos = OP2("Greater", in(a, 0), k(a, 0));
    float alpha = gf_node_attr_float(a->n, "alpha", 1.0f);
    give(a, 0, OP3("Where", pos, g, OP2("Mul", g, OP2("Add", out(a, 0), k(a, alpha)))));
    return gf_ad_status(a->ad);
}

/* Selu: dX = g * gamma where X > 0, g * (Y + alpha * gamma) elsewhere */
static enum gf_status rule_selu(struct gf_grad_args *a)
{
    struct gf_value *g = a->dy[0], *pos = OP2("Greater", in(a, 0), k(a, 0));
    double alpha = gf_node_attr_float(a->n, "alpha", 1.67326319217681884765625f);
    double gamma = gf_node_attr_float(a->n, "gamma", 1.05070102214813232421875f);
    struct gf_value *neg = OP2("Mul", g, OP2("Add", out(a, 0), k(a, alpha * gamma)));
    give(a, 0, OP3("Where", pos, OP2("Mul", g, k(a, gamma)), neg));
    return gf_ad_status(a->ad);
}

/* Softplus: dX = g * sigmoid(X) */
static enum gf_status rule_softplus(struct gf_grad_args *a)
{
    give(a, 0, OP2("Mul", a->dy[0], OP1("Sigmoid", in(a, 0))));
    return gf_ad_status(a->ad);
}

/* Softsign: dX = g / (1 + |X|)^2 */
static enum gf_status rule_softsign(struct gf_grad_args *a)
{
    struct gf_value *t = OP2("Add", OP1("Abs", in(a, 0)), k(a, 1));
    give(a, 0, OP2("Div", a->dy[0], OP2("Mul", t, t)));
    return gf_ad_status(a->ad);
}

/* HardSigmoid: dX = g * alpha where 0 < alpha X + beta < 1, else 0 */
static enum gf_status rule_hard_sigmoid(struct gf_grad_args *a)
{
    double alpha = gf_node_attr_float(a->n, "alpha", 0.2f);
    double beta = gf_node_attr_float(a->n, "beta", 0.5f);
    struct gf_value *t = OP2("Add", OP2("Mul", in(a, 0), k(a, alpha)), k(a, beta));
    struct gf_value *inside = OP2("And", OP2("Greater", t, k(a, 0)), OP2("Less", t, k(a, 1)));
    give(a, 0, OP3("Where", inside, OP2("Mul", a->dy[0], k(a, alpha)), k(a, 0)));
    return gf_ad_status(a->ad);
}

/* HardSwish: dX = 0 for X < -3, g for X > 3, g * (X/3 + 1/2) between
 * (PyTorch's choice at the two kinks) */
static enum gf_status rule_hard_swish(struct gf_grad_args *a)
{
    struct gf_value *x = in(a, 0), *g = a->dy[0];
    struct gf_value *mid = OP2("Mul", g, OP2("Add", OP2("Mul", x, k(a, 1.0 / 3.0)), k(a, 0.5)));
    struct gf_value *hi = OP3("Where", OP2("Greater", x, k(a, 3)), g, mid);
    give(a, 0, OP3("Where", OP2("Less", x, k(a, -3)), k(a, 0), hi));
    return gf_ad_status(a->ad);
}

/* Erf: dX = g * 2/sqrt(pi) * exp(-X^2) */
static enum gf_status rule_erf(struct gf_grad_args *a)
{
    struct gf_value *x = in(a, 0);
    struct gf_value *e = OP1("Exp", OP1("Neg", OP2("Mul", x, x)));
    give(a, 0, OP2("Mul", a->dy[0], OP2("Mul", e, k(a, 2.0 / sqrt(M_PI)))));
    return gf_ad_status(a->ad);
}

/* GeluGrad(g, X) with the same `approximate` */
static enum gf_status rule_gelu(struct gf_grad_args *a)
{
    give(a, 0, gf_ad_attr_copy(a->ad, OP2("GeluGrad", a->dy[0], in(a, 0)), "approximate"));
    return gf_ad_status(a->ad);
}

/* Clip bound: input i (opset 11+) or the float attribute (before). */
static struct gf_value *clip_bound(struct gf_grad_args *a, size_t i, const char *name)
{
    const struct gf_attr *at = gf_node_attr(a->n, name);
    if (in(a, i))
        return in(a, i);
    return at && at->type == GF_ATTR_FLOAT ? k(a, at->f) : NULL;
}

/* Clip: dX = g where min <= X <= max; dmin = sum(g where X < min),
 * dmax = sum(g where X > max) */
static enum gf_status rule_clip(struct gf_grad_args *a)
{
    struct gf_value *x = in(a, 0), *g = a->dy[0], *zero = k(a, 0), *inside = NULL;
    struct gf_value *lo = clip_bound(a, 1, "min"), *hi = clip_bound(a, 2, "max");
    struct gf_value *below = lo ? OP2("Less", x, lo) : NULL;
    struct gf_value *above = hi ? OP2("Greater", x, hi) : NULL;
    if (below && above)
        inside = OP1("Not", OP2("Or", below, above));
    else if (below || above)
        inside = OP1("Not", below ? below : above);
    if (need(a, 0))
        give(a, 0, inside ? OP3("Where", inside, g, zero) : g);
    if (need(a, 1))
        give(a, 1, OP3("Where", below, g, zero));
    if (need(a, 2))
        give(a, 2, OP3("Where", above, g, zero));
    return gf_ad_status(a->ad);
}

/* ---- variadic ------------------------------------------------------------------ */

/* Max / Min: the gradient goes to the inputs equal to Y, shared evenly
 * among ties: dXi = g * [Xi == Y] / #ties */
static enum gf_status rule_max_min(struct gf_grad_args *a)
{
    size_t n = a->n->n_inputs;
    struct gf_value *y = out(a, 0), *eq[64], *cnt;
    enum gf_dtype dt = gf_ad_dtype(y);
    if (n == 1) {
        give(a, 0, a->dy[0]);
        return gf_ad_status(a->ad);
    }
    if (n > 64)
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "%zu inputs (at most 64)", n);
    for (size_t i = 0; i < n; i++)
        eq[i] = gf_ad_attr_int(a->ad, OP1("Cast", OP2("Equal", in(a, i), y)), "to", dt);
    cnt = n == 2 ? OP2("Add", eq[0], eq[1]) : gf_ad_node(a->ad, "Sum", n, eq, 0, NULL);
    struct gf_value *share = OP2("Div", a->dy[0], cnt);
    for (size_t i = 0; i < n; i++)
        if (need(a, i))
            give(a, i, OP2("Mul", share, eq[i]));
    return gf_ad_status(a->ad);
}

/* Sum: dXi = g;  Mean: dXi = g / n */
static enum gf_status rule_sum_mean(struct gf_grad_args *a)
{
    struct gf_value *g = a->dy[0];
    if (a->n->op == GF_OP_MEAN && a->n->n_inputs > 1)
        g = OP2("Mul", g, k(a, 1.0 / (double)a->n->n_inputs));
    for (size_t i = 0; i < a->n->n_inputs; i++)
        give(a, i, g);
    return gf_ad_status(a->ad);
}

/* Where(C, X, Y): dX = g where C, dY = g where not C */
static enum gf_status rule_where(struct gf_grad_args *a)
{
    struct gf_value *c = in(a, 0), *g = a->dy[0], *zero = k(a, 0);
    if (need(a, 1))
        give(a, 1, OP3("Where", c, g, zero));
    if (need(a, 2))
        give(a, 2, OP3("Where", c, zero, g));
    return gf_ad_status(a->ad);
}

/* ---- plumbing -------------------------------------------------------------------- */

/* Cast / CastLike between float types: the gradient cast back (CastLike's
 * input 1 gives only a type: no gradient) */
static enum gf_status rule_cast(struct gf_grad_args *a)
{
    enum gf_dtype from = gf_ad_dtype(in(a, 0)), to = gf_ad_dtype(out(a, 0));
    struct gf_value *g = a->dy[0];
    if (from != to)
        g = gf_ad_attr_int(a->ad, OP1("Cast", g), "to", from);
    if (need(a, 0))
        a->dx[0] = g;
    return gf_ad_status(a->ad);
}

static enum gf_status rule_identity(struct gf_grad_args *a)
{
    if (need(a, 0))
        a->dx[0] = a->dy[0];
    return gf_ad_status(a->ad);
}

/* Dropout in training mode: DropoutGrad(g, mask, ratio, training_mode);
 * in inference mode it is the identity. */
static enum gf_status rule_dropout(struct gf_grad_args *a)
{
    int64_t opset = gf_ad_opset(a->ad);
    double t;
    bool train = opset < 7 ? gf_node_attr_int(a->n, "is_test", 0) == 0
                           : opset >= 12 && in(a, 2) &&
                                 !(gf_ad_const_scalar(in(a, 2), &t) && t == 0);
    if (!train)
        return rule_identity(a);
    struct gf_node *n = gf_ad_widen_outputs(a->ad, a->n, 2);
    if (!n)
        return gf_ad_status(a->ad);
    a->n = n;
    if (!n->outputs[1]) { /* listed but omitted: give it a value */
        struct gf_value *mask = gf_graph_new_value(n->graph, NULL, "dropout_mask");
        if (!mask || gf_node_set_output(n, 1, mask) != GF_OK)
            return gf_ad_fail(a->ad, GF_ERR_NOMEM, "cannot add the mask output");
    }
    /* DropoutGrad(g, mask, ratio?, training_mode?): the forward's inputs 1, 2 */
    struct gf_value *ins[4] = {a->dy[0], n->outputs[1], in(a, 1), in(a, 2)};
    struct gf_value *dx = gf_ad_node(a->ad, "DropoutGrad", n->n_inputs + 1, ins, 0, NULL);
    if (opset < 12)
        dx = gf_ad_attr_float(a->ad, dx, "ratio", gf_node_attr_float(n, "ratio", 0.5f));
    a->dx[0] = dx;
    return gf_ad_status(a->ad);
}

/* ---- reductions -------------------------------------------------------------------- */

/* How a Reduce* node reduces: constant axes (n_axes of them; 0 with all
 * set: every axis), or axes given by a value known only at run time. */
struct red {
    bool identity; /* empty axes with noop_with_empty_axes */
    bool all;
    bool keep;
    size_t n_axes;
    int64_t axes[64];
    struct gf_value *axes_v; /* run-time axes (opset 13+ input) */
};

static void red_info(const struct gf_grad_args *a, struct red *r)
{
    memset(r, 0, sizeof(*r));
    r->keep = gf_node_attr_int(a->n, "keepdims", 1) != 0;
    const int64_t *ax = gf_node_attr_ints(a->n, "axes", &r->n_axes);
    if (in(a, 1) && !gf_ad_const_ints(in(a, 1), r->axes, 64, &r->n_axes))
        r->axes_v = in(a, 1);
    else if (!in(a, 1) && ax)
        memcpy(r->axes, ax, (r->n_axes = r->n_axes < 64 ? r->n_axes : 64) * sizeof(int64_t));
    if (!r->axes_v && r->n_axes == 0) {
        r->all = true;
        r->identity = gf_node_attr_int(a->n, "noop_with_empty_axes", 0) != 0;
    }
}

/* v (shaped like the reduced output) with the reduced axes back as 1s,
 * so that it broadcasts against X. */
static struct gf_value *red_keep(struct gf_grad_args *a, const struct red *r,
                                 struct gf_value *v)
{
    if (r->keep || r->all)
        return v; /* kept axes, or a scalar: broadcasts as is */
    if (r->axes_v)
        return OP2("Unsqueeze", v, r->axes_v);
    return gf_ad_unsqueeze(a->ad, v, r->n_axes, r->axes);
}

/* ReduceSum of v over the node's axes, keeping them. */
static struct gf_value *red_sum(struct gf_grad_args *a, const struct red *r,
                                struct gf_value *v)
{
    if (r->axes_v)
        return gf_ad_attr_int(a->ad, OP2("ReduceSum", v, r->axes_v), "keepdims", 1);
    return gf_ad_reduce_sum(a->ad, v, r->all ? 0 : r->n_axes, r->axes, true);
}

/* Elements reduced into each output: numel(X) / numel(Y). */
static struct gf_value *red_count(struct gf_grad_args *a)
{
    struct gf_value *x = in(a, 0), *y = out(a, 0);
    int64_t nx = gf_type_numel(&x->type), ny = gf_type_numel(&y->type);
    enum gf_dtype dt = gf_ad_dtype(y);
    if (nx >= 0 && ny > 0)
        return k(a, (double)nx / (double)ny);
    struct gf_value *sx = gf_ad_attr_int(a->ad, OP1("Cast", OP1("Size", x)), "to", dt);
    struct gf_value *sy = gf_ad_attr_int(a->ad, OP1("Cast", OP1("Size", y)), "to", dt);
    return OP2("Div", sx, sy);
}

/* Sum: dX = expand(g); Mean: expand(g) / count; SumSquare: 2 X g;
 * L1: sign(X) g; L2: X g / Y; LogSumExp: exp(X - Y) g; Prod: Y g / X
 * (X without zeros); Max / Min: g shared evenly among the elements equal
 * to Y (PyTorch's amax / amin). */
static enum gf_status rule_reduce(struct gf_grad_args *a)
{
    struct red r;
    struct gf_value *x = in(a, 0), *g, *y, *dx = NULL;
    if (gf_ad_rank(x) > 64)
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "rank %d", gf_ad_rank(x));
    red_info(a, &r);
    if (r.identity)
        return rule_identity(a);
    if (!need(a, 0))
        return gf_ad_status(a->ad);
    g = red_keep(a, &r, a->dy[0]);
    y = red_keep(a, &r, out(a, 0));
    switch (a->n->op) {
    case GF_OP_REDUCE_SUM: dx = OP2("Expand", g, gf_ad_shape(a->ad, x)); break;
    case GF_OP_REDUCE_MEAN:
        dx = OP2("Expand", OP2("Div", g, red_count(a)), gf_ad_shape(a->ad, x));
        break;
    case GF_OP_REDUCE_SUM_SQUARE: dx = OP2("Mul", OP2("Mul", x, k(a, 2)), g); break;
    case GF_OP_REDUCE_L1: dx = OP2("Mul", OP1("Sign", x), g); break;
    case GF_OP_REDUCE_L2: dx = OP2("Mul", x, OP2("Div", g, y)); break;
    case GF_OP_REDUCE_LOG_SUM_EXP: dx = OP2("Mul", OP1("Exp", OP2("Sub", x, y)), g); break;
    case GF_OP_REDUCE_PROD: dx = OP2("Mul", OP2("Div", y, x), g); break;
    case GF_OP_REDUCE_MAX:
    case GF_OP_REDUCE_MIN: {
        struct gf_value *m = gf_ad_attr_int(a->ad, OP1("Cast", OP2("Equal", x, y)), "to",
                                            gf_ad_dtype(x));
        dx = OP2("Mul", m, OP2("Div", g, red_sum(a, &r, m)));
        break;
    }
    default:
        return gf_ad_fail(a->ad, GF_ERR_INTERNAL, "not a reduction");
    }
    a->dx[0] = dx;
    return gf_ad_status(a->ad);
}

/* ---- matrix products ------------------------------------------------------------- */

/* MatMulEpilogue(x, y) {transA = tx, transB = ty}: x' @ y' with the
 * transposes read by the GEMM (cuBLASLt / OpenBLAS take a transposed
 * operand as is) instead of copied by a Transpose node.  Both operands
 * have rank >= 2; batch dims broadcast as in MatMul. */
static struct gf_value *matmul_t(struct gf_grad_args *a, struct gf_value *x, struct gf_value *y,
                                 bool tx, bool ty)
{
    struct gf_value *v = OP2("MatMulEpilogue", x, y);
    if (tx)
        v = gf_ad_attr_int(a->ad, v, "transA", 1);
    return ty ? gf_ad_attr_int(a->ad, v, "transB", 1) : v;
}

/* True when x's batch dims (all but the last two) provably equal y's. */
static bool same_batch(const struct gf_value *x, const struct gf_value *y)
{
    int rx = gf_ad_rank(x), ry = gf_ad_rank(y);
    if (rx != ry || rx < 2)
        return false;
    for (int i = 0; i < rx - 2; i++) {
        const struct gf_dim *p = &x->type.dims[i], *q = &y->type.dims[i];
        if (p->value >= 0 || q->value >= 0 ? p->value != q->value
                                           : !p->param || !q->param || strcmp(p->param, q->param))
            return false;
    }
    return true;
}

/* A vector operand: [K] is promoted to [1, K] (A) or [K, 1] (B). */
static enum gf_status matmul_vector(struct gf_grad_args *a, int ra, int rb)
{
    struct gf_value *A = in(a, 0), *B = in(a, 1), *g = a->dy[0];
    int64_t m1 = -1, m2 = -2;
    if (ra == 1 && rb == 1) { /* a dot product: g is a scalar */
        give(a, 0, OP2("Mul", g, B));
        give(a, 1, OP2("Mul", g, A));
    } else if (ra == 1) { /* A [K], B [..., K, N], g [..., N] */
        struct gf_value *g2 = gf_ad_unsqueeze(a->ad, g, 1, &m2); /* [..., 1, N] */
        if (need(a, 0)) /* [..., 1, K] summed to [K] */
            a->dx[0] = OP2("SumToShape", matmul_t(a, g2, B, false, true),
                           gf_ad_shape(a->ad, A));
        if (need(a, 1)) /* [K, 1] * [..., 1, N]: B's shape (Y's batch is B's) */
            a->dx[1] = OP2("Mul", gf_ad_unsqueeze(a->ad, A, 1, &m1), g2);
    } else { /* A [..., M, K], B [K], g [..., M] */
        struct gf_value *g2 = gf_ad_unsqueeze(a->ad, g, 1, &m1); /* [..., M, 1] */
        if (need(a, 0)) /* [..., M, 1] * [K]: A's shape */
            a->dx[0] = OP2("Mul", g2, B);
        if (need(a, 1)) /* sum over everything but K of A * g */
            a->dx[1] = OP2("SumToShape", OP2("Mul", A, g2), gf_ad_shape(a->ad, B));
    }
    return gf_ad_status(a->ad);
}

/* MatMul with ONNX batch broadcasting: dA = g @ B^T, dB = A^T @ g, each
 * summed over the batch dims its operand was broadcast along; the
 * transposes are MatMulEpilogue's transA / transB, not Transpose nodes.  A 2-D B
 * (a linear layer's weight) gets dB from one GEMM over the flattened rows:
 * Gemm(Flatten(A), Flatten(g), transA=1). */
static enum gf_status rule_matmul(struct gf_grad_args *a)
{
    struct gf_value *A = in(a, 0), *B = in(a, 1), *g = a->dy[0], *y = out(a, 0);
    int ra = gf_ad_rank(A), rb = gf_ad_rank(B), ry = gf_ad_rank(y);
    if (ra < 1 || rb < 1 || ry < 0)
        return gf_ad_fail(a->ad, GF_ERR_UNSUPPORTED, "operand ranks are not known");
    if (ra == 1 || rb == 1)
        return matmul_vector(a, ra, rb);
    if (need(a, 0)) {
        struct gf_value *d = matmul_t(a, g, B, false, true);
        a->dx[0] = same_batch(A, y) ? d : OP2("SumToShape", d, gf_ad_shape(a->ad, A));
    }
    if (need(a, 1) && rb == 2) { /* A [rows..., K], g [rows..., N] as 2-D */
        struct gf_value *a2 = A, *g2 = g;
        if (ra > 2)
            a2 = gf_ad_attr_int(a->ad, OP1("Flatten", A), "axis", ra - 1);
        if (ry > 2)
            g2 = gf_ad_attr_int(a->ad, OP1("Flatten", g), "axis", ry - 1);
        a->dx[1] = gf_ad_attr_int(a->ad, OP2("Gemm", a2, g2), "transA", 1);
    } else if (need(a, 1)) {
        struct gf_value *d = matmul_t(a, A, g, true, false);
        a->dx[1] = same_batch(B, y) ? d : OP2("SumToShape", d, gf_ad_shape(a->ad, B));
    }
    return gf_ad_status(a->ad);
}

/* Gemm(P, Q) with the given transposes and alpha. */
static struct gf_value *gemm(struct gf_grad_args *a, struct gf_value *p, struct gf_value *q,
                             bool tp, bool tq, double alpha)
{
    struct gf_value *v = OP2("Gemm", p, q);
    if (gf_ad_opset(a->ad) < 11) /* C was required */
        v = gf_ad_node(a->ad, "Gemm", 3, (struct gf_value *[]){p, q, k(a, 0)}, 0, NULL);
    if (tp)
        v = gf_ad_attr_int(a->ad, v, "transA", 1);
    if (tq)
        v = gf_ad_attr_int(a->ad, v, "transB", 1);
    return alpha != 1 ? gf_ad_attr_float(a->ad, v, "alpha", (float)alpha) : v;
}

/* Gemm: Y = alpha A' B' + beta C with A' = transA ? A^T : A (B' alike).
 * dA' = alpha g B'^T and dB' = alpha A'^T g, each written as one Gemm on
 * the untransposed operands; dC = beta g summed to C's shape. */
static enum gf_status rule_gemm(struct gf_grad_args *a)
{
    struct gf_value *A = in(a, 0), *B = in(a, 1), *g = a->dy[0];
    bool ta = gf_node_attr_int(a->n, "transA", 0), tb = gf_node_attr_int(a->n, "transB", 0);
    double alpha = gf_node_attr_float(a->n, "alpha", 1.0f);
    double beta = gf_node_attr_float(a->n, "beta", 1.0f);
    if (need(a, 0))
        a->dx[0] = ta ? gemm(a, B, g, tb, true, alpha) : gemm(a, g, B, false, !tb, alpha);
    if (need(a, 1))
        a->dx[1] = tb ? gemm(a, g, A, true, ta, alpha) : gemm(a, A, g, !ta, false, alpha);
    if (need(a, 2))
        give(a, 2, beta == 1 ? g : OP2("Mul", g, k(a, beta)));
    return gf_ad_status(a->ad);
}

/* ---- the table --------------------------------------------------------------------- */

#define R(op, fn, mask) [GF_OP_##op] = {fn, mask}
#define ZERO(op) [GF_OP_##op] = {gf_grad_zero, 0}

const struct gf_grad_rule gf_grad_rules[GF_OP_COUNT] = {
    /* elementwise */
    R(ADD, rule_add, 0x3), R(SUB, rule_sub, 0x3), R(MUL, rule_mul, 0x3),
    R(DIV, rule_div, 0x3), R(POW, rule_pow, 0x3), R(SQRT, rule_sqrt, 0x1),
    R(RECIPROCAL, rule_reciprocal, 0x1), R(NEG, rule_neg, 0x1), R(ABS, rule_abs, 0x1),
    R(EXP, rule_exp, 0x1), R(LOG, rule_log, 0x1), R(SIN, rule_sin, 0x1),
    R(COS, rule_cos, 0x1), R(TANH, rule_tanh, 0x1), R(SIGMOID, rule_sigmoid, 0x1),
    R(RELU, rule_relu, 0x1), R(LEAKY_RELU, rule_leaky_relu, 0x1), R(ELU, rule_elu, 0x1),
    R(SELU, rule_selu, 0x1), R(SOFTPLUS, rule_softplus, 0x1),
    R(SOFTSIGN, rule_softsign, 0x1), R(HARD_SIGMOID, rule_hard_sigmoid, 0x1),
    R(HARD_SWISH, rule_hard_swish, 0x1), R(ERF, rule_erf, 0x1), R(GELU, rule_gelu, 0x1),
    R(CLIP, rule_clip, 0x7),
    R(MAX, rule_max_min, GF_GRAD_ALL), R(MIN, rule_max_min, GF_GRAD_ALL),
    R(MEAN, rule_sum_mean, GF_GRAD_ALL), R(SUM, rule_sum_mean, GF_GRAD_ALL),
    R(WHERE, rule_where, 0x6),
    /* piecewise constant: no gradient flows through */
    ZERO(FLOOR), ZERO(CEIL), ZERO(ROUND), ZERO(SIGN), ZERO(HARDMAX),
    /* plumbing */
    R(CAST, rule_cast, 0x1), R(CAST_LIKE, rule_cast, 0x3), R(IDENTITY, rule_identity, 0x1),
    R(DROPOUT, rule_dropout, 0x1),
    /* reductions */
    R(REDUCE_SUM, rule_reduce, 0x1), R(REDUCE_MEAN, rule_reduce, 0x1),
    R(REDUCE_MAX, rule_reduce, 0x1), R(REDUCE_MIN, rule_reduce, 0x1),
    R(REDUCE_PROD, rule_reduce, 0x1), R(REDUCE_L1, rule_reduce, 0x1),
    R(REDUCE_L2, rule_reduce, 0x1), R(REDUCE_SUM_SQUARE, rule_reduce, 0x1),
    R(REDUCE_LOG_SUM_EXP, rule_reduce, 0x1),
    /* matrix products */
    R(MATMUL, rule_matmul, 0x3), R(GEMM, rule_gemm, 0x7),
    R(EINSUM, gf_grad_einsum, GF_GRAD_ALL),
    /* layout and indexing (grad_rules_nn.c) */
    R(TRANSPOSE, gf_grad_transpose, 0x1), R(RESHAPE, gf_grad_reshape, 0x1),
    R(FLATTEN, gf_grad_reshape, 0x1), R(SQUEEZE, gf_grad_reshape, 0x1),
    R(UNSQUEEZE, gf_grad_reshape, 0x1), R(EXPAND, gf_grad_expand, 0x1),
    R(CONCAT, gf_grad_concat, GF_GRAD_ALL), R(SPLIT, gf_grad_split, 0x1),
    R(SLICE, gf_grad_slice, 0x1), R(GATHER, gf_grad_gather, 0x1),
    R(GATHER_ELEMENTS, gf_grad_gather_elements, 0x1), R(GATHER_ND, gf_grad_gather_nd, 0x1),
    R(SCATTER_ND, gf_grad_scatter, 0x5), R(SCATTER_ELEMENTS, gf_grad_scatter, 0x5),
    R(TILE, gf_grad_tile, 0x1), R(PAD, gf_grad_pad, 0x1), R(TRILU, gf_grad_trilu, 0x1),
    R(CUM_SUM, gf_grad_cumsum, 0x1), R(TOP_K, gf_grad_top_k, 0x1),
    /* softmax, normalization, losses (grad_rules_nn.c) */
    R(SOFTMAX, gf_grad_softmax, 0x1), R(LOG_SOFTMAX, gf_grad_softmax, 0x1),
    R(LAYER_NORMALIZATION, gf_grad_layer_norm, 0x7),
    R(SOFTMAX_CROSS_ENTROPY_LOSS, gf_grad_sce_loss, 0x1),
    R(NEGATIVE_LOG_LIKELIHOOD_LOSS, gf_grad_nll_loss, 0x1),
    /* fused ops: a backward op of their own (grad_rules_fused.c), else
     * through their function body (replace the entry when one gets a rule) */
    R(RMS_NORM, gf_grad_rms_norm, 0x3), R(ADD_RMS_NORM, gf_grad_rms_norm, 0x7),
    R(LAYER_NORM, gf_grad_fused_layer_norm, 0x7),
    R(ADD_LAYER_NORM, gf_grad_fused_layer_norm, 0xf),
    R(SWIGLU, gf_grad_glu, 0x3), R(GEGLU, gf_grad_glu, 0x3),
    R(SILU, gf_grad_inline, GF_GRAD_ALL), R(FUSED_GELU, gf_grad_inline, GF_GRAD_ALL),
    R(MATMUL_EPILOGUE, gf_grad_matmul_epilogue, 0xf), R(ROPE, gf_grad_rope, 0x7),
    R(SOFTMAX_CROSS_ENTROPY, gf_grad_fused_sce, 0x1),
    R(LINEAR_CROSS_ENTROPY, gf_grad_fused_lce, 0xf), R(JSD, gf_grad_fused_jsd, 0x3),
    R(ATTENTION, gf_grad_fused_attention, 0xf),
};
