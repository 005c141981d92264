/*
 * Cleanup passes: constant folding, no-op removal, common-subexpression
 * elimination and dead-code elimination, on the main graph.
 *
 * Subgraphs (If / Loop / Scan bodies) are left untouched: their nodes are
 * neither folded nor merged nor removed.  Main-graph rewrites still see
 * what subgraphs read from the main graph (through the use lists), so a
 * value a subgraph reads is never dropped and is renamed consistently.
 *
 * Names: values keep their identity wherever possible.  A folded node's
 * outputs become initializers under their own names; a bypassed no-op
 * whose output is a graph output hands that name to the producer of its
 * input, or stays when that cannot be done.  Graph input and output names
 * never change.
 *
 * Shapes: the passes run shape inference from the graph inputs and
 * initializers only.  Declared static dims of intermediate values
 * (value_info, graph outputs) are not trusted, since exporters record the
 * sizes of the example they traced, and a graph input's default
 * initializer is not a constant (the caller may override it).  Nothing is
 * folded that depends on a symbolic dim.
 */
#include <stdlib.h>
#include <string.h>

#include "gf_passes.h"

#define DEFAULT_FOLD_LIMIT ((size_t)16 << 20)
#define CSE_CONST_LIMIT 4096 /* largest initializer CSE compares (bytes) */
#define MAX_ROUNDS 32        /* gf_pass_cleanup's fixpoint, as a guard */

static bool has_subgraph(const struct gf_node *n)
{
    for (size_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].type == GF_ATTR_GRAPH || n->attrs[i].type == GF_ATTR_GRAPHS)
            return true;
    return false;
}

static bool is_std_domain(const char *d)
{
    return !d || !*d || strcmp(d, "ai.onnx") == 0;
}

/* Ops whose result is not a function of their inputs. */
static bool is_random(const struct gf_node *n)
{
    static const char *const random_ops[] = {
        "Dropout", "RandomNormal", "RandomUniform", "RandomNormalLike",
        "RandomUniformLike", "Multinomial", "Bernoulli",
    };
    if (!is_std_domain(n->domain))
        return false;
    for (size_t i = 0; i < sizeof(random_ops) / sizeof(random_ops[0]); i++)
        if (strcmp(n->op_type, random_ops[i]) == 0)
            return true;
    return false;
}

/* A value nothing defines or reads any more: drop its stale type so the
 * saver does not write a value_info for a name that no longer exists. */
static void forget_if_orphan(struct gf_value *v)
{
    if (!v || v->producer || v->init || v->is_input || v->is_output || v->sparse_init ||
        v->n_uses)
        return;
    v->has_value_info = false;
    v->type.kind = GF_TYPE_NONE;
    v->type.dtype = GF_UNDEFINED;
    v->type.rank = -1;
    v->type.dims = NULL;
}

/* Removes n and forgets its outputs that nothing else defines. */
static void drop_node(struct gf_graph *g, struct gf_node *n)
{
    gf_graph_remove_node(g, n);
    for (size_t i = 0; i < n->n_outputs; i++)
        forget_if_orphan(n->outputs[i]);
}

#ifndef NDEBUG
/* Debug and test builds check the IR after every pass. */
static enum gf_status check(struct gf_graph *g, const char *pass)
{
    enum gf_status st = gf_graph_validate(g);
    if (st != GF_OK) {
        gf_error_prefix(pass);
        return GF_ERR_INTERNAL;
    }
    return GF_OK;
}
#else
static enum gf_status check(struct gf_graph *g, const char *pass)
{
    (void)g;
    (void)pass;
    return GF_OK;
}
#endif

/* ---- shape analysis ------------------------------------------------------- */

/* What inference found, per value id: the type, and for int tensors whose
 * every element it knows (shape computations), those elements. */
struct shapes {
    const struct gf_graph *g;
    size_t n;
    struct gf_type *t;
    struct gf_dim *dims;  /* storage of t[i].dims */
    int64_t **known;      /* malloc'ed, or NULL */
    size_t *n_known;
};

static void shapes_free(struct shapes *s)
{
    for (size_t i = 0; s->known && i < s->n; i++)
        free(s->known[i]);
    free(s->known);
    free(s->n_known);
    free(s->t);
    free(s->dims);
    memset(s, 0, sizeof(*s));
}

static void record_known(void *ctx, const struct gf_value *v, size_t n, const int64_t *vals)
{
    struct shapes *s = ctx;
    if (v->graph != s->g || (size_t)v->id >= s->n || s->known[v->id])
        return;
    int64_t *copy = malloc((n + 1) * sizeof(*copy));
    if (!copy)
        return; /* not fatal: the value is just not folded */
    memcpy(copy, vals, n * sizeof(*copy));
    s->known[v->id] = copy;
    s->n_known[v->id] = n;
}

/* Declared static dims of produced values become unknown, so inference
 * recomputes them from the inputs (the element type and rank stay). */
static size_t forget_dims(struct gf_graph *g, struct gf_dim *scratch)
{
    size_t used = 0;
    for (size_t i = 0; i < g->n_values; i++) {
        struct gf_value *v = g->values[i];
        if (!v->producer || v->type.kind != GF_TYPE_TENSOR || v->type.rank <= 0)
            continue;
        for (int d = 0; d < v->type.rank; d++)
            scratch[used + (size_t)d] = (struct gf_dim){.value = -1};
        v->type.dims = &scratch[used];
        used += (size_t)v->type.rank;
    }
    return used;
}

static size_t total_rank(const struct gf_graph *g)
{
    size_t r = 0;
    for (size_t i = 0; i < g->n_values; i++)
        if (g->values[i]->type.kind == GF_TYPE_TENSOR && g->values[i]->type.rank > 0)
            r += (size_t)g->values[i]->type.rank;
    return r;
}

/* Copies the inferred types out of the graph (their dims may point into
 * the scratch that is freed next). */
static enum gf_status keep_types(struct gf_graph *g, struct shapes *s)
{
    size_t used = 0;
    if (!(s->dims = malloc((total_rank(g) + 1) * sizeof(*s->dims))))
        return gf_error(GF_ERR_NOMEM, "cleanup: out of memory");
    for (size_t i = 0; i < g->n_values; i++) {
        struct gf_type *t = &s->t[i];
        *t = g->values[i]->type;
        if (t->kind != GF_TYPE_TENSOR || t->rank <= 0)
            continue;
        memcpy(&s->dims[used], t->dims, (size_t)t->rank * sizeof(*t->dims));
        t->dims = &s->dims[used];
        used += (size_t)t->rank;
    }
    return GF_OK;
}

/* Runs inference as described on top and puts the model's types back. */
static enum gf_status analyze(struct gf_graph *g, struct shapes *s)
{
    memset(s, 0, sizeof(*s));
    s->g = g;
    s->n = g->n_values;
    struct gf_type *saved = malloc((s->n + 1) * sizeof(*saved));
    struct gf_tensor **hidden = calloc(s->n + 1, sizeof(*hidden));
    struct gf_dim *scratch = malloc((total_rank(g) + 1) * sizeof(*scratch));
    s->t = calloc(s->n + 1, sizeof(*s->t));
    s->known = calloc(s->n + 1, sizeof(*s->known));
    s->n_known = calloc(s->n + 1, sizeof(*s->n_known));
    enum gf_status st = GF_OK;
    if (!saved || !hidden || !scratch || !s->t || !s->known || !s->n_known) {
        st = gf_error(GF_ERR_NOMEM, "cleanup: out of memory");
        goto out;
    }
    for (size_t i = 0; i < s->n; i++) {
        struct gf_value *v = g->values[i];
        saved[i] = v->type;
        if (v->is_input && v->init) { /* a default, not a constant */
            hidden[i] = v->init;
            v->init = NULL;
        }
    }
    forget_dims(g, scratch);
    /* A contradiction stops inference at that node; what it found before
     * is still right and what follows stays unknown, so go on either way. */
    gf_graph_infer_shapes_values(g, record_known, s);
    st = keep_types(g, s);
    for (size_t i = 0; i < s->n; i++) {
        g->values[i]->type = saved[i];
        if (hidden[i])
            g->values[i]->init = hidden[i];
    }
out:
    free(saved);
    free(hidden);
    free(scratch);
    if (st != GF_OK)
        shapes_free(s);
    return st;
}

static const struct gf_type *type_of(const struct shapes *s, const struct gf_value *v)
{
    return v && (size_t)v->id < s->n ? &s->t[v->id] : NULL;
}

static enum gf_dtype dtype_of(const struct shapes *s, const struct gf_value *v)
{
    const struct gf_type *t = type_of(s, v);
    if (t && t->kind == GF_TYPE_TENSOR && t->dtype != GF_UNDEFINED)
        return t->dtype;
    return v && v->type.kind == GF_TYPE_TENSOR ? v->type.dtype : GF_UNDEFINED;
}

/* Same shape for every input: each dim the same size, or the same named
 * symbol (inference derived both from one input dim; the executor makes
 * equal names equal sizes). */
static bool same_shape(const struct shapes *s, const struct gf_value *a,
                       const struct gf_value *b)
{
    const struct gf_type *x = type_of(s, a), *y = type_of(s, b);
    if (!x || !y || x->kind != GF_TYPE_TENSOR || y->kind != GF_TYPE_TENSOR || x->rank < 0 ||
        x->rank != y->rank)
        return false;
    for (int i = 0; i < x->rank; i++) {
        const struct gf_dim *p = &x->dims[i], *q = &y->dims[i];
        if (p->value >= 0 ? p->value != q->value
                          : q->value >= 0 || !p->param || !q->param ||
                                strcmp(p->param, q->param) != 0)
            return false;
    }
    return true;
}

/* Bytes of v's value when its shape is static, else SIZE_MAX. */
static size_t static_bytes(const struct shapes *s, const struct gf_value *v)
{
    const struct gf_type *t = type_of(s, v);
    int64_t n = t ? gf_type_numel(t) : -1;
    if (n < 0 || t->dtype == GF_UNDEFINED || t->dtype == GF_STRING ||
        (uint64_t)n > SIZE_MAX / 16)
        return SIZE_MAX;
    return gf_dtype_bytes(t->dtype, (size_t)n);
}

/* ---- constant folding ------------------------------------------------------- */

/* Replaces n by initializers t[i] under its outputs' own names. */
static enum gf_status outputs_to_inits(struct gf_graph *g, struct gf_node *n,
                                       struct gf_tensor **t, bool *done)
{
    gf_graph_remove_node(g, n);
    *done = true;
    for (size_t i = 0; i < n->n_outputs; i++) {
        enum gf_status st;
        if (!n->outputs[i])
            continue;
        if ((st = gf_value_set_initializer(n->outputs[i], t[i])) != GF_OK)
            return st;
    }
    return GF_OK;
}

/* A Constant node becomes an initializer (string and sparse ones stay). */
static enum gf_status fold_constant_node(struct gf_graph *g, struct gf_node *n, bool *done)
{
    struct gf_value *v = n->n_outputs == 1 ? n->outputs[0] : NULL;
    const struct gf_tensor *c = gf_value_constant(v);
    if (!c)
        return GF_OK;
    /* our own header: set_initializer renames the tensor */
    struct gf_tensor *t = gf_model_alloc(g->model, sizeof(*t));
    if (!t)
        return gf_error(GF_ERR_NOMEM, "cleanup: out of memory folding '%s'", v->name);
    *t = *c;
    return outputs_to_inits(g, n, &t, done);
}

/* The tensor of a value whose elements inference found, or NULL. */
static enum gf_status known_tensor(struct gf_model *m, const struct shapes *s,
                                   const struct gf_value *v, struct gf_tensor **out)
{
    const struct gf_type *ty = &s->t[v->id];
    int64_t dims[64];
    *out = NULL;
    if (!s->known[v->id] || static_bytes(s, v) == SIZE_MAX || ty->rank > 64)
        return GF_OK;
    for (int d = 0; d < ty->rank; d++)
        dims[d] = ty->dims[d].value;
    struct gf_tensor *t = gf_tensor_new(m, v->name, ty->dtype, ty->rank, dims, NULL);
    if (!t)
        return GF_ERR_NOMEM;
    if (t->nelem != s->n_known[v->id])
        return GF_OK;
    for (size_t e = 0; e < t->nelem; e++) {
        if (ty->dtype == GF_INT32)
            ((int32_t *)t->data)[e] = (int32_t)s->known[v->id][e];
        else
            ((int64_t *)t->data)[e] = s->known[v->id][e];
    }
    *out = t;
    return GF_OK;
}

/* Outputs whose every element inference found (Shape, Size, and shape
 * arithmetic on static dims) become initializers without evaluation. */
static enum gf_status fold_known(struct gf_graph *g, struct gf_node *n, const struct shapes *s,
                                 bool *done)
{
    struct gf_tensor *t[8] = {0};
    if (n->n_outputs > 8)
        return GF_OK;
    for (size_t i = 0; i < n->n_outputs; i++)
        if (n->outputs[i] && (!type_of(s, n->outputs[i]) || !s->known[n->outputs[i]->id]))
            return GF_OK;
    for (size_t i = 0; i < n->n_outputs; i++) {
        enum gf_status st;
        if (n->outputs[i] && (st = known_tensor(g->model, s, n->outputs[i], &t[i])) != GF_OK)
            return st;
        if (n->outputs[i] && !t[i])
            return GF_OK;
    }
    return outputs_to_inits(g, n, t, done);
}

/* All inputs constant (or omitted), and the outputs small enough. */
static bool can_eval(const struct gf_node *n, const struct shapes *s, size_t limit,
                     struct gf_tensor **in)
{
    size_t bytes = 0;
    if (n->n_outputs == 0)
        return false;
    for (size_t i = 0; i < n->n_inputs; i++) {
        /* cast: the evaluator only reads its inputs */
        in[i] = n->inputs[i] ? (struct gf_tensor *)gf_value_constant(n->inputs[i]) : NULL;
        if (n->inputs[i] && !in[i])
            return false;
    }
    for (size_t i = 0; i < n->n_outputs; i++) {
        size_t b = n->outputs[i] ? static_bytes(s, n->outputs[i]) : 0;
        if (b == SIZE_MAX || (bytes += b) > limit)
            return false;
    }
    return true;
}

static enum gf_status fold_eval(struct gf_graph *g, struct gf_node *n, const struct shapes *s,
                                const struct gf_cleanup_opts *o, bool *done)
{
    size_t limit = o->fold_limit ? o->fold_limit : DEFAULT_FOLD_LIMIT, bytes = 0;
    struct gf_tensor *in[64], *out[16] = {0};
    if (n->n_inputs > 64 || n->n_outputs > 16 || !can_eval(n, s, limit, in))
        return GF_OK;
    enum gf_status st = o->eval(g->model, n, in, out);
    if (st == GF_ERR_UNSUPPORTED || st == GF_ERR_INVALID)
        return GF_OK; /* left for the executor, which says why if it runs */
    if (st != GF_OK)
        return st;
    for (size_t i = 0; i < n->n_outputs; i++) {
        if (n->outputs[i] && !out[i])
            return GF_OK;
        bytes += out[i] ? out[i]->nbytes : 0;
    }
    if (bytes > limit)
        return GF_OK;
    return outputs_to_inits(g, n, out, done);
}

/* The passes work on a model's main graph (subgraphs see outer values). */
static enum gf_status main_graph(const struct gf_graph *g, const char *pass)
{
    if (!g || g->parent)
        return gf_error(GF_ERR_ARG, "%s: expects a model's main graph, not a subgraph", pass);
    return GF_OK;
}

enum gf_status gf_pass_fold_constants(struct gf_graph *g, const struct gf_cleanup_opts *o,
                                      size_t *count)
{
    static const struct gf_cleanup_opts none = {0};
    struct shapes s;
    size_t c = 0;
    enum gf_status st = main_graph(g, "fold_constants");
    if (st != GF_OK || (st = analyze(g, &s)) != GF_OK)
        return st;
    if (!o)
        o = &none;
    struct gf_node *next;
    for (struct gf_node *n = g->first; n && st == GF_OK; n = next) {
        bool done = false;
        next = n->next;
        if (n->op == GF_OP_CONSTANT)
            st = fold_constant_node(g, n, &done);
        else if (!has_subgraph(n) && !is_random(n)) {
            st = fold_known(g, n, &s, &done);
            if (st == GF_OK && !done && o->eval)
                st = fold_eval(g, n, &s, o, &done);
        }
        c += done;
    }
    shapes_free(&s);
    if (count)
        *count = c;
    return st == GF_OK ? check(g, "fold_constants") : st;
}

/* ---- no-op removal ----------------------------------------------------------- */

/* Dropout that copies its input: inference mode and the mask unused. */
static bool dropout_noop(const struct gf_node *n)
{
    if (gf_node_attr(n, "is_test") && gf_node_attr_int(n, "is_test", 1) == 0)
        return false; /* opset 6 training mode */
    if (n->n_inputs >= 3 && n->inputs[2]) {
        const struct gf_tensor *t = gf_value_constant(n->inputs[2]);
        if (!t || t->nelem != 1 || gf_tensor_get_i64(t, 0) != 0)
            return false;
    }
    return n->n_outputs < 2 || !n->outputs[1] || gf_value_use_count(n->outputs[1]) == 0;
}

/* Transpose with perm 0, 1, ..., or the default (reversal) on rank <= 1. */
static bool transpose_noop(const struct gf_node *n, const struct shapes *s)
{
    size_t k;
    const int64_t *perm = gf_node_attr_ints(n, "perm", &k);
    if (!gf_node_attr(n, "perm")) {
        const struct gf_type *t = type_of(s, n->inputs[0]);
        return t && t->kind == GF_TYPE_TENSOR && t->rank >= 0 && t->rank <= 1;
    }
    for (size_t i = 0; i < k; i++)
        if (perm[i] != (int64_t)i)
            return false;
    return true;
}

/* Output 0 equals input 0 (same dtype, shape and elements). */
static bool is_noop(const struct gf_node *n, const struct shapes *s, bool keep_dropout)
{
    if (n->n_inputs < 1 || !n->inputs[0] || n->n_outputs < 1 || !n->outputs[0] ||
        !is_std_domain(n->domain))
        return false;
    const struct gf_value *x = n->inputs[0], *y = n->outputs[0];
    enum gf_dtype dt = dtype_of(s, x);
    switch (n->op) {
    case GF_OP_IDENTITY:
        return true;
    case GF_OP_DROPOUT:
        return !keep_dropout && dropout_noop(n);
    case GF_OP_CAST:
        return dt != GF_UNDEFINED && gf_node_attr_int(n, "to", -1) == (int64_t)dt;
    case GF_OP_CAST_LIKE:
        return dt != GF_UNDEFINED && n->n_inputs == 2 && dtype_of(s, n->inputs[1]) == dt;
    case GF_OP_RESHAPE: case GF_OP_EXPAND: case GF_OP_FLATTEN: case GF_OP_SQUEEZE:
        /* these only relabel a row-major buffer: same shape, same tensor */
        return same_shape(s, x, y);
    case GF_OP_TRANSPOSE:
        return transpose_noop(n, s);
    default:
        return false;
    }
}

/* Takes n (y = op(x)) out: y's readers read x.  When y is a graph output,
 * x's producer produces y instead (x's readers follow), so the output
 * keeps its name; when x has no producer here (a graph input or an
 * initializer) or is itself a graph output, the node stays. */
static enum gf_status bypass(struct gf_graph *g, struct gf_node *n, bool *done)
{
    struct gf_value *x = n->inputs[0], *y = n->outputs[0];
    if (!y->is_output) {
        gf_value_replace_uses(y, x);
        drop_node(g, n);
        *done = true;
        return GF_OK;
    }
    struct gf_node *p = x->producer;
    if (!p || p->graph != g || x->is_output || x->is_input)
        return GF_OK;
    int slot = x->producer_slot;
    drop_node(g, n);
    enum gf_status st = gf_node_set_output(p, (size_t)slot, y);
    if (st != GF_OK)
        return st;
    gf_value_replace_uses(x, y);
    forget_if_orphan(x);
    *done = true;
    return GF_OK;
}

enum gf_status gf_pass_remove_identities(struct gf_graph *g, bool keep_dropout, size_t *count)
{
    struct shapes s;
    size_t c = 0;
    enum gf_status st = main_graph(g, "remove_identities");
    if (st != GF_OK || (st = analyze(g, &s)) != GF_OK)
        return st;
    struct gf_node *next;
    for (struct gf_node *n = g->first; n && st == GF_OK; n = next) {
        bool done = false;
        next = n->next;
        if (is_noop(n, &s, keep_dropout))
            st = bypass(g, n, &done);
        c += done;
    }
    shapes_free(&s);
    if (count)
        *count = c;
    return st == GF_OK ? check(g, "remove_identities") : st;
}

/* ---- common-subexpression elimination -------------------------------------- */

static uint64_t mix(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t mix_str(uint64_t h, const char *s)
{
    return mix(h, s ? s : "", s ? strlen(s) + 1 : 1);
}

static bool bytes_eq(const struct gf_bytes *a, const struct gf_bytes *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static bool tensor_eq(const struct gf_tensor *a, const struct gf_tensor *b)
{
    if (a == b)
        return true;
    if (!a || !b || a->dtype != b->dtype || a->rank != b->rank || a->nelem != b->nelem ||
        a->nbytes != b->nbytes || (a->rank && memcmp(a->dims, b->dims,
                                                     (size_t)a->rank * sizeof(*a->dims))))
        return false;
    if (a->dtype == GF_STRING) {
        for (size_t i = 0; i < a->nelem; i++)
            if (!a->strings || !b->strings || !bytes_eq(&a->strings[i], &b->strings[i]))
                return false;
        return true;
    }
    return a->nbytes == 0 || (a->data && b->data && memcmp(a->data, b->data, a->nbytes) == 0);
}

static uint64_t tensor_hash(uint64_t h, const struct gf_tensor *t)
{
    h = mix(h, &t->dtype, sizeof(t->dtype));
    h = mix(h, t->dims, (size_t)t->rank * sizeof(*t->dims));
    return t->data ? mix(h, t->data, t->nbytes < 256 ? t->nbytes : 256) : h;
}

static bool attr_eq(const struct gf_attr *a, const struct gf_attr *b)
{
    if (a->type != b->type || strcmp(a->name, b->name) != 0)
        return false;
    switch (a->type) {
    case GF_ATTR_FLOAT: return memcmp(&a->f, &b->f, sizeof(a->f)) == 0;
    case GF_ATTR_INT: return a->i == b->i;
    case GF_ATTR_STRING: return bytes_eq(&a->s, &b->s);
    case GF_ATTR_TENSOR: return tensor_eq(a->t, b->t);
    case GF_ATTR_SPARSE_TENSOR: case GF_ATTR_TYPE_PROTO: return bytes_eq(&a->packed, &b->packed);
    default: break;
    }
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++) {
        bool eq;
        switch (a->type) {
        case GF_ATTR_FLOATS: eq = memcmp(&a->floats[i], &b->floats[i], sizeof(float)) == 0; break;
        case GF_ATTR_INTS: eq = a->ints[i] == b->ints[i]; break;
        case GF_ATTR_STRINGS: eq = bytes_eq(&a->strings[i], &b->strings[i]); break;
        case GF_ATTR_TENSORS: eq = tensor_eq(a->tensors[i], b->tensors[i]); break;
        case GF_ATTR_SPARSE_TENSORS: case GF_ATTR_TYPE_PROTOS:
            eq = bytes_eq(&a->packed_list[i], &b->packed_list[i]);
            break;
        default: eq = false; /* graphs: never equal */
        }
        if (!eq)
            return false;
    }
    return true;
}

/* Same op, inputs (the same values) and attributes: same outputs. */
static bool node_eq(const struct gf_node *a, const struct gf_node *b)
{
    if (a->op != b->op || strcmp(a->op_type, b->op_type) != 0 ||
        is_std_domain(a->domain) != is_std_domain(b->domain) ||
        (!is_std_domain(a->domain) && strcmp(a->domain, b->domain) != 0) ||
        a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs || a->n_attrs != b->n_attrs)
        return false;
    for (size_t i = 0; i < a->n_inputs; i++)
        if (a->inputs[i] != b->inputs[i])
            return false;
    for (size_t i = 0; i < a->n_outputs; i++)
        if (!a->outputs[i] != !b->outputs[i])
            return false;
    for (size_t i = 0; i < a->n_attrs; i++) {
        const struct gf_attr *o = gf_node_attr(b, a->attrs[i].name);
        if (!o || !attr_eq(&a->attrs[i], o))
            return false;
    }
    return true;
}

/* Hash of an attribute: name, type, and the value of the common kinds. */
static uint64_t attr_hash(const struct gf_attr *a)
{
    uint64_t h = mix_str(mix(1469598103934665603ull, &a->type, sizeof(a->type)), a->name);
    switch (a->type) {
    case GF_ATTR_INT: return mix(h, &a->i, sizeof(a->i));
    case GF_ATTR_FLOAT: return mix(h, &a->f, sizeof(a->f));
    case GF_ATTR_INTS: return mix(h, a->ints, a->n * sizeof(*a->ints));
    case GF_ATTR_TENSOR: return a->t ? tensor_hash(h, a->t) : h;
    default: return h;
    }
}

/* Hash of what node_eq compares. */
static uint64_t node_hash(const struct gf_node *n)
{
    uint64_t h = mix_str(1469598103934665603ull, n->op_type);
    h = mix_str(h, is_std_domain(n->domain) ? "" : n->domain);
    for (size_t i = 0; i < n->n_inputs; i++)
        h = mix(h, &n->inputs[i], sizeof(n->inputs[i]));
    for (size_t i = 0; i < n->n_attrs; i++) /* order-independent */
        h += attr_hash(&n->attrs[i]);
    return h;
}

/* Deterministic ops of known domains without subgraphs. */
static bool cse_candidate(const struct gf_node *n)
{
    if (n->n_outputs == 0 || has_subgraph(n) || is_random(n))
        return false;
    if (!is_std_domain(n->domain) && strcmp(n->domain, "graphfuse") != 0)
        return false; /* unknown semantics: maybe stateful */
    for (size_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].ref_attr_name)
            return false;
    return true;
}

/* Open-addressing table of nodes (or values), keyed by a hash. */
struct table {
    void **item;
    uint64_t *hash;
    size_t cap;
};

static bool table_init(struct table *t, size_t n)
{
    t->cap = 16;
    while (t->cap < 2 * n + 2)
        t->cap *= 2;
    t->item = calloc(t->cap, sizeof(*t->item));
    t->hash = calloc(t->cap, sizeof(*t->hash));
    return t->item && t->hash;
}

static void table_free(struct table *t)
{
    free(t->item);
    free(t->hash);
}

/* The slot of an equal item, or of the empty slot where it belongs. */
static size_t table_find(const struct table *t, uint64_t h, const void *x,
                         bool (*eq)(const void *, const void *))
{
    size_t i = h & (t->cap - 1);
    while (t->item[i] && !(t->hash[i] == h && eq(t->item[i], x)))
        i = (i + 1) & (t->cap - 1);
    return i;
}

static bool node_eq_v(const void *a, const void *b)
{
    return node_eq(a, b);
}

/* Merges b into an equal earlier node a.  The node whose outputs are
 * graph outputs survives (moved up to a's place), so names stay; when
 * both have graph outputs nothing happens. */
static struct gf_node *merge_nodes(struct gf_graph *g, struct gf_node *a, struct gf_node *b)
{
    bool a_out = false, b_out = false;
    for (size_t i = 0; i < a->n_outputs; i++) {
        a_out |= a->outputs[i] && a->outputs[i]->is_output;
        b_out |= b->outputs[i] && b->outputs[i]->is_output;
    }
    if (a_out && b_out)
        return NULL;
    struct gf_node *keep = b_out ? b : a, *drop = b_out ? a : b;
    if (keep == b)
        gf_node_move_before(b, a);
    for (size_t i = 0; i < drop->n_outputs; i++)
        if (drop->outputs[i])
            gf_value_replace_uses(drop->outputs[i], keep->outputs[i]);
    drop_node(g, drop);
    return keep;
}

static enum gf_status cse_nodes(struct gf_graph *g, size_t *count)
{
    struct table t;
    if (!table_init(&t, g->n_nodes)) {
        table_free(&t);
        return gf_error(GF_ERR_NOMEM, "cleanup: out of memory in CSE");
    }
    struct gf_node *next;
    for (struct gf_node *n = g->first; n; n = next) {
        next = n->next;
        if (!cse_candidate(n))
            continue;
        uint64_t h = node_hash(n);
        size_t i = table_find(&t, h, n, node_eq_v);
        if (!t.item[i]) {
            t.item[i] = n;
            t.hash[i] = h;
            continue;
        }
        struct gf_node *keep = merge_nodes(g, t.item[i], n);
        if (keep) {
            t.item[i] = keep;
            (*count)++;
        }
    }
    table_free(&t);
    return GF_OK;
}

static bool init_eq_v(const void *a, const void *b)
{
    return tensor_eq(((const struct gf_value *)a)->init, ((const struct gf_value *)b)->init);
}

/* Small constant initializers with the same dtype, shape and bytes become
 * one, so patterns and CSE see one value.  Graph inputs and outputs keep
 * theirs; the unread duplicate is left for DCE. */
static enum gf_status cse_inits(struct gf_graph *g, size_t *count)
{
    struct table t;
    if (!table_init(&t, g->n_inits)) {
        table_free(&t);
        return gf_error(GF_ERR_NOMEM, "cleanup: out of memory in CSE");
    }
    for (size_t k = 0; k < g->n_inits; k++) {
        struct gf_value *v = g->inits[k];
        const struct gf_tensor *c = v->init;
        if (v->is_input || v->is_output || c->dtype == GF_STRING || c->nbytes > CSE_CONST_LIMIT ||
            (c->nbytes && !c->data))
            continue;
        uint64_t h = tensor_hash(1469598103934665603ull, c);
        size_t i = table_find(&t, h, v, init_eq_v);
        if (!t.item[i]) {
            t.item[i] = v;
            t.hash[i] = h;
        } else if (v->n_uses) {
            gf_value_replace_uses(v, t.item[i]);
            (*count)++;
        }
    }
    table_free(&t);
    return GF_OK;
}

enum gf_status gf_pass_cse(struct gf_graph *g, size_t *count)
{
    size_t c = 0;
    enum gf_status st = main_graph(g, "cse");
    if (st == GF_OK)
        st = cse_inits(g, &c);
    if (st == GF_OK)
        st = cse_nodes(g, &c);
    if (count)
        *count = c;
    return st == GF_OK ? check(g, "cse") : st;
}

/* ---- dead-code elimination ---------------------------------------------------- */

/* Nodes none of whose outputs is read or a graph output, last to first so
 * that a chain of dead nodes goes in one sweep; then initializers nothing
 * reads that are not graph inputs or outputs. */
static void dce(struct gf_graph *g, size_t *nodes, size_t *inits)
{
    struct gf_node *prev;
    for (struct gf_node *n = g->last; n; n = prev) {
        bool used = false;
        prev = n->prev;
        for (size_t i = 0; i < n->n_outputs && !used; i++)
            used = n->outputs[i] && gf_value_use_count(n->outputs[i]) > 0;
        if (!used) {
            drop_node(g, n);
            (*nodes)++;
        }
    }
    for (size_t k = g->n_inits; k-- > 0;) {
        struct gf_value *v = g->inits[k];
        if (v->is_input || v->is_output || v->n_uses)
            continue;
        gf_value_set_initializer(v, NULL);
        forget_if_orphan(v);
        (*inits)++;
    }
}

enum gf_status gf_pass_dce(struct gf_graph *g, size_t *count)
{
    size_t nodes = 0, inits = 0;
    enum gf_status st = main_graph(g, "dce");
    if (st != GF_OK)
        return st;
    dce(g, &nodes, &inits);
    if (count)
        *count = nodes + inits;
    return check(g, "dce");
}

/* ---- all of them ------------------------------------------------------------------ */

enum gf_status gf_pass_cleanup(struct gf_graph *g, const struct gf_cleanup_opts *o,
                               struct gf_cleanup_stats *st)
{
    static const struct gf_cleanup_opts none = {0};
    struct gf_cleanup_stats s = {0};
    enum gf_status rc = GF_OK;
    if (!o)
        o = &none;
    for (int round = 0; round < MAX_ROUNDS && rc == GF_OK; round++) {
        size_t f = 0, id = 0, c = 0, dn = 0, di = 0;
        if ((rc = gf_pass_fold_constants(g, o, &f)) != GF_OK ||
            (rc = gf_pass_remove_identities(g, o->keep_dropout, &id)) != GF_OK ||
            (rc = gf_pass_cse(g, &c)) != GF_OK)
            break;
        dce(g, &dn, &di);
        if ((rc = check(g, "dce")) != GF_OK)
            break;
        s.folded += f;
        s.identities += id;
        s.cse += c;
        s.dead += dn;
        s.dead_inits += di;
        s.rounds++;
        if (f + id + c + dn + di == 0)
            break;
    }
    if (st)
        *st = s;
    return rc;
}
