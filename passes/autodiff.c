/*
 * Reverse-mode automatic differentiation over the graph (gf_pass_autodiff).
 *
 * The backward graph is made of ordinary nodes appended to the main graph,
 * so fusion, planning, dispatch and dumps see it like any other part:
 *
 *   1. shapes are inferred (rules need dtypes and ranks);
 *   2. the loss and the parameters are chosen (gf_autodiff_opts);
 *   3. every value gets two marks: FROM_PARAM (a float value computed from
 *      a parameter) and TO_LOSS (a float value the loss is computed from);
 *      a value with both is "active" and gets a gradient.  Integer and bool
 *      values, and outputs of piecewise-constant ops, are never FROM_PARAM,
 *      so shape computations get no gradient;
 *   4. a node with an active output whose op has no rule, or with an active
 *      input its rule cannot differentiate, is GF_ERR_UNSUPPORTED naming node
 *      and op (checked before anything is added);
 *   5. d loss / d loss = 1 (a constant initializer of the loss dtype) seeds
 *      the walk over the forward nodes in reverse order; each node whose
 *      outputs have gradients hands them to its op's rule, which appends the
 *      nodes computing its inputs' gradients.  A value read by several nodes
 *      collects one contribution per read; they are summed (Add, or Sum for
 *      three and more) when its producer is reached;
 *   6. each parameter's gradient becomes the graph output "<param>_grad",
 *      and the parameter becomes a graph input that keeps its initializer.
 *
 * Fused ops without a rule of their own go through their model-local
 * function body (gf_grad_inline, below): the body is copied after the
 * backward nodes made so far and differentiated like the rest.
 *
 * HOW TO ADD A RULE.  Write `enum gf_status gf_grad_<op>(struct gf_grad_args *a)`
 * in grad_rules*.c (declare it in grad_rules.h when it lives in another file
 * than the table) and add `[GF_OP_<OP>] = {gf_grad_<op>, <input mask>}` to
 * gf_grad_rules[] in grad_rules.c.  The rule reads the forward node a->n,
 * the output gradients a->dy[k] (NULL: zero), and sets a->dx[i] for each
 * input with a->need[i], of that input's shape (reduce broadcast gradients
 * with gf_ad_sum_to).  It builds nodes with the gf_ad_* builder of
 * grad_rules.h (standard ONNX ops where exact and cheap; a backward op of
 * graph/ops.def, with shape inference in graph/shape.c and a kernel in
 * kernels/cpu/grad.c, where a dedicated kernel is better) and returns
 * gf_ad_status(a->ad).  Ops whose outputs carry no gradient (piecewise
 * constant) use gf_grad_zero.  Test it in tests/test_autodiff.c against
 * finite differences.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gf_half.h"
#include "grad_rules.h"

enum { FROM_PARAM = 1, TO_LOSS = 2, IS_PARAM = 4 };

/* The gradient contributions collected for one forward value. */
struct contrib {
    size_t n, cap;
    struct gf_value **v;
};

struct ad_const {
    enum gf_dtype dt;
    double x;
    size_t n;          /* int lists: element count */
    const int64_t *ints;
    struct gf_value *v;
};

struct gf_ad {
    struct gf_model *m;
    struct gf_graph *g;
    enum gf_status st;
    int64_t opset;
    struct gf_node *cur; /* forward node whose rule runs */
    size_t n_made;       /* nodes made, for their names */
    size_t n_vals;       /* values that existed before the pass (ids below) */
    size_t cap;          /* entries of the per-value arrays (n_vals, more after inlining) */
    uint8_t *mark;       /* [cap] FROM_PARAM | TO_LOSS | IS_PARAM */
    struct contrib *grad;       /* [cap] */
    struct gf_value **shape_of; /* [cap] cached Shape(v) */
    struct ad_const *consts;
    size_t n_consts, cap_consts;
    bool used_graphfuse; /* a backward op of the graphfuse domain was added */
    const char *hint;    /* overrides the name hint of the next values made */
};

/* ---- small facts ------------------------------------------------------- */

static bool is_float(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_DOUBLE || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

enum gf_dtype gf_ad_dtype(const struct gf_value *v)
{
    return v && v->type.kind == GF_TYPE_TENSOR ? v->type.dtype : GF_UNDEFINED;
}

int gf_ad_rank(const struct gf_value *v)
{
    return v && v->type.kind == GF_TYPE_TENSOR ? v->type.rank : -1;
}

static bool same_dim(const struct gf_dim *a, const struct gf_dim *b)
{
    if (a->value >= 0 || b->value >= 0)
        return a->value == b->value;
    return a->param && b->param && strcmp(a->param, b->param) == 0;
}

bool gf_ad_same_shape(const struct gf_value *a, const struct gf_value *b)
{
    int r = gf_ad_rank(a);
    if (r < 0 || r != gf_ad_rank(b))
        return false;
    for (int i = 0; i < r; i++)
        if (!same_dim(&a->type.dims[i], &b->type.dims[i]))
            return false;
    return true;
}

/* The tensor of a constant value: an initializer that is not a graph
 * input, or the output of a Constant node with a `value` tensor. */
static const struct gf_tensor *const_tensor(const struct gf_value *v)
{
    if (!v)
        return NULL;
    if (v->init)
        return v->is_input ? NULL : v->init;
    if (v->producer && v->producer->op == GF_OP_CONSTANT) {
        const struct gf_attr *a = gf_node_attr(v->producer, "value");
        return a && a->type == GF_ATTR_TENSOR ? a->t : NULL;
    }
    return NULL;
}

bool gf_ad_const_ints(const struct gf_value *v, int64_t *out, size_t max, size_t *n)
{
    const struct gf_tensor *t = const_tensor(v);
    if (!t || (t->dtype != GF_INT64 && t->dtype != GF_INT32) || t->nelem > max || t->rank > 1)
        return false;
    for (size_t i = 0; i < t->nelem; i++)
        out[i] = gf_tensor_get_i64(t, i);
    *n = t->nelem;
    return true;
}

bool gf_ad_const_scalar(const struct gf_value *v, double *x)
{
    const struct gf_tensor *t = const_tensor(v);
    if (!t || t->nelem != 1 || t->dtype == GF_STRING || !t->data)
        return false;
    *x = gf_tensor_get_f64(t, 0);
    return true;
}

/* ---- errors ------------------------------------------------------------ */

static const char *node_label(const struct gf_node *n, char *buf, size_t len)
{
    if (n->name && *n->name)
        snprintf(buf, len, "node '%s' (%s)", n->name, n->op_type);
    else
        snprintf(buf, len, "node #%d (%s)", n->id, n->op_type);
    return buf;
}

enum gf_status gf_ad_status(const struct gf_ad *ad)
{
    return ad->st;
}

enum gf_status gf_ad_fail(struct gf_ad *ad, enum gf_status st, const char *fmt, ...)
{
    char msg[512], who[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (ad->st != GF_OK)
        return ad->st;
    if (ad->cur)
        ad->st = gf_error(st, "autodiff: %s: %s", node_label(ad->cur, who, sizeof(who)), msg);
    else
        ad->st = gf_error(st, "autodiff: %s", msg);
    return ad->st;
}

int64_t gf_ad_opset(const struct gf_ad *ad)
{
    return ad->opset;
}

/* A failed graph call (its message is set): the builder stops. */
static void *ad_broken(struct gf_ad *ad)
{
    if (ad->st == GF_OK)
        ad->st = GF_ERR_NOMEM;
    return NULL;
}

/* ---- building nodes ------------------------------------------------------ */

/* The hint for values a rule makes: "<forward node>_bwd" (a rule's final
 * results are renamed "<input>_grad" afterwards), or ad->hint. */
static const char *value_hint(const struct gf_ad *ad, char *buf, size_t len)
{
    const struct gf_node *n = ad->cur;
    if (ad->hint)
        snprintf(buf, len, "%s", ad->hint);
    else if (n)
        snprintf(buf, len, "%s_bwd", n->name && *n->name ? n->name : n->op_type);
    else
        snprintf(buf, len, "grad");
    return buf;
}

struct gf_value *gf_ad_node(struct gf_ad *ad, const char *op, size_t n_in,
                            struct gf_value *const *in, size_t n_out, struct gf_value **out)
{
    struct gf_value *outs[64];
    char hint[256], name[320];
    if (ad->st != GF_OK)
        return NULL;
    if (n_out > 64)
        return gf_ad_fail(ad, GF_ERR_UNSUPPORTED, "%s with %zu outputs (at most 64)", op, n_out),
               NULL;
    bool std = gf_op_lookup("", op) != GF_OP_UNKNOWN;
    size_t k = n_out ? n_out : 1;
    value_hint(ad, hint, sizeof(hint));
    for (size_t i = 0; i < k; i++)
        if (!(outs[i] = gf_graph_new_value(ad->g, NULL, hint)))
            return ad_broken(ad);
    const struct gf_node *f = ad->cur;
    snprintf(name, sizeof(name), "%s_grad/%s_%zu",
             f && f->name && *f->name ? f->name : f ? f->op_type : "loss", op, ad->n_made++);
    struct gf_node *n = gf_graph_add_node(ad->g, op, std ? "" : "graphfuse", name, n_in, in, k,
                                          outs);
    if (!n)
        return ad_broken(ad);
    ad->used_graphfuse |= !std;
    for (size_t i = 0; out && i < n_out; i++)
        out[i] = outs[i];
    return outs[0];
}

/* A required operand is missing: after a failure (the builder stops), or a
 * rule's bug, which must not pass for a zero gradient. */
static void *missing(struct gf_ad *ad, const char *what)
{
    if (ad->st == GF_OK)
        gf_ad_fail(ad, GF_ERR_INTERNAL, "%s: an operand is missing", what);
    return NULL;
}

struct gf_value *gf_ad_op1(struct gf_ad *ad, const char *op, struct gf_value *x)
{
    return x ? gf_ad_node(ad, op, 1, &x, 0, NULL) : missing(ad, op);
}

struct gf_value *gf_ad_op2(struct gf_ad *ad, const char *op, struct gf_value *a,
                           struct gf_value *b)
{
    struct gf_value *in[2] = {a, b};
    return a && b ? gf_ad_node(ad, op, 2, in, 0, NULL) : missing(ad, op);
}

struct gf_value *gf_ad_op3(struct gf_ad *ad, const char *op, struct gf_value *a,
                           struct gf_value *b, struct gf_value *c)
{
    struct gf_value *in[3] = {a, b, c};
    return a && b && c ? gf_ad_node(ad, op, 3, in, 0, NULL) : missing(ad, op);
}

/* An attribute setter's status folded into the builder's. */
static struct gf_value *attr_done(struct gf_ad *ad, struct gf_value *v, enum gf_status st)
{
    if (st != GF_OK && ad->st == GF_OK)
        ad->st = st;
    return ad->st == GF_OK ? v : NULL;
}

struct gf_value *gf_ad_attr_int(struct gf_ad *ad, struct gf_value *v, const char *name,
                                int64_t i)
{
    if (!v || ad->st != GF_OK)
        return missing(ad, name);
    return attr_done(ad, v, gf_node_set_attr_int(v->producer, name, i));
}

struct gf_value *gf_ad_attr_float(struct gf_ad *ad, struct gf_value *v, const char *name,
                                  float f)
{
    if (!v || ad->st != GF_OK)
        return missing(ad, name);
    return attr_done(ad, v, gf_node_set_attr_float(v->producer, name, f));
}

struct gf_value *gf_ad_attr_ints(struct gf_ad *ad, struct gf_value *v, const char *name,
                                 size_t n, const int64_t *ints)
{
    if (!v || ad->st != GF_OK)
        return missing(ad, name);
    return attr_done(ad, v, gf_node_set_attr_ints(v->producer, name, n, ints));
}

struct gf_value *gf_ad_attr_string(struct gf_ad *ad, struct gf_value *v, const char *name,
                                   const char *s)
{
    if (!v || ad->st != GF_OK)
        return missing(ad, name);
    return attr_done(ad, v, gf_node_set_attr_string(v->producer, name, s));
}

/* Copies one attribute (of the types forward nodes use) onto node n. */
static enum gf_status copy_attr(struct gf_node *n, const struct gf_attr *a)
{
    switch (a->type) {
    case GF_ATTR_INT:
        return gf_node_set_attr_int(n, a->name, a->i);
    case GF_ATTR_FLOAT:
        return gf_node_set_attr_float(n, a->name, a->f);
    case GF_ATTR_INTS:
        return gf_node_set_attr_ints(n, a->name, a->n, a->ints);
    case GF_ATTR_STRING:
        return gf_node_set_attr_string(n, a->name, a->s.data ? (const char *)a->s.data : "");
    case GF_ATTR_TENSOR:
        return gf_node_set_attr_tensor(n, a->name, a->t);
    default:
        return gf_error(GF_ERR_UNSUPPORTED, "attribute '%s' of type %s cannot be copied",
                        a->name, gf_attr_type_name(a->type));
    }
}

struct gf_value *gf_ad_attr_copy(struct gf_ad *ad, struct gf_value *v, const char *name)
{
    if (!v || ad->st != GF_OK)
        return missing(ad, name);
    const struct gf_attr *a = gf_node_attr(ad->cur, name);
    return a ? attr_done(ad, v, copy_attr(v->producer, a)) : v;
}

/* ---- constants ----------------------------------------------------------- */

static struct gf_value *const_find(struct gf_ad *ad, enum gf_dtype dt, double x, size_t n,
                                   const int64_t *ints)
{
    for (size_t i = 0; i < ad->n_consts; i++) {
        const struct ad_const *c = &ad->consts[i];
        if (c->dt != dt || c->n != n)
            continue;
        if (ints ? memcmp(c->ints, ints, n * sizeof(*ints)) == 0
                 : (c->x == x && signbit(c->x) == signbit(x)))
            return c->v;
    }
    return NULL;
}

static struct gf_value *const_add(struct gf_ad *ad, struct gf_tensor *t, enum gf_dtype dt,
                                  double x, size_t n)
{
    char hint[64];
    if (!t)
        return ad_broken(ad);
    if (ad->n_consts == ad->cap_consts) {
        size_t cap = ad->cap_consts ? 2 * ad->cap_consts : 32;
        struct ad_const *c = realloc(ad->consts, cap * sizeof(*c));
        if (!c) {
            ad->st = gf_error(GF_ERR_NOMEM, "autodiff: out of memory");
            return NULL;
        }
        ad->consts = c;
        ad->cap_consts = cap;
    }
    snprintf(hint, sizeof(hint), "grad_const");
    struct gf_value *v = gf_graph_add_initializer(ad->g, gf_graph_unique_name(ad->g, hint), t);
    if (!v)
        return ad_broken(ad);
    const int64_t *ints = dt == GF_INT64 && n ? t->data : NULL;
    ad->consts[ad->n_consts++] = (struct ad_const){dt, x, n, ints, v};
    return v;
}

struct gf_value *gf_ad_scalar(struct gf_ad *ad, enum gf_dtype dt, double x)
{
    if (ad->st != GF_OK)
        return NULL;
    if (!is_float(dt))
        dt = GF_FLOAT;
    struct gf_value *v = const_find(ad, dt, x, 1, NULL);
    if (v)
        return v;
    float f = (float)x;
    /* fp16 / bf16 (--precision): the constant rounded to nearest even */
    uint16_t h = dt == GF_FLOAT16 ? gf_float_to_half(f) : gf_float_to_bf16(f);
    const void *data = dt == GF_DOUBLE ? (void *)&x : dt == GF_FLOAT ? (void *)&f : (void *)&h;
    return const_add(ad, gf_tensor_new(ad->m, NULL, dt, 0, NULL, data), dt, x, 1);
}

struct gf_value *gf_ad_ints(struct gf_ad *ad, size_t n, const int64_t *vals)
{
    if (ad->st != GF_OK)
        return NULL;
    struct gf_value *v = const_find(ad, GF_INT64, 0, n, vals);
    if (v)
        return v;
    int64_t dim = (int64_t)n;
    return const_add(ad, gf_tensor_new(ad->m, NULL, GF_INT64, 1, &dim, vals), GF_INT64, 0, n);
}

/* ---- shapes ----------------------------------------------------------------- */

struct gf_value *gf_ad_shape(struct gf_ad *ad, struct gf_value *x)
{
    if (!x || ad->st != GF_OK)
        return missing(ad, "Shape");
    bool cached = (size_t)x->id < ad->cap;
    if (cached && ad->shape_of[x->id])
        return ad->shape_of[x->id];
    char hint[512];
    snprintf(hint, sizeof(hint), "%s_shape", x->name);
    ad->hint = hint;
    struct gf_value *s = gf_ad_op1(ad, "Shape", x);
    ad->hint = NULL;
    if (cached)
        ad->shape_of[x->id] = s;
    return s;
}

struct gf_value *gf_ad_zeros_like(struct gf_ad *ad, struct gf_value *x)
{
    if (!x || ad->st != GF_OK)
        return missing(ad, "zeros");
    enum gf_dtype dt = gf_ad_dtype(x);
    if (dt != GF_FLOAT && dt != GF_DOUBLE)
        return gf_ad_fail(ad, GF_ERR_UNSUPPORTED, "zeros like '%s' of type %s", x->name,
                          gf_dtype_name(dt)), NULL;
    struct gf_tensor *t = gf_tensor_new(ad->m, NULL, dt, 1, (int64_t[]){1}, NULL);
    struct gf_value *z = gf_ad_op1(ad, "ConstantOfShape", gf_ad_shape(ad, x));
    if (!t)
        return ad_broken(ad);
    if (z)
        attr_done(ad, z, gf_node_set_attr_tensor(z->producer, "value", t));
    return ad->st == GF_OK ? z : NULL;
}

struct gf_value *gf_ad_sum_to(struct gf_ad *ad, struct gf_value *g, const struct gf_value *like,
                              struct gf_value *x)
{
    if (!g || !x || ad->st != GF_OK)
        return missing(ad, "SumToShape");
    if (like && gf_ad_same_shape(like, x))
        return g;
    return gf_ad_op2(ad, "SumToShape", g, gf_ad_shape(ad, x));
}

struct gf_value *gf_ad_reshape_like(struct gf_ad *ad, struct gf_value *x,
                                    const struct gf_value *x_like, struct gf_value *y)
{
    if (!x || !y || ad->st != GF_OK)
        return missing(ad, "Reshape");
    if (x_like && gf_ad_same_shape(x_like, y))
        return x;
    struct gf_value *r = gf_ad_op2(ad, "Reshape", x, gf_ad_shape(ad, y));
    /* a 0 in the target is a real 0 (an empty tensor), not "copy the dim" */
    return ad->opset >= 14 ? gf_ad_attr_int(ad, r, "allowzero", 1) : r;
}

struct gf_value *gf_ad_unsqueeze(struct gf_ad *ad, struct gf_value *x, size_t n,
                                 const int64_t *axes)
{
    if (ad->opset >= 13)
        return gf_ad_op2(ad, "Unsqueeze", x, gf_ad_ints(ad, n, axes));
    return gf_ad_attr_ints(ad, gf_ad_op1(ad, "Unsqueeze", x), "axes", n, axes);
}

struct gf_value *gf_ad_reduce_sum(struct gf_ad *ad, struct gf_value *x, size_t n,
                                  const int64_t *axes, bool keepdims)
{
    struct gf_value *r;
    if (n == 0)
        r = gf_ad_op1(ad, "ReduceSum", x); /* every axis */
    else if (ad->opset >= 13)
        r = gf_ad_op2(ad, "ReduceSum", x, gf_ad_ints(ad, n, axes));
    else
        r = gf_ad_attr_ints(ad, gf_ad_op1(ad, "ReduceSum", x), "axes", n, axes);
    return gf_ad_attr_int(ad, r, "keepdims", keepdims);
}

struct gf_value *gf_ad_transpose(struct gf_ad *ad, struct gf_value *x, size_t n,
                                 const int64_t *perm)
{
    return gf_ad_attr_ints(ad, gf_ad_op1(ad, "Transpose", x), "perm", n, perm);
}

/* ---- forward-node surgery ----------------------------------------------------- */

struct gf_node *gf_ad_widen_outputs(struct gf_ad *ad, struct gf_node *n, size_t n_out)
{
    char hint[256];
    if (ad->st != GF_OK)
        return NULL;
    if (n->n_outputs >= n_out)
        return n;
    struct gf_value **ins = gf_model_alloc(ad->m, (n->n_inputs + 1) * sizeof(*ins));
    struct gf_value **outs = gf_model_alloc(ad->m, n_out * sizeof(*outs));
    if (!ins || !outs)
        return ad_broken(ad);
    memcpy(ins, n->inputs, n->n_inputs * sizeof(*ins));
    for (size_t i = 0; i < n->n_outputs; i++) {
        outs[i] = n->outputs[i];
        if (gf_node_set_output(n, i, NULL) != GF_OK)
            return ad_broken(ad);
    }
    snprintf(hint, sizeof(hint), "%s_out", n->name && *n->name ? n->name : n->op_type);
    for (size_t i = n->n_outputs; i < n_out; i++)
        if (!(outs[i] = gf_graph_new_value(ad->g, NULL, hint)))
            return ad_broken(ad);
    struct gf_node *before = n->next;
    gf_graph_remove_node(ad->g, n);
    struct gf_node *w = gf_graph_add_node(ad->g, n->op_type, n->domain, n->name, n->n_inputs,
                                          ins, n_out, outs);
    if (!w)
        return ad_broken(ad);
    gf_node_move_before(w, before);
    w->doc_string = n->doc_string;
    w->extra = n->extra;
    for (size_t i = 0; i < n->n_attrs; i++) {
        enum gf_status st = copy_attr(w, &n->attrs[i]);
        if (st != GF_OK)
            return ad->st = st, NULL;
    }
    if (ad->cur == n)
        ad->cur = w;
    return w;
}

/* ---- the rule of piecewise-constant ops ------------------------------------- */

enum gf_status gf_grad_zero(struct gf_grad_args *a)
{
    (void)a;
    return GF_OK;
}

/* ---- marks: which values get a gradient -------------------------------------- */

/* Values that may carry a gradient: float tensors, or values whose type
 * inference could not tell (the output of an op graphfuse does not know
 * must still be caught by the "no rule" check). */
static bool may_differ(const struct gf_value *v)
{
    enum gf_dtype t = gf_ad_dtype(v);
    return is_float(t) || t == GF_UNDEFINED;
}

static bool is_zero_op(const struct gf_node *n)
{
    return gf_grad_rules[n->op].fn == gf_grad_zero;
}

static bool active(const struct gf_ad *ad, const struct gf_value *v)
{
    return v && (size_t)v->id < ad->cap &&
           (ad->mark[v->id] & (FROM_PARAM | TO_LOSS)) == (FROM_PARAM | TO_LOSS);
}

static bool has_subgraph(const struct gf_node *n)
{
    for (size_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].type == GF_ATTR_GRAPH || n->attrs[i].type == GF_ATTR_GRAPHS)
            return true;
    return false;
}

/* A node with subgraphs reading a FROM_PARAM value of the main graph. */
static bool implicit_from_param(const struct gf_ad *ad, const struct gf_node *n)
{
    for (size_t i = 0; i < ad->n_vals; i++) {
        const struct gf_value *v = ad->g->values[i];
        for (size_t u = 0; (ad->mark[i] & FROM_PARAM) && u < v->n_uses; u++)
            if (v->uses[u].node == n && v->uses[u].slot < 0)
                return true;
    }
    return false;
}

/* FROM_PARAM: parameters and the float outputs of nodes reading one. */
static void mark_from_params(struct gf_ad *ad)
{
    for (size_t i = 0; i < ad->n_vals; i++)
        ad->mark[i] = (uint8_t)((ad->mark[i] & ~FROM_PARAM) |
                                (ad->mark[i] & IS_PARAM ? FROM_PARAM : 0));
    for (struct gf_node *n = ad->g->first; n; n = n->next) {
        if (is_zero_op(n))
            continue;
        bool any = false;
        for (size_t i = 0; i < n->n_inputs && !any; i++)
            any = n->inputs[i] && (ad->mark[n->inputs[i]->id] & FROM_PARAM);
        if (!any && has_subgraph(n))
            any = implicit_from_param(ad, n);
        for (size_t o = 0; any && o < n->n_outputs; o++)
            if (n->outputs[o] && may_differ(n->outputs[o]))
                ad->mark[n->outputs[o]->id] |= FROM_PARAM;
    }
}

/* TO_LOSS: the loss and the float inputs of nodes computing a TO_LOSS value. */
static void mark_to_loss(struct gf_ad *ad, const struct gf_value *loss)
{
    ad->mark[loss->id] |= TO_LOSS;
    for (struct gf_node *n = ad->g->last; n; n = n->prev) {
        if (is_zero_op(n))
            continue;
        bool any = false;
        for (size_t o = 0; o < n->n_outputs && !any; o++)
            any = n->outputs[o] && (ad->mark[n->outputs[o]->id] & TO_LOSS);
        for (size_t i = 0; any && i < n->n_inputs; i++)
            if (n->inputs[i] && may_differ(n->inputs[i]))
                ad->mark[n->inputs[i]->id] |= TO_LOSS;
    }
}

static bool rule_covers(const struct gf_grad_rule *r, size_t slot)
{
    return (r->inputs >> (slot < 31 ? slot : 31)) & 1u;
}

/* Every node on a path from a parameter to the loss has a rule that
 * differentiates each of its active inputs. */
static enum gf_status check_rules(struct gf_ad *ad, const struct gf_value *loss)
{
    char who[256];
    for (struct gf_node *n = ad->g->first; n; n = n->next) {
        bool out_active = false;
        for (size_t o = 0; o < n->n_outputs && !out_active; o++)
            out_active = active(ad, n->outputs[o]);
        if (!out_active || is_zero_op(n))
            continue;
        const struct gf_grad_rule *r = &gf_grad_rules[n->op];
        if (!r->fn)
            return gf_error(GF_ERR_UNSUPPORTED, "autodiff: %s: no gradient rule for op %s "
                            "(domain '%s'), and it lies between a parameter and the loss '%s'",
                            node_label(n, who, sizeof(who)), n->op_type,
                            n->domain && *n->domain ? n->domain : "ai.onnx", loss->name);
        for (size_t i = 0; i < n->n_inputs; i++)
            if (active(ad, n->inputs[i]) && !rule_covers(r, i))
                return gf_error(GF_ERR_UNSUPPORTED, "autodiff: %s: no gradient for its input "
                                "%zu ('%s'), which depends on a parameter",
                                node_label(n, who, sizeof(who)), i, n->inputs[i]->name);
    }
    return GF_OK;
}

/* ---- the loss and the parameters ------------------------------------------------ */

static bool is_scalar(const struct gf_value *v)
{
    return v->type.kind == GF_TYPE_TENSOR &&
           (v->type.rank == 0 || gf_type_numel(&v->type) == 1);
}

/* The option, else the output named "loss", else the only scalar float
 * output; otherwise an error listing the candidates. */
static enum gf_status find_loss(struct gf_graph *g, const char *name, struct gf_value **loss)
{
    char list[512];
    size_t pos = 0, n = 0;
    if (name && !(*loss = gf_graph_find(g, name)))
        return gf_error(GF_ERR_ARG, "autodiff: the loss '%s' is not a value of the graph", name);
    for (size_t i = 0; !name && i < g->n_outputs; i++)
        if (strcmp(g->outputs[i]->name, "loss") == 0)
            *loss = g->outputs[i];
    bool named = *loss != NULL;
    for (size_t i = 0; !name && !named && i < g->n_outputs; i++) {
        struct gf_value *v = g->outputs[i];
        if (!is_scalar(v) || !is_float(gf_ad_dtype(v)))
            continue;
        n++;
        *loss = v;
        if (pos < sizeof(list))
            pos += (size_t)snprintf(list + pos, sizeof(list) - pos, "%s'%s'", pos ? ", " : "",
                                    v->name);
    }
    if (!name && n > 1)
        return *loss = NULL, gf_error(GF_ERR_ARG, "autodiff: no output is named 'loss' and %zu "
                                      "are scalar floats (%s): say which is the loss", n, list);
    if (!*loss) {
        for (size_t i = 0; i < g->n_outputs && pos < sizeof(list); i++)
            pos += (size_t)snprintf(list + pos, sizeof(list) - pos, "%s'%s'", i ? ", " : "",
                                    g->outputs[i]->name);
        return gf_error(GF_ERR_ARG, "autodiff: no output is named 'loss' and none is a scalar "
                        "float (outputs: %s): say which is the loss", pos ? list : "none");
    }
    if (!is_float(gf_ad_dtype(*loss)))
        return gf_error(GF_ERR_ARG, "autodiff: the loss '%s' is of type %s, not a float type",
                        (*loss)->name, gf_dtype_name(gf_ad_dtype(*loss)));
    return GF_OK;
}

/* Parameters named by the caller: float initializers, each once. */
static enum gf_status mark_named_params(struct gf_ad *ad, const struct gf_autodiff_opts *o)
{
    for (size_t i = 0; i < o->n_params; i++) {
        struct gf_value *v = o->params[i] ? gf_graph_find(ad->g, o->params[i]) : NULL;
        if (!v || !v->init)
            return gf_error(GF_ERR_ARG, "autodiff: parameter '%s' is not an initializer of the "
                            "main graph", o->params[i] ? o->params[i] : "(null)");
        if (!is_float(v->init->dtype))
            return gf_error(GF_ERR_ARG, "autodiff: parameter '%s' is of type %s, not a float "
                            "type", v->name, gf_dtype_name(v->init->dtype));
        if (ad->mark[v->id] & IS_PARAM)
            return gf_error(GF_ERR_ARG, "autodiff: parameter '%s' is named twice", v->name);
        ad->mark[v->id] |= IS_PARAM;
    }
    return GF_OK;
}

/* Default parameters: float initializers of rank >= 1 the loss depends on
 * (rank-0 ones are the scalar constants exporters store: eps, scales). */
static void mark_default_params(struct gf_ad *ad)
{
    for (size_t i = 0; i < ad->g->n_inits; i++) {
        const struct gf_value *v = ad->g->inits[i];
        if (is_float(v->init->dtype) && v->init->rank >= 1 && (ad->mark[v->id] & TO_LOSS))
            ad->mark[v->id] |= IS_PARAM;
    }
}

/* ---- gradient contributions --------------------------------------------------- */

static enum gf_status contrib_add(struct gf_ad *ad, const struct gf_value *v, struct gf_value *g)
{
    struct contrib *c = &ad->grad[v->id];
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 2;
        struct gf_value **p = realloc(c->v, cap * sizeof(*p));
        if (!p)
            return ad->st = gf_error(GF_ERR_NOMEM, "autodiff: out of memory");
        c->v = p;
        c->cap = cap;
    }
    c->v[c->n++] = g;
    return GF_OK;
}

/* A node `op` over in[0..n) writing the given output value. */
static enum gf_status node_into(struct gf_ad *ad, const char *op, size_t n,
                                struct gf_value *const *in, struct gf_value *out)
{
    char name[320];
    snprintf(name, sizeof(name), "%s_grad/%s_%zu", out->name, op, ad->n_made++);
    if (!gf_graph_add_node(ad->g, op, "", name, n, in, 1, &out))
        return ad_broken(ad), ad->st;
    return GF_OK;
}

/* The summed gradient of v (NULL when nothing reached it), kept as its
 * only contribution. */
static struct gf_value *grad_of(struct gf_ad *ad, struct gf_value *v)
{
    char hint[256];
    struct contrib *c = &ad->grad[v->id];
    if (c->n <= 1 || ad->st != GF_OK)
        return c->n ? c->v[0] : NULL;
    snprintf(hint, sizeof(hint), "%s_grad", v->name);
    struct gf_value *s = gf_graph_new_value(ad->g, NULL, hint);
    if (!s)
        return ad_broken(ad);
    if (node_into(ad, c->n == 2 ? "Add" : "Sum", c->n, c->v, s) != GF_OK)
        return NULL;
    c->v[0] = s;
    c->n = 1;
    return s;
}

/* ---- the backward walk ------------------------------------------------------------ */

static bool renamable(const struct gf_ad *ad, const struct gf_value *v);

/* Names dx[i] "<x>_grad" (x: input i) when the rule just made it and
 * nothing reads it yet: its producer writes a fresh value of that name.
 * Only values made by this rule are renamed: an older one may sit in
 * another value's contributions. */
static void name_grad(struct gf_ad *ad, struct gf_value **dx, size_t n, size_t i,
                      const struct gf_value *x, size_t first_new)
{
    char hint[512];
    struct gf_value *d = dx[i];
    if ((size_t)d->id < first_new || !renamable(ad, d) || (ad->mark[x->id] & IS_PARAM))
        return; /* parameters' gradients get their names at the end */
    for (size_t j = 0; j < n; j++)
        if (j != i && dx[j] == d)
            return;
    snprintf(hint, sizeof(hint), "%s_grad", x->name);
    struct gf_value *v = gf_graph_new_value(ad->g, NULL, hint);
    if (v && gf_node_set_output(d->producer, (size_t)d->producer_slot, v) == GF_OK)
        dx[i] = v;
}

struct walk_buf {
    struct gf_value **dy, **dx;
    bool *need;
    size_t cap;
};

static enum gf_status walk_node(struct gf_ad *ad, struct gf_node *n, struct walk_buf *b)
{
    bool any_dy = false, any_need = false;
    ad->cur = n;
    for (size_t k = 0; k < n->n_outputs; k++) {
        b->dy[k] = active(ad, n->outputs[k]) ? grad_of(ad, n->outputs[k]) : NULL;
        any_dy |= b->dy[k] != NULL;
    }
    for (size_t i = 0; i < n->n_inputs; i++) {
        b->need[i] = active(ad, n->inputs[i]);
        any_need |= b->need[i];
        b->dx[i] = NULL;
    }
    if (ad->st != GF_OK || !any_dy || !any_need)
        return ad->st;
    struct gf_value **ins = b->dx + n->n_inputs; /* the inputs, kept: a rule may widen n */
    memcpy(ins, n->inputs, n->n_inputs * sizeof(*ins));
    size_t n_in = n->n_inputs, first_new = ad->g->n_values;
    struct gf_grad_args a = {ad, n, b->dy, b->need, b->dx};
    enum gf_status st = gf_grad_rules[n->op].fn(&a);
    if (st != GF_OK)
        return ad->st = st;
    for (size_t i = 0; i < n_in; i++) {
        if (!b->need[i] || !b->dx[i])
            continue;
        name_grad(ad, b->dx, n_in, i, ins[i], first_new);
        if (contrib_add(ad, ins[i], b->dx[i]) != GF_OK)
            return ad->st;
    }
    return GF_OK;
}

static enum gf_status walk(struct gf_ad *ad, struct gf_node *last)
{
    struct walk_buf b = {0};
    for (struct gf_node *n = ad->g->first; n; n = n->next) {
        size_t k = n->n_inputs > n->n_outputs ? n->n_inputs : n->n_outputs;
        b.cap = k > b.cap ? k : b.cap;
    }
    b.dy = calloc(b.cap + 1, sizeof(*b.dy));
    b.dx = calloc(2 * b.cap + 1, sizeof(*b.dx));
    b.need = calloc(b.cap + 1, sizeof(*b.need));
    if (!b.dy || !b.dx || !b.need)
        ad->st = gf_error(GF_ERR_NOMEM, "autodiff: out of memory");
    for (struct gf_node *n = last, *prev; n && ad->st == GF_OK; n = prev) {
        prev = n->prev;
        if (!is_zero_op(n))
            walk_node(ad, n, &b);
    }
    ad->cur = NULL;
    free(b.dy);
    free(b.dx);
    free(b.need);
    return ad->st;
}

/* ---- fused ops without a rule: through their function body ------------------------ */

/* Grows the per-value arrays to cover every value of the graph. */
static enum gf_status ensure_cap(struct gf_ad *ad)
{
    size_t need = ad->g->n_values;
    if (need <= ad->cap)
        return GF_OK;
    uint8_t *mark = realloc(ad->mark, need);
    struct contrib *grad = mark ? realloc(ad->grad, need * sizeof(*grad)) : NULL;
    struct gf_value **sh = grad ? realloc(ad->shape_of, need * sizeof(*sh)) : NULL;
    ad->mark = mark ? mark : ad->mark;
    ad->grad = grad ? grad : ad->grad;
    ad->shape_of = sh ? sh : ad->shape_of;
    if (!sh)
        return ad->st = gf_error(GF_ERR_NOMEM, "autodiff: out of memory");
    memset(mark + ad->cap, 0, need - ad->cap);
    memset(grad + ad->cap, 0, (need - ad->cap) * sizeof(*grad));
    memset(sh + ad->cap, 0, (need - ad->cap) * sizeof(*sh));
    ad->cap = need;
    return GF_OK;
}

static const struct gf_function *function_of(const struct gf_model *m, const struct gf_node *n)
{
    for (size_t i = 0; i < m->n_functions; i++) {
        const struct gf_function *f = m->functions[i];
        if (strcmp(f->name, n->op_type) == 0 && f->domain && n->domain &&
            strcmp(f->domain, n->domain) == 0)
            return f;
    }
    return NULL;
}

/* Copies body node bn into the main graph (inputs through aux), its
 * outputs fresh values recorded in the body values' aux. */
static struct gf_node *inline_node(struct gf_ad *ad, const struct gf_node *bn)
{
    struct gf_value *in[64], *out[16];
    char hint[256], name[320];
    if (bn->n_inputs > 64 || bn->n_outputs > 16)
        return gf_ad_fail(ad, GF_ERR_UNSUPPORTED, "function body node %s too wide",
                          bn->op_type), NULL;
    for (size_t i = 0; i < bn->n_inputs; i++)
        if ((in[i] = bn->inputs[i] ? bn->inputs[i]->aux : NULL) == NULL && bn->inputs[i])
            return gf_ad_fail(ad, GF_ERR_UNSUPPORTED, "function body reads '%s', which the "
                              "call does not give", bn->inputs[i]->name), NULL;
    value_hint(ad, hint, sizeof(hint));
    for (size_t k = 0; k < bn->n_outputs; k++)
        if (bn->outputs[k] && !(out[k] = bn->outputs[k]->aux = gf_graph_new_value(ad->g, NULL,
                                                                                 hint)))
            return ad_broken(ad);
        else if (!bn->outputs[k])
            out[k] = NULL;
    snprintf(name, sizeof(name), "%s_grad/recompute/%s_%zu", ad->cur->name ? ad->cur->name : "",
             bn->op_type, ad->n_made++);
    struct gf_node *c = gf_graph_add_node(ad->g, bn->op_type, bn->domain, name, bn->n_inputs,
                                          in, bn->n_outputs, out);
    struct gf_attr *attrs = gf_model_alloc(ad->m, (bn->n_attrs + 1) * sizeof(*attrs));
    if (!c || !attrs)
        return ad_broken(ad);
    /* shallow copies, as the fusion pass made the body: payloads are never
     * changed in place */
    if (bn->n_attrs)
        memcpy(attrs, bn->attrs, bn->n_attrs * sizeof(*attrs));
    c->attrs = attrs;
    c->n_attrs = bn->n_attrs;
    return c;
}

/* Marks the recomputed values: FROM_PARAM forward from the call's inputs,
 * TO_LOSS back from the outputs that have a gradient. */
static void mark_inlined(struct gf_ad *ad, struct gf_node **nodes, size_t n,
                         struct gf_value *const *outs, struct gf_value *const *dy, size_t n_out)
{
    for (size_t k = 0; k < n; k++) {
        bool any = false;
        for (size_t i = 0; i < nodes[k]->n_inputs && !is_zero_op(nodes[k]); i++)
            any |= nodes[k]->inputs[i] && (ad->mark[nodes[k]->inputs[i]->id] & FROM_PARAM);
        for (size_t o = 0; any && o < nodes[k]->n_outputs; o++)
            if (nodes[k]->outputs[o] && may_differ(nodes[k]->outputs[o]))
                ad->mark[nodes[k]->outputs[o]->id] |= FROM_PARAM;
    }
    for (size_t o = 0; o < n_out; o++)
        if (outs[o] && dy[o])
            ad->mark[outs[o]->id] |= TO_LOSS;
    for (size_t k = n; k-- > 0;) {
        bool any = false;
        for (size_t o = 0; o < nodes[k]->n_outputs && !is_zero_op(nodes[k]); o++)
            any |= nodes[k]->outputs[o] && (ad->mark[nodes[k]->outputs[o]->id] & TO_LOSS);
        for (size_t i = 0; any && i < nodes[k]->n_inputs; i++) {
            struct gf_value *x = nodes[k]->inputs[i];
            if (x && (size_t)x->id >= ad->n_vals && may_differ(x))
                ad->mark[x->id] |= TO_LOSS;
        }
    }
}

/* Walks the recomputed nodes backwards: their gradients flow into the
 * call's inputs' contributions. */
static enum gf_status walk_inlined(struct gf_ad *ad, struct gf_node **nodes, size_t n)
{
    struct walk_buf b = {.cap = 64};
    b.dy = calloc(b.cap, sizeof(*b.dy));
    b.dx = calloc(2 * b.cap, sizeof(*b.dx));
    b.need = calloc(b.cap, sizeof(*b.need));
    if (!b.dy || !b.dx || !b.need)
        ad->st = gf_error(GF_ERR_NOMEM, "autodiff: out of memory");
    for (size_t k = n; k-- > 0 && ad->st == GF_OK;)
        if (!is_zero_op(nodes[k]))
            walk_node(ad, nodes[k], &b);
    free(b.dy);
    free(b.dx);
    free(b.need);
    return ad->st;
}

/* The fallback of fused ops without a rule of their own: the call's
 * model-local function body (the subgraph the fusion replaced) is copied
 * after the backward nodes made so far, recomputing the forward from the
 * call's inputs, and differentiated with the standard rules.  Exact (the
 * same subgraph); it costs the recomputation until the op gets a backward
 * kernel and a rule. */
enum gf_status gf_grad_inline(struct gf_grad_args *a)
{
    struct gf_ad *ad = a->ad;
    struct gf_node *call = a->n, *nodes[256];
    const struct gf_function *f = function_of(ad->m, call);
    struct gf_value *outs[16] = {NULL};
    size_t n = 0;
    if (!f || f->body->n_nodes > 256 || call->n_outputs > 16 || f->body->n_outputs <
        call->n_outputs || f->body->n_inputs > call->n_inputs)
        return gf_ad_fail(ad, GF_ERR_UNSUPPORTED, "no gradient rule for %s and no function "
                          "body to differentiate through", call->op_type);
    struct gf_graph *b = f->body;
    for (size_t i = 0; i < b->n_values; i++)
        b->values[i]->aux = NULL;
    for (size_t i = 0; i < b->n_inputs; i++)
        b->inputs[i]->aux = call->inputs[i];
    for (struct gf_node *bn = b->first; bn && ad->st == GF_OK; bn = bn->next)
        nodes[n++] = inline_node(ad, bn);
    for (size_t k = 0; k < call->n_outputs && ad->st == GF_OK; k++)
        outs[k] = b->outputs[k]->aux;
    for (size_t i = 0; i < b->n_values; i++)
        b->values[i]->aux = NULL;
    if (ad->st != GF_OK || ensure_cap(ad) != GF_OK ||
        (ad->st = gf_graph_infer_shapes(ad->g)) != GF_OK)
        return ad->st;
    mark_inlined(ad, nodes, n, outs, a->dy, call->n_outputs);
    for (size_t k = 0; k < call->n_outputs; k++)
        if (outs[k] && a->dy[k] && contrib_add(ad, outs[k], a->dy[k]) != GF_OK)
            return ad->st;
    walk_inlined(ad, nodes, n);
    ad->cur = call;
    return ad->st;
}

/* d loss / d loss = 1, shaped like the loss. */
static enum gf_status seed(struct gf_ad *ad, struct gf_value *loss)
{
    enum gf_dtype dt = gf_ad_dtype(loss);
    struct gf_value *one = NULL;
    if (loss->type.rank == 0) {
        one = gf_ad_scalar(ad, dt, 1.0);
    } else {
        struct gf_tensor *t = gf_tensor_new(ad->m, NULL, dt, 1, (int64_t[]){1},
                                            dt == GF_DOUBLE ? (void *)&(double){1}
                                                            : (void *)&(float){1});
        one = gf_ad_op1(ad, "ConstantOfShape", gf_ad_shape(ad, loss));
        if (one && (!t || gf_node_set_attr_tensor(one->producer, "value", t) != GF_OK))
            return ad_broken(ad), ad->st;
    }
    return one ? contrib_add(ad, loss, one) : ad->st;
}

/* ---- parameter gradients as graph outputs --------------------------------------- */

/* A value this pass made that nothing reads yet: its producer can write
 * the named output instead (no Identity needed). */
static bool renamable(const struct gf_ad *ad, const struct gf_value *v)
{
    return (size_t)v->id >= ad->n_vals && v->producer && gf_value_use_count(v) == 0 &&
           !v->is_output;
}

/* The graph output "<p>_grad" holding the summed gradient of parameter p
 * (zeros when the loss does not depend on it). */
static struct gf_value *param_grad(struct gf_ad *ad, struct gf_value *p,
                                   struct gf_value **params, size_t n_params)
{
    char name[512];
    struct contrib *c = &ad->grad[p->id];
    snprintf(name, sizeof(name), "%s_grad", p->name);
    struct gf_value *out = gf_graph_new_value(ad->g, gf_graph_unique_name(ad->g, name), NULL);
    if (!out)
        return ad_broken(ad);
    if (c->n == 0) {
        struct gf_value *z = gf_ad_zeros_like(ad, p);
        if (z && gf_node_set_output(z->producer, 0, out) != GF_OK)
            return ad_broken(ad);
    } else if (c->n >= 2) {
        node_into(ad, c->n == 2 ? "Add" : "Sum", c->n, c->v, out);
    } else if (renamable(ad, c->v[0])) {
        struct gf_value *old = c->v[0];
        if (gf_node_set_output(old->producer, (size_t)old->producer_slot, out) != GF_OK)
            return ad_broken(ad);
        /* another parameter may hold the same value (Add(p, q) gives both g) */
        for (size_t i = 0; i < n_params; i++)
            for (size_t k = 0; k < ad->grad[params[i]->id].n; k++)
                if (ad->grad[params[i]->id].v[k] == old)
                    ad->grad[params[i]->id].v[k] = out;
    } else {
        node_into(ad, "Identity", 1, c->v, out);
    }
    return ad->st == GF_OK ? out : NULL;
}

static enum gf_status finish(struct gf_ad *ad, const struct gf_autodiff_opts *o,
                             struct gf_value *loss, struct gf_autodiff_result *r)
{
    size_t n = 0;
    for (size_t i = 0; i < ad->n_vals; i++)
        n += (ad->mark[i] & IS_PARAM) != 0;
    r->loss = loss;
    r->n_params = n;
    r->params = gf_model_alloc(ad->m, (n + 1) * sizeof(*r->params));
    r->grads = gf_model_alloc(ad->m, (n + 1) * sizeof(*r->grads));
    if (!r->params || !r->grads)
        return ad->st = gf_error(GF_ERR_NOMEM, "autodiff: out of memory");
    n = 0; /* in the caller's order, else in initializer (file) order */
    for (size_t i = 0; o && i < o->n_params; i++)
        r->params[n++] = gf_graph_find(ad->g, o->params[i]);
    for (size_t i = 0; !(o && o->n_params) && i < ad->g->n_inits; i++) {
        const struct gf_value *v = ad->g->inits[i]; /* the pass's constants come last */
        if ((size_t)v->id < ad->n_vals && (ad->mark[v->id] & IS_PARAM))
            r->params[n++] = ad->g->inits[i];
    }
    for (size_t i = 0; i < n && ad->st == GF_OK; i++) {
        struct gf_value *p = r->params[i];
        if (!(r->grads[i] = param_grad(ad, p, r->params, n)))
            break;
        if (gf_graph_add_output(ad->g, r->grads[i]) != GF_OK ||
            (!p->is_input && gf_graph_add_input(ad->g, p) != GF_OK))
            return ad_broken(ad), ad->st;
    }
    if (ad->st == GF_OK && ad->used_graphfuse && gf_model_opset(ad->m, "graphfuse") == 0)
        ad->st = gf_model_set_opset(ad->m, "graphfuse", 1);
    if (ad->st == GF_OK)
        ad->st = gf_graph_infer_shapes(ad->g);
    return ad->st;
}

/* ---- the pass -------------------------------------------------------------------- */

static void ad_free(struct gf_ad *ad)
{
    for (size_t i = 0; ad->grad && i < ad->cap; i++)
        free(ad->grad[i].v);
    free(ad->grad);
    free(ad->mark);
    free(ad->shape_of);
    free(ad->consts);
}

static enum gf_status choose(struct gf_ad *ad, const struct gf_autodiff_opts *o,
                             struct gf_value **loss)
{
    enum gf_status st = find_loss(ad->g, o ? o->loss : NULL, loss);
    if (st != GF_OK)
        return st;
    if (o && o->n_params) {
        if ((st = mark_named_params(ad, o)) != GF_OK)
            return st;
        mark_to_loss(ad, *loss);
    } else {
        mark_to_loss(ad, *loss);
        mark_default_params(ad);
    }
    mark_from_params(ad);
    if ((st = check_rules(ad, *loss)) != GF_OK)
        return st;
    /* parameters are variables from now on: not constants to rules */
    for (size_t i = 0; i < ad->n_vals; i++)
        if ((ad->mark[i] & IS_PARAM) && !ad->g->values[i]->is_input &&
            (st = gf_graph_add_input(ad->g, ad->g->values[i])) != GF_OK)
            return st;
    return GF_OK;
}

enum gf_status gf_pass_autodiff(struct gf_model *m, const struct gf_autodiff_opts *o,
                                struct gf_autodiff_result *r)
{
    struct gf_autodiff_result dummy;
    if (!r)
        r = &dummy;
    memset(r, 0, sizeof(*r));
    if (!m || !m->graph)
        return gf_error(GF_ERR_ARG, "autodiff: no model");
    struct gf_ad ad = {.m = m, .g = m->graph, .opset = gf_model_opset(m, "")};
    if (ad.opset <= 0)
        ad.opset = 23;
    enum gf_status st = gf_graph_infer_shapes(ad.g);
    if (st != GF_OK)
        return st;
    ad.n_vals = ad.cap = ad.g->n_values;
    ad.mark = calloc(ad.n_vals + 1, 1);
    ad.grad = calloc(ad.n_vals + 1, sizeof(*ad.grad));
    ad.shape_of = calloc(ad.n_vals + 1, sizeof(*ad.shape_of));
    if (!ad.mark || !ad.grad || !ad.shape_of) {
        ad_free(&ad);
        return gf_error(GF_ERR_NOMEM, "autodiff: out of memory");
    }
    struct gf_value *loss = NULL;
    struct gf_node *last = ad.g->last;
    if ((st = choose(&ad, o, &loss)) == GF_OK && (st = seed(&ad, loss)) == GF_OK &&
        (st = walk(&ad, last)) == GF_OK)
        st = finish(&ad, o, loss, r);
    ad_free(&ad);
    return st;
}
