/*
 * Precision is a pass (DESIGN.md): --precision bf16|fp16 rewrites the graph
 * with the policy of PyTorch's autocast, and kernels honour the dtypes they
 * are given.  Every float node falls in one of three classes:
 *
 *   low     MatMul, Gemm, Einsum, MatMulEpilogue, Attention: every float
 *           input is cast to the low type (bf16 / fp16), the kernels
 *           accumulate in fp32 and store the outputs in the low type
 *           (autocast's "lower_precision_fp" list);
 *   fp32    norms, softmax, the losses, reductions, pow / exp / log /
 *           reciprocal / softplus (autocast's fp32 list), LinearCrossEntropy
 *           (its chunked logits never leave the kernel, which keeps them in
 *           fp32), and every op this file does not know: low inputs are cast
 *           to fp32, outputs stay fp32;
 *   follow  everything else (elementwise, activations, layout): runs in
 *           the type of its inputs, with torch's type promotion when they
 *           differ: fp32 wins over the low type, except for inputs of rank 0
 *           (torch's wrapped numbers: eps, scales, -inf fills), which take
 *           the others' type, and a bias added to a low op's product
 *           (Linear's MatMul + Add: autocast casts the bias with the GEMM),
 *           cast to the low type.  RoPE's cos / sin follow x.
 *
 *        W (fp32 initializer)                    X (fp32)
 *            │                                     │
 *          Cast(bf16)  one per value, shared     Cast(bf16)
 *            └──────────────► MatMul ◄─────────────┘
 *                               │ bf16 (fp32 accumulation)
 *                             Cast(fp32) ─► Softmax / norm / loss
 *
 * Parameters stay fp32 masters read through Cast nodes, so autodiff's Cast
 * rule hands back fp32 gradients.  Graph inputs and outputs keep their
 * dtypes: an output computed in the low type gets a Cast back under its
 * own name.  A Cast chain that widens exactly and narrows back to the
 * source type is folded.  The pass is idempotent.  bf16 needs Cast-19's
 * rounding (Cast-13 keeps the top 16 bits); a model of ai.onnx opset
 * 13..18 is raised to 19, its Reduce* axes attributes becoming inputs.
 */
#include <stdlib.h>
#include <string.h>

#include "gf_passes.h"

static const char *const names[] = {"fp32", "tf32", "bf16", "fp16"};

const char *gf_precision_name(enum gf_precision p)
{
    return (unsigned)p < 4 ? names[p] : "?";
}

bool gf_precision_parse(const char *s, enum gf_precision *p)
{
    for (int i = 0; s && i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *p = (enum gf_precision)i;
            return true;
        }
    return false;
}

enum gf_precision gf_model_precision(const struct gf_model *m)
{
    enum gf_precision p = GF_PRECISION_FP32;
    for (size_t i = 0; m && i < m->n_metadata; i++)
        if (strcmp(m->metadata[i].key, GF_PRECISION_KEY) == 0 &&
            gf_precision_parse(m->metadata[i].value, &p))
            break;
    return p;
}

/* ---- the policy --------------------------------------------------------------- */

enum cls { C_SKIP, C_LOW, C_FP32, C_FOLLOW };

static bool is_float(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

static bool float_value(const struct gf_value *v)
{
    return v && v->type.kind == GF_TYPE_TENSOR && is_float(v->type.dtype);
}

static enum cls classify(const struct gf_node *n)
{
    switch (n->op) {
    case GF_OP_MATMUL: case GF_OP_GEMM: case GF_OP_EINSUM: case GF_OP_MATMUL_EPILOGUE:
    case GF_OP_ATTENTION:
        return C_LOW;
    /* the casts themselves, and ops that make values of a type they are told */
    case GF_OP_CAST: case GF_OP_CAST_LIKE: case GF_OP_CONSTANT: case GF_OP_CONSTANT_OF_SHAPE:
        return C_SKIP;
    /* elementwise and activations: the dtype of their inputs */
    case GF_OP_ADD: case GF_OP_SUB: case GF_OP_MUL: case GF_OP_DIV: case GF_OP_SQRT:
    case GF_OP_NEG: case GF_OP_ABS: case GF_OP_SIN: case GF_OP_COS: case GF_OP_TANH:
    case GF_OP_SIGMOID: case GF_OP_RELU: case GF_OP_LEAKY_RELU: case GF_OP_ELU:
    case GF_OP_SELU: case GF_OP_SOFTSIGN: case GF_OP_HARD_SIGMOID: case GF_OP_HARD_SWISH:
    case GF_OP_ERF: case GF_OP_GELU: case GF_OP_FLOOR: case GF_OP_CEIL: case GF_OP_ROUND:
    case GF_OP_SIGN: case GF_OP_IS_NAN: case GF_OP_IS_INF: case GF_OP_CLIP: case GF_OP_MAX:
    case GF_OP_MIN: case GF_OP_MEAN: case GF_OP_SUM: case GF_OP_WHERE: case GF_OP_EQUAL:
    case GF_OP_LESS: case GF_OP_LESS_OR_EQUAL: case GF_OP_GREATER:
    case GF_OP_GREATER_OR_EQUAL: case GF_OP_IDENTITY: case GF_OP_DROPOUT:
    case GF_OP_SWIGLU: case GF_OP_GEGLU: case GF_OP_SILU: case GF_OP_FUSED_GELU:
    case GF_OP_ROPE:
    /* layout: moves elements, any type */
    case GF_OP_SHAPE: case GF_OP_SIZE: case GF_OP_TRANSPOSE: case GF_OP_RESHAPE:
    case GF_OP_FLATTEN: case GF_OP_SQUEEZE: case GF_OP_UNSQUEEZE: case GF_OP_CONCAT:
    case GF_OP_SPLIT: case GF_OP_SLICE: case GF_OP_GATHER: case GF_OP_GATHER_ELEMENTS:
    case GF_OP_GATHER_ND: case GF_OP_SCATTER_ND: case GF_OP_SCATTER_ELEMENTS:
    case GF_OP_EXPAND: case GF_OP_TILE: case GF_OP_PAD: case GF_OP_TRILU:
    case GF_OP_REDUCE_MAX: case GF_OP_REDUCE_MIN: case GF_OP_ARG_MAX: case GF_OP_ARG_MIN:
    case GF_OP_TOP_K:
        return C_FOLLOW;
    default: /* softmax, norms, losses, reductions, pow/exp/log, unknown ops */
        return C_FP32;
    }
}

/* ---- casts, one per (value, type) --------------------------------------------------- */

struct prec {
    struct gf_graph *g;
    enum gf_dtype low;
    struct gf_precision_stats *st;
};

/* value->aux during the pass: its Casts to low (0) and to fp32 (1), and
 * whether it is made of integers turned float (positions) */
struct cast_slot {
    struct gf_value *to[2];
    bool positional;
};

static struct cast_slot *slot_of(struct gf_value *v)
{
    if (!v->aux)
        v->aux = gf_model_alloc(v->graph->model, sizeof(struct cast_slot));
    return v->aux;
}

static int slot_index(enum gf_dtype t)
{
    return t == GF_FLOAT ? 1 : 0;
}

/* Records cast c (a Cast node between float types) in the cache: its
 * output is its input in type `to`, and a widening cast's input is its
 * output back in the source type. */
static void remember(struct prec *p, struct gf_node *c)
{
    struct gf_value *x = c->inputs[0], *y = c->outputs[0];
    if (!float_value(x) || !float_value(y) || !slot_of(x) || !slot_of(y))
        return;
    enum gf_dtype from = x->type.dtype, to = y->type.dtype;
    if ((from != GF_FLOAT && from != p->low) || (to != GF_FLOAT && to != p->low) || from == to)
        return;
    struct cast_slot *sx = x->aux, *sy = y->aux;
    if (!sx->to[slot_index(to)])
        sx->to[slot_index(to)] = y;
    if (from != GF_FLOAT && to == GF_FLOAT && !sy->to[slot_index(from)])
        sy->to[slot_index(from)] = x; /* widening is exact: narrowing undoes it */
}

/* v in type `to`: v itself, a cached Cast, or a new Cast node placed right
 * after v's producer (before the graph's first node for inputs and
 * initializers), so that it precedes every reader. */
static struct gf_value *cast_to(struct prec *p, struct gf_value *v, enum gf_dtype to)
{
    if (v->type.dtype == to)
        return v;
    struct cast_slot *s = slot_of(v);
    if (!s)
        return NULL;
    if (s->to[slot_index(to)])
        return s->to[slot_index(to)];
    char hint[256];
    snprintf(hint, sizeof(hint), "%s_%s", v->name, to == GF_FLOAT ? "fp32" : gf_dtype_name(to));
    struct gf_value *y = gf_graph_new_value(p->g, NULL, hint);
    if (!y)
        return NULL;
    gf_value_set_tensor_type(y, to, v->type.rank, v->type.dims);
    struct gf_node *c = gf_graph_add_node(p->g, "Cast", "", y->name, 1, &v, 1, &y);
    if (!c || gf_node_set_attr_int(c, "to", to) != GF_OK)
        return NULL;
    struct gf_node *after = v->producer && v->graph == p->g ? v->producer->next : p->g->first;
    if (after != c)
        gf_node_move_before(c, after);
    remember(p, c);
    if (p->st)
        p->st->casts++;
    return y;
}

/* Positions (integers made float, and what follow-class ops make of them)
 * must not be rounded: bf16 holds integers exactly only up to 256.  A
 * matmul reading one (RoPE's inv_freq x positions; HF computes it with
 * autocast off) stays fp32. */
static bool positional(const struct gf_value *v)
{
    return v && v->aux && ((const struct cast_slot *)v->aux)->positional;
}

static void mark_positional(const struct gf_node *n)
{
    bool pos = false;
    if (n->op == GF_OP_CAST || n->op == GF_OP_CAST_LIKE)
        pos = n->inputs[0] && n->inputs[0]->type.kind == GF_TYPE_TENSOR &&
              !is_float(n->inputs[0]->type.dtype) && n->inputs[0]->type.dtype != GF_DOUBLE;
    bool mixed = false; /* meets an activation: no longer positions */
    for (size_t i = 0; i < n->n_inputs; i++) {
        const struct gf_value *v = n->inputs[i];
        pos |= positional(v);
        mixed |= float_value(v) && !positional(v) && !gf_value_constant(v);
    }
    pos &= !mixed;
    for (size_t i = 0; pos && i < n->n_outputs; i++)
        if (float_value(n->outputs[i]) && slot_of(n->outputs[i]))
            ((struct cast_slot *)n->outputs[i]->aux)->positional = true;
}

/* ---- the rewrite ----------------------------------------------------------------------- */

/* A float input that is a rank-0 scalar: torch's wrapped number, which
 * takes the type of the tensors it meets. */
static bool scalar(const struct gf_value *v)
{
    return v->type.rank == 0;
}

/* An initializer or Constant (possibly through Casts; a trained one may
 * be a graph input too) of rank <= 1: Linear's bias. */
static bool bias_const(const struct gf_value *v)
{
    while (v->producer && v->producer->op == GF_OP_CAST)
        v = v->producer->inputs[0];
    return (v->init || gf_value_constant(v)) && v->type.rank >= 0 && v->type.rank <= 1;
}

static bool low_product(const struct gf_value *v)
{
    return v->producer && classify(v->producer) == C_LOW;
}

/* The type a follow-class node computes in; GF_UNDEFINED: leave it. */
static enum gf_dtype follow_type(struct prec *p, const struct gf_node *n)
{
    bool any_low = false, any_fp32 = false, tensors = false;
    for (int pass = 0; pass < 2 && !tensors; pass++) /* tensors first; scalars if none */
        for (size_t i = 0; i < n->n_inputs; i++) {
            const struct gf_value *v = n->inputs[i];
            if (!float_value(v) || (pass == 0 && scalar(v)))
                continue;
            if ((n->op == GF_OP_ROPE || n->op == GF_OP_DROPOUT) && i > 0)
                continue; /* RoPE's cos / sin follow x; Dropout's ratio is its own type */
            tensors = pass == 0;
            any_low |= v->type.dtype == p->low;
            any_fp32 |= v->type.dtype == GF_FLOAT;
        }
    if (!any_low)
        return GF_UNDEFINED; /* nothing low reaches it: unchanged */
    if (!any_fp32)
        return p->low;
    /* Linear's bias: Add(low product, fp32 constant vector) stays low */
    if ((n->op == GF_OP_ADD || n->op == GF_OP_SUB) && n->n_inputs == 2 &&
        float_value(n->inputs[0]) && float_value(n->inputs[1]))
        for (int k = 0; k < 2; k++)
            if (low_product(n->inputs[k]) && bias_const(n->inputs[1 - k]))
                return p->low;
    return GF_FLOAT;
}

static enum gf_status set_input_type(struct prec *p, struct gf_node *n, size_t i,
                                     enum gf_dtype to)
{
    struct gf_value *v = n->inputs[i];
    if (!float_value(v) || v->type.dtype == to)
        return GF_OK;
    struct gf_value *c = cast_to(p, v, to);
    if (!c)
        return gf_error(GF_ERR_NOMEM, "precision: no Cast for '%s'", v->name);
    gf_node_set_input(n, i, c);
    return GF_OK;
}

/* Output float values of a node that computed in fp32 and now computes in
 * `to` (layout ops carry any type; Shape's int64 and bool outputs stay). */
static void retype_outputs(struct gf_node *n, enum gf_dtype to)
{
    for (size_t i = 0; i < n->n_outputs; i++) {
        struct gf_value *y = n->outputs[i];
        if (y && y->type.kind == GF_TYPE_TENSOR && y->type.dtype == GF_FLOAT)
            y->type.dtype = to;
    }
}

static enum gf_status rewrite_node(struct prec *p, struct gf_node *n)
{
    enum cls c = classify(n);
    enum gf_status st = GF_OK;
    for (size_t i = 0; c == C_LOW && i < n->n_inputs; i++)
        if (positional(n->inputs[i]))
            c = C_FP32;
    if (c == C_SKIP || c == C_FOLLOW)
        mark_positional(n);
    if (c == C_SKIP)
        return GF_OK;
    if (c == C_LOW) {
        bool any = false;
        for (size_t i = 0; i < n->n_inputs; i++)
            any |= float_value(n->inputs[i]) && n->inputs[i]->type.dtype != GF_DOUBLE;
        if (!any)
            return GF_OK;
        for (size_t i = 0; st == GF_OK && i < n->n_inputs; i++)
            st = set_input_type(p, n, i, p->low);
        retype_outputs(n, p->low);
        if (p->st)
            p->st->low_ops++;
        return st;
    }
    if (c == C_FP32) {
        for (size_t i = 0; st == GF_OK && i < n->n_inputs; i++)
            if (n->inputs[i] && n->inputs[i]->type.dtype == p->low) {
                st = set_input_type(p, n, i, GF_FLOAT);
                if (p->st)
                    p->st->fp32_inputs++;
            }
        return st;
    }
    enum gf_dtype t = follow_type(p, n);
    if (t == GF_UNDEFINED)
        return GF_OK;
    for (size_t i = 0; st == GF_OK && i < n->n_inputs; i++)
        if (n->op != GF_OP_DROPOUT || i == 0)
            st = set_input_type(p, n, i, t);
    if (t == p->low)
        retype_outputs(n, p->low);
    return st;
}

/* Graph outputs keep their declared type: one computed in the low type is
 * renamed "<name>_<low>" and cast back under its own name. */
static enum gf_status restore_output(struct prec *p, struct gf_value *v)
{
    struct gf_node *n = v->producer;
    if (!n || v->type.dtype != p->low)
        return GF_OK;
    char hint[256];
    snprintf(hint, sizeof(hint), "%s_%s", v->name, gf_dtype_name(p->low));
    struct gf_value *lv = gf_graph_new_value(p->g, NULL, hint);
    if (!lv)
        return gf_error(GF_ERR_NOMEM, "precision: out of memory");
    gf_value_set_tensor_type(lv, p->low, v->type.rank, v->type.dims);
    /* readers inside the graph read the low value (implicit subgraph uses
     * stay: the value keeps its name) */
    for (size_t k = v->n_uses; k-- > 0;) {
        struct gf_use u = v->uses[k];
        if (u.slot >= 0 && k < v->n_uses)
            gf_node_set_input(u.node, (size_t)u.slot, lv);
    }
    int slot = v->producer_slot;
    enum gf_status st = gf_node_set_output(n, (size_t)slot, lv);
    if (st != GF_OK)
        return st;
    v->type.dtype = GF_FLOAT;
    struct gf_node *c = gf_graph_add_node(p->g, "Cast", "", v->name, 1, &lv, 1, &v);
    if (!c || gf_node_set_attr_int(c, "to", GF_FLOAT) != GF_OK)
        return gf_error(GF_ERR_NOMEM, "precision: out of memory");
    if (n->next != c)
        gf_node_move_before(c, n->next);
    if (p->st)
        p->st->casts++;
    return GF_OK;
}

/* ---- widening Casts moved above exact ops ------------------------------------------------
 * An op that only moves elements or flips their sign is exact in any float
 * type, so a widening Cast commutes with it: Cast(op(x) -> fp32) is
 * op(Cast(x -> fp32)).  When a low op's outputs are read only by such
 * Casts (and by Shape / Size, which read no value), the op computes in fp32 on the widened inputs instead (one Cast
 * per input value, shared with the other readers of that value) and its
 * Casts go; repeated up the chain.  The point is RoPE: q*cos is fp32
 * (cos fp32 wins) and reads Cast(q), while rotate_half(q) (Slice, Neg,
 * Concat; follow class) was computed in the low type and then cast for
 * rot*sin.  Afterwards both read the one Cast(q): the fp32 rotary form,
 * which the rope pattern fuses, with the same values. */
static bool exact_op(const struct gf_node *n, size_t *n_data)
{
    switch (n->op) {
    case GF_OP_CONCAT:
        *n_data = n->n_inputs;
        return true;
    case GF_OP_NEG: case GF_OP_SLICE: case GF_OP_SPLIT: case GF_OP_TRANSPOSE:
    case GF_OP_RESHAPE: case GF_OP_FLATTEN: case GF_OP_SQUEEZE: case GF_OP_UNSQUEEZE:
    case GF_OP_IDENTITY: case GF_OP_EXPAND:
        *n_data = 1;
        return true;
    default:
        return false;
    }
}

/* c is Cast(low -> fp32), not a graph output. */
static bool widening_cast(const struct prec *p, const struct gf_node *c)
{
    return c->op == GF_OP_CAST && c->n_inputs == 1 && c->inputs[0] && c->n_outputs == 1 &&
           c->outputs[0] && !c->outputs[0]->is_output && c->inputs[0]->type.dtype == p->low &&
           c->outputs[0]->type.dtype == GF_FLOAT;
}

/* y's one widening Cast when its other readers only read its shape (Shape,
 * Size: the Reshape targets of exports); NULL otherwise. */
static struct gf_node *widened_by(const struct prec *p, const struct gf_value *y)
{
    struct gf_node *c = NULL;
    for (size_t u = 0; u < y->n_uses; u++) {
        struct gf_node *r = y->uses[u].node;
        if (y->uses[u].slot < 0)
            return NULL;
        if (r->op == GF_OP_SHAPE || r->op == GF_OP_SIZE)
            continue;
        if (c || !widening_cast(p, r))
            return NULL;
        c = r;
    }
    return c;
}

/* Each output of n: low, no graph output, widened by one Cast. */
static bool only_widened(const struct prec *p, const struct gf_node *n)
{
    for (size_t i = 0; i < n->n_outputs; i++) {
        const struct gf_value *y = n->outputs[i];
        if (!y || y->is_output || y->type.dtype != p->low || !widened_by(p, y))
            return false;
    }
    return n->n_outputs > 0;
}

static enum gf_status hoist_casts(struct prec *p)
{
    for (struct gf_node *n = p->g->last; n; n = n->prev) {
        size_t n_data = 0;
        if (!exact_op(n, &n_data) || !only_widened(p, n))
            continue;
        bool low_in = true;
        for (size_t i = 0; i < n_data; i++)
            low_in &= !n->inputs[i] || n->inputs[i]->type.dtype == p->low;
        if (!low_in)
            continue;
        for (size_t i = 0; i < n_data; i++)
            if (n->inputs[i] && set_input_type(p, n, i, GF_FLOAT) != GF_OK)
                return gf_error(GF_ERR_NOMEM, "precision: out of memory");
        for (size_t i = 0; i < n->n_outputs; i++) {
            struct gf_value *y = n->outputs[i], *wide = widened_by(p, y)->outputs[0];
            y->type.dtype = GF_FLOAT;
            gf_value_replace_uses(wide, y); /* the Cast is left without readers */
        }
        if (p->st)
            p->st->hoisted++;
        /* the input Casts were placed before n: the walk goes on through them */
    }
    return GF_OK;
}

/* The model's own Casts between float types (HF's logits.float(): a no-op in
 * the fp32 graph, which cleanup drops, a widening one now) keep the exporter's
 * symbols for their output (Castlogits_dim_0, ...), which shape inference
 * leaves; a Cast keeps its input's shape, so it gets the input's dims and the
 * patterns that compare them (the shifted loss: logits and labels of the same
 * batch and sequence) see one shape. */
static void cast_shapes(struct prec *p)
{
    for (struct gf_node *n = p->g->first; n; n = n->next) {
        if (n->op != GF_OP_CAST || n->n_inputs != 1 || !n->inputs[0] || !n->outputs[0])
            continue;
        struct gf_value *x = n->inputs[0], *y = n->outputs[0];
        if (!float_value(x) || !float_value(y) || x->type.rank < 0 ||
            (y->type.rank >= 0 && y->type.rank != x->type.rank))
            continue;
        gf_value_set_tensor_type(y, y->type.dtype, x->type.rank, x->type.dims);
    }
}

/* Cast(Cast(x: low -> fp32) -> low) is x: readers read x, and Casts left
 * without readers go. */
static void fold_casts(struct prec *p)
{
    for (struct gf_node *n = p->g->first; n; n = n->next) {
        if (n->op != GF_OP_CAST || n->outputs[0]->is_output)
            continue;
        struct gf_value *y = n->outputs[0], *m = n->inputs[0];
        struct gf_node *c1 = m ? m->producer : NULL;
        if (!c1 || c1->op != GF_OP_CAST || !float_value(y) || !float_value(c1->inputs[0]))
            continue;
        struct gf_value *x = c1->inputs[0];
        if (x->type.dtype == y->type.dtype && gf_dtype_size(m->type.dtype) >
                                                  gf_dtype_size(x->type.dtype)) {
            gf_value_replace_uses(y, x);
            if (p->st)
                p->st->folded++;
        }
    }
    for (struct gf_node *n = p->g->last, *prev; n; n = prev) { /* readers first */
        prev = n->prev;
        if (n->op == GF_OP_CAST && !n->outputs[0]->is_output && !gf_value_use_count(n->outputs[0]))
            gf_graph_remove_node(p->g, n);
    }
}

/* Reduce* (not ReduceSum) take axes as an input from opset 18 on. */
static bool axes_become_input(const struct gf_node *n)
{
    switch (n->op) {
    case GF_OP_REDUCE_MEAN: case GF_OP_REDUCE_MAX: case GF_OP_REDUCE_MIN:
    case GF_OP_REDUCE_PROD: case GF_OP_REDUCE_L1: case GF_OP_REDUCE_L2:
    case GF_OP_REDUCE_SUM_SQUARE: case GF_OP_REDUCE_LOG_SUM_EXP:
        return true;
    default:
        return strcmp(n->op_type, "ReduceLogSum") == 0 && (!n->domain || !*n->domain);
    }
}

/* bf16 casts round to nearest even from Cast-19 on: raise opset 13..18 to
 * 19.  The ops that changed incompatibly in between are the Reduce* of
 * opset 18 (axes attribute -> input); every other change adds. */
static enum gf_status raise_opset(struct gf_model *m)
{
    int64_t v = gf_model_opset(m, "");
    if (v >= 19 || v < 13)
        return GF_OK;
    struct gf_graph *g = m->graph;
    for (struct gf_node *n = g->first; n; n = n->next) {
        size_t k;
        const int64_t *axes = gf_node_attr_ints(n, "axes", &k);
        if (!axes_become_input(n) || !gf_node_attr(n, "axes"))
            continue;
        int64_t len = (int64_t)k;
        struct gf_tensor *t = gf_tensor_new(m, NULL, GF_INT64, 1, &len, axes);
        char hint[256];
        snprintf(hint, sizeof(hint), "%s_axes", n->outputs[0] ? n->outputs[0]->name : "reduce");
        struct gf_value *a = t ? gf_graph_add_initializer(g, gf_graph_unique_name(g, hint), t)
                               : NULL;
        if (!a)
            return gf_error(GF_ERR_NOMEM, "precision: out of memory");
        struct gf_value *ins[2] = {n->inputs[0], a};
        enum gf_status st = gf_node_set_inputs(n, 2, ins);
        if (st != GF_OK)
            return st;
        size_t j = 0; /* drop the attribute (arena memory: nothing to free) */
        for (size_t i = 0; i < n->n_attrs; i++)
            if (strcmp(n->attrs[i].name, "axes") != 0)
                n->attrs[j++] = n->attrs[i];
        n->n_attrs = j;
    }
    return gf_model_set_opset(m, "", 19);
}

static enum gf_status set_metadata(struct gf_model *m, enum gf_precision prec)
{
    for (size_t i = 0; i < m->n_metadata; i++)
        if (strcmp(m->metadata[i].key, GF_PRECISION_KEY) == 0) {
            m->metadata[i].value = gf_precision_name(prec);
            return GF_OK;
        }
    struct gf_kv *kv = gf_model_alloc(m, (m->n_metadata + 1) * sizeof(*kv));
    if (!kv)
        return gf_error(GF_ERR_NOMEM, "precision: out of memory");
    if (m->n_metadata)
        memcpy(kv, m->metadata, m->n_metadata * sizeof(*kv));
    kv[m->n_metadata++] = (struct gf_kv){GF_PRECISION_KEY, gf_precision_name(prec)};
    m->metadata = kv;
    return GF_OK;
}

enum gf_status gf_pass_precision(struct gf_model *m, enum gf_precision prec,
                                 struct gf_precision_stats *st)
{
    if (st)
        memset(st, 0, sizeof(*st));
    if ((unsigned)prec > GF_PRECISION_FP16)
        return gf_error(GF_ERR_ARG, "precision: unknown precision %d", (int)prec);
    if (prec == GF_PRECISION_FP32)
        return GF_OK;
    struct gf_graph *g = m->graph;
    /* a subgraph may read any value of the main graph by name: its types
     * would change under it (checked first: the model is left unchanged) */
    for (struct gf_node *n = g->first; prec != GF_PRECISION_TF32 && n; n = n->next)
        for (size_t i = 0; i < n->n_attrs; i++)
            if (n->attrs[i].type == GF_ATTR_GRAPH || n->attrs[i].type == GF_ATTR_GRAPHS)
                return gf_error(GF_ERR_UNSUPPORTED, "precision: node '%s' (%s) has a subgraph; "
                                "graphs with control flow are not rewritten yet",
                                n->name ? n->name : "", n->op_type);
    enum gf_status s = set_metadata(m, prec);
    if (s != GF_OK || prec == GF_PRECISION_TF32)
        return s; /* tf32: fp32 graph; CUDA may use TF32 tensor cores */
    struct prec p = {g, prec == GF_PRECISION_BF16 ? GF_BFLOAT16 : GF_FLOAT16, st};
    if (p.low == GF_BFLOAT16 && (s = raise_opset(m)) != GF_OK)
        return s;
    if ((s = gf_graph_infer_shapes(g)) != GF_OK)
        return s;
    for (size_t i = 0; i < g->n_values; i++)
        g->values[i]->aux = NULL;
    for (struct gf_node *n = g->first; n; n = n->next)
        if (n->op == GF_OP_CAST && n->n_inputs == 1 && n->inputs[0] && n->outputs[0])
            remember(&p, n);
    /* nodes are only ever inserted before the one being rewritten */
    for (struct gf_node *n = g->first; n && s == GF_OK; n = n->next)
        s = rewrite_node(&p, n);
    for (size_t i = 0; s == GF_OK && i < g->n_outputs; i++)
        s = restore_output(&p, g->outputs[i]);
    if (s == GF_OK)
        s = hoist_casts(&p);
    if (s == GF_OK)
        cast_shapes(&p);
    if (s == GF_OK)
        fold_casts(&p);
    for (size_t i = 0; i < g->n_values; i++)
        g->values[i]->aux = NULL;
    if (s == GF_OK)
        s = gf_graph_infer_shapes(g);
    if (s != GF_OK)
        gf_error_prefix("precision");
    return s;
}

/* ---- after fusion: Casts past the data-movement ops ------------------------------ */

/* n moves or repeats the elements of its input 0 and computes nothing
 * (its other inputs: shapes, axes); one output. */
static bool moves_data(const struct gf_node *n)
{
    switch (n->op) {
    case GF_OP_TRANSPOSE: case GF_OP_RESHAPE: case GF_OP_FLATTEN: case GF_OP_SQUEEZE:
    case GF_OP_UNSQUEEZE: case GF_OP_EXPAND: case GF_OP_IDENTITY:
        return n->n_inputs >= 1 && n->inputs[0] && n->n_outputs == 1 && n->outputs[0];
    case GF_OP_CONCAT: /* of one input (the exporters' empty KV cache): a copy */
        return n->n_inputs == 1 && n->inputs[0] && n->n_outputs == 1 && n->outputs[0];
    default:
        return false;
    }
}

/* c is a Cast between fp32 and `low` (either way), one output. */
static bool float_cast(const struct gf_node *c, enum gf_dtype low)
{
    if (c->op != GF_OP_CAST || c->n_inputs != 1 || !c->inputs[0] || c->n_outputs != 1 ||
        !c->outputs[0])
        return false;
    enum gf_dtype a = c->inputs[0]->type.dtype, b = c->outputs[0]->type.dtype;
    return (a == GF_FLOAT && b == low) || (a == low && b == GF_FLOAT);
}

/* v's only reader is node r at input 0 (v no graph output). */
static bool read_once_by(const struct gf_value *v, const struct gf_node *r)
{
    return !v->is_output && v->n_uses == 1 && v->uses[0].node == r && v->uses[0].slot == 0;
}

/* v's readers are node r at input 0, once, and otherwise Shape / Size
 * nodes, which read no element (v no graph output): the exporters' Concat
 * of k (an empty KV cache) has its Shape taken too. */
static bool read_by_and_shapes(const struct gf_value *v, const struct gf_node *r)
{
    size_t by_r = 0;
    if (v->is_output)
        return false;
    for (size_t i = 0; i < v->n_uses; i++) {
        const struct gf_node *u = v->uses[i].node;
        if (u == r && v->uses[i].slot == 0)
            by_r++;
        else if (u->op != GF_OP_SHAPE && u->op != GF_OP_SIZE)
            return false;
    }
    return by_r == 1;
}

/* A new Cast of v to `to` (v's shape) before node `before`. */
static struct gf_value *cast_before(struct gf_graph *g, struct gf_value *v, enum gf_dtype to,
                                    struct gf_node *before)
{
    char hint[256];
    snprintf(hint, sizeof(hint), "%s_%s", v->name, to == GF_FLOAT ? "fp32" : gf_dtype_name(to));
    struct gf_value *y = gf_graph_new_value(g, NULL, hint);
    if (!y)
        return NULL;
    gf_value_set_tensor_type(y, to, v->type.rank, v->type.dims);
    struct gf_node *c = gf_graph_add_node(g, "Cast", "", y->name, 1, &v, 1, &y);
    if (!c || gf_node_set_attr_int(c, "to", to) != GF_OK)
        return NULL;
    gf_node_move_before(c, before);
    return y;
}

/* Widening Cast(x) read only by data-movement op m: m reads x (m and its
 * output in the low type), one Cast after it makes the fp32 output. */
static enum gf_status widen_after(struct gf_graph *g, struct gf_node *c, struct gf_node *m)
{
    struct gf_value *x = c->inputs[0], *z = m->outputs[0];
    struct gf_value *zl = gf_graph_new_value(g, NULL, z->name);
    if (!zl)
        return gf_error(GF_ERR_NOMEM, "precision: out of memory");
    gf_value_set_tensor_type(zl, x->type.dtype, z->type.rank, z->type.dims);
    /* m -> zl, Cast(zl) -> z: z keeps its readers and name */
    struct gf_value *none = NULL;
    struct gf_node *w = gf_graph_add_node(g, "Cast", "", zl->name, 1, &zl, 1, &none);
    if (!w || gf_node_set_attr_int(w, "to", GF_FLOAT) != GF_OK)
        return gf_error(GF_ERR_NOMEM, "precision: out of memory");
    enum gf_status st = gf_node_set_output(m, 0, zl);
    if (st == GF_OK)
        st = gf_node_set_output(w, 0, z);
    if (st != GF_OK)
        return st;
    gf_node_move_before(w, m->next);
    gf_node_set_input(m, 0, x);
    gf_graph_remove_node(g, c);
    return GF_OK;
}

/* Narrowing Cast(z), z made by data-movement op m and read by the Cast
 * only: m reads a Cast of its input (m and its output in the low type) and
 * the Cast's readers read z. */
static enum gf_status narrow_before(struct gf_graph *g, struct gf_node *c, struct gf_node *m)
{
    struct gf_value *z = m->outputs[0], *w = c->outputs[0];
    struct gf_value *xl = cast_before(g, m->inputs[0], w->type.dtype, m);
    if (!xl)
        return gf_error(GF_ERR_NOMEM, "precision: out of memory");
    gf_node_set_input(m, 0, xl);
    gf_graph_remove_node(g, c);
    z->type.dtype = w->type.dtype;
    gf_value_replace_uses(w, z);
    return GF_OK;
}

/* RoPE between a widening Cast of its X and a narrowing Cast of its Y
 * (autocast's fp32 RoPE of bf16 / fp16 q and k: fp32 Cos and Sin promote
 * them), the Cos and Sin fp32: RoPE reads the low X and writes the low Y
 * itself, computing in fp32 as before (widening is exact and Y is rounded
 * once either way: the same bits, two Casts fewer and half the traffic;
 * autodiff's RoPEGrad then runs on the low gradient the same way). */
static bool fold_rope_casts(struct gf_graph *g, struct gf_node *r, enum gf_dtype low)
{
    if (r->op != GF_OP_ROPE || r->n_inputs != 3 || r->n_outputs != 1 || !r->inputs[0] ||
        !r->inputs[1] || !r->inputs[2] || !r->outputs[0])
        return false;
    struct gf_value *x = r->inputs[0], *y = r->outputs[0];
    struct gf_node *w = x->producer, *c = y->n_uses == 1 ? y->uses[0].node : NULL;
    if (!w || w->graph != g || !float_cast(w, low) || w->inputs[0]->type.dtype != low ||
        !c || !float_cast(c, low) || c->outputs[0]->type.dtype != low ||
        !read_once_by(y, c) || r->inputs[1]->type.dtype != GF_FLOAT ||
        r->inputs[2]->type.dtype != GF_FLOAT)
        return false;
    struct gf_value *z = c->outputs[0];
    gf_graph_remove_node(g, c);
    if (gf_node_set_output(r, 0, z) != GF_OK) /* z has no producer now: cannot fail */
        return false;
    gf_node_set_input(r, 0, w->inputs[0]);
    if (x->n_uses == 0 && !x->is_output)
        gf_graph_remove_node(g, w);
    return true;
}

/* AddRMSNorm / AddLayerNorm whose R is a widening Cast of a low product
 * (the o / down projection added to the fp32 residual stream) and whose Y
 * is read only by a narrowing Cast (the next GEMMs' input; Shape / Size
 * readers aside: the legacy exporter takes the hidden state's shape): the node reads
 * the low R and writes the low Y itself (the mixed form, kernels/checks.h),
 * computing in fp32 as before: the same bits, two Casts fewer.  S stays
 * fp32 (the residual stream); autodiff's RMSNormGrad then reads the low dY
 * and R's gradient is cast back to the low type (grad_rules_fused.c). */
static bool fold_norm_casts(struct gf_graph *g, struct gf_node *n, enum gf_dtype low)
{
    if ((n->op != GF_OP_ADD_RMS_NORM && n->op != GF_OP_ADD_LAYER_NORM) || n->n_inputs < 2 ||
        n->n_outputs < 2 || !n->inputs[0] || !n->inputs[1] || !n->outputs[0] ||
        !n->outputs[1] || n->inputs[0]->type.dtype != GF_FLOAT || n->inputs[0]->type.rank < 0)
        return false;
    struct gf_value *r = n->inputs[1], *y = n->outputs[0];
    struct gf_node *w = r->producer, *c = NULL;
    for (size_t i = 0; i < y->n_uses && !c; i++)
        if (y->uses[i].node->op == GF_OP_CAST)
            c = y->uses[i].node;
    if (!w || w->graph != g || !float_cast(w, low) || w->inputs[0]->type.dtype != low || !c ||
        !float_cast(c, low) || c->outputs[0]->type.dtype != low || !read_by_and_shapes(y, c))
        return false;
    struct gf_value *z = c->outputs[0];
    gf_graph_remove_node(g, c);
    if (gf_node_set_output(n, 0, z) != GF_OK) /* z has no producer now: cannot fail */
        return false;
    gf_value_replace_uses(y, z); /* the Shape / Size readers: the same shape */
    gf_node_set_input(n, 1, w->inputs[0]);
    if (r->n_uses == 0 && !r->is_output)
        gf_graph_remove_node(g, w);
    return true;
}

enum gf_status gf_pass_precision_move_casts(struct gf_model *m, size_t *moved)
{
    enum gf_precision p = gf_model_precision(m);
    enum gf_dtype low = p == GF_PRECISION_BF16 ? GF_BFLOAT16 : GF_FLOAT16;
    struct gf_graph *g = m->graph;
    size_t count = 0;
    enum gf_status st = GF_OK;
    for (bool again = p == GF_PRECISION_BF16 || p == GF_PRECISION_FP16; again && st == GF_OK;) {
        again = false;
        for (struct gf_node *n = g->first, *next; n && st == GF_OK; n = next) {
            next = n->next;
            if (!float_cast(n, low))
                continue;
            struct gf_value *x = n->inputs[0], *y = n->outputs[0];
            struct gf_node *r = y->n_uses == 1 ? y->uses[0].node : NULL;
            if (x->type.dtype == low && r && moves_data(r) && read_once_by(y, r) &&
                !r->outputs[0]->is_output) {
                next = r->next;
                st = widen_after(g, n, r);
            } else if (x->type.dtype == GF_FLOAT && x->producer && moves_data(x->producer) &&
                       x->producer->graph == g && read_by_and_shapes(x, n)) {
                st = narrow_before(g, n, x->producer);
            } else {
                continue;
            }
            count++;
            again = true;
        }
    }
    for (struct gf_node *n = g->first; n && (p == GF_PRECISION_BF16 || p == GF_PRECISION_FP16);
         n = n->next)
        count += fold_rope_casts(g, n, low) || fold_norm_casts(g, n, low);
    if (moved)
        *moved = count;
    return st != GF_OK ? st : gf_graph_infer_shapes(g);
}
