/*
 * Which initializers are parameters, the way PyTorch would see them
 * (README "Training → Parameters"), and untying initializers an exporter
 * merged because they held equal values.
 *
 * An exported file does not say which initializers were torch parameters.
 * Exporters fold buffers and constants into initializers too: the causal
 * mask ([batch, 1, seq, seq]), the RoPE cos/sin tables ([1, 1, seq, dim]),
 * RoPE's inv_freq, eps and scales.  The rule, per float initializer c:
 *
 *   - fewer than 2 elements: a constant (eps, a scale, a divisor);
 *   - follow c forward through nodes whose other float inputs are
 *     constants (Reshape, Transpose, Cast, Expand, Add 1 as Gemma's norm
 *     does, ...) to the first node that mixes it with a value that is not
 *     a constant (a "combining" node).  There c is
 *       a parameter  when it is Gather's table (an embedding), or the
 *                    other value depends on a float graph input or on
 *                    another float initializer (activations);
 *       a table      (constant) when c has 2+ dimensions larger than 1 and
 *                    the node is not a MatMul/Gemm/Gather/Conv: masks and
 *                    RoPE tables, whose shape carries the sequence length;
 *       positional   (constant) when the other value only comes from
 *                    integers made float (position ids, Range, shapes, or
 *                    a Cast of an integer vector: positions an export with
 *                    static shapes builds from constants): RoPE's inv_freq;
 *   - a parameter on any path is a parameter; no combining node at all:
 *     unused (a constant).
 *
 * A parameter that meets two or more combining nodes of the same op type
 * (five RMSNorm Muls reading one weight) is reported as possibly merged:
 * both torch.onnx exporters store one initializer for parameters that
 * hold equal values (every RMSNorm weight starts at ones).
 * gf_params_untie gives each direct use its own copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gf_passes.h"

/* Dependence flags of a float value. */
enum {
    DEP_CAND = 1, /* a float initializer of 2+ elements */
    DEP_DATA = 2, /* a float graph input */
    DEP_POS = 4,  /* integers made float (position ids, ranges, shapes) */
    DEP_ANY = 8,  /* any graph input, through any dtype */
};

static bool is_float(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_DOUBLE || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

static bool float_value(const struct gf_value *v)
{
    return v && v->type.kind == GF_TYPE_TENSOR && is_float(v->type.dtype);
}

static bool candidate(const struct gf_value *v)
{
    return v->init && is_float(v->init->dtype) && v->init->nelem >= 2;
}

/* Cast (or CastLike) of an integer tensor of 2+ elements to float. */
static bool int_vector_cast(const struct gf_node *n)
{
    const struct gf_value *x = n->n_inputs ? n->inputs[0] : NULL;
    return (n->op == GF_OP_CAST || n->op == GF_OP_CAST_LIKE) && x &&
           x->type.kind == GF_TYPE_TENSOR && !is_float(x->type.dtype) &&
           x->type.dtype != GF_BOOL && gf_type_numel(&x->type) != 0 &&
           gf_type_numel(&x->type) != 1;
}

/* One pass in graph order; flags[v->id]. */
static void dependences(const struct gf_graph *g, unsigned char *flags)
{
    for (size_t i = 0; i < g->n_values; i++) {
        const struct gf_value *v = g->values[i];
        flags[v->id] = 0;
        if (v->init && v->is_input && !candidate(v))
            flags[v->id] = 0;
        else if (v->init)
            flags[v->id] = candidate(v) ? DEP_CAND : 0;
        else if (v->is_input)
            flags[v->id] = DEP_ANY | (float_value(v) ? DEP_DATA : 0);
    }
    for (const struct gf_node *n = g->first; n; n = n->next) {
        unsigned char f = 0, any = 0;
        for (size_t i = 0; i < n->n_inputs; i++) {
            const struct gf_value *x = n->inputs[i];
            if (!x)
                continue;
            any |= flags[x->id] & DEP_ANY;
            if (float_value(x))
                f |= flags[x->id] & (DEP_CAND | DEP_DATA | DEP_POS);
            else if (flags[x->id] & (DEP_ANY | DEP_DATA))
                any |= DEP_ANY; /* an integer from the inputs */
        }
        for (size_t o = 0; o < n->n_outputs; o++) {
            const struct gf_value *y = n->outputs[o];
            if (!y)
                continue;
            unsigned char fy = any;
            if (float_value(y)) {
                fy |= f;
                /* a float made from integers that depend on the inputs, or
                 * a Cast of an integer vector (positions built from
                 * constants when the export has static shapes) */
                if (!(f & (DEP_CAND | DEP_DATA)) &&
                    ((any && n->op != GF_OP_GATHER) || int_vector_cast(n)))
                    fy |= DEP_POS;
            }
            flags[y->id] = fy;
        }
    }
}

static int dims_over_one(const struct gf_tensor *t)
{
    int k = 0;
    for (int d = 0; d < t->rank; d++)
        k += t->dims[d] > 1;
    return k;
}

/* Axis d of t has the size (2 or more) of a static dimension of an
 * integer graph input: the batch or sequence size of the export. */
static bool export_axis(const struct gf_graph *g, const struct gf_tensor *t, int d)
{
    for (size_t i = 0; i < g->n_inputs; i++) {
        const struct gf_value *x = g->inputs[i];
        if (x->init || x->type.kind != GF_TYPE_TENSOR || is_float(x->type.dtype) ||
            x->type.rank <= 0)
            continue;
        for (int a = 0; a < x->type.rank; a++)
            if (x->type.dims[a].value >= 2 && x->type.dims[a].value == t->dims[d])
                return true;
    }
    return false;
}

/* Every element of fp32 tensor t is 0 or 1, or 0 or -1e30 and below (a
 * mask, additive or multiplicative). */
static bool mask_values(const struct gf_tensor *t)
{
    const float *x = t->data;
    bool ones = true, neg = true;
    for (size_t i = 0; i < t->nelem && (ones || neg); i++) {
        ones &= x[i] == 0.0f || x[i] == 1.0f;
        neg &= x[i] == 0.0f || x[i] <= -1e30f;
    }
    return ones || neg;
}

/* Every element of t is in [-1, 1] and the slice at position 0 of axis d
 * is all 1 or all 0: cos or sin of position times frequency. */
static bool rope_values(const struct gf_tensor *t, int d)
{
    const float *x = t->data;
    size_t inner = 1, n = (size_t)t->dims[d];
    for (int k = d + 1; k < t->rank; k++)
        inner *= (size_t)t->dims[k];
    bool all1 = true, all0 = true;
    for (size_t i = 0; i < t->nelem; i++) {
        if (!(x[i] >= -1.0001f && x[i] <= 1.0001f))
            return false;
        if ((i / inner) % n == 0) { /* position 0 on axis d */
            all1 &= x[i] == 1.0f;
            all0 &= x[i] == 0.0f;
        }
    }
    return all1 || all0;
}

/* A mask or a RoPE cos/sin table the dynamo exporter folded for its static
 * shapes: 2+ dims over 1, one sized by the export's batch or sequence, and
 * mask values or cos/sin values that start at position 0. */
static bool folded_table(const struct gf_graph *g, const struct gf_tensor *t)
{
    if (t->dtype != GF_FLOAT)
        return false;
    bool sized = false;
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d] > 1 && export_axis(g, t, d)) {
            sized = true;
            if (rope_values(t, d))
                return true;
        }
    return sized && mask_values(t);
}

static bool weight_op(const struct gf_node *n, size_t slot)
{
    switch (n->op) {
    case GF_OP_MATMUL: case GF_OP_GEMM:
        return true;
    case GF_OP_GATHER:
        return slot == 0;
    default:
        return false;
    }
}

struct walk {
    const struct gf_graph *g;
    const unsigned char *flags;
    const struct gf_value *c;
    struct gf_param_class *info;
    const struct gf_node **seen; /* combining nodes met */
    size_t n_seen;
    enum gf_op role;             /* op of the first that made c a parameter */
    bool *visited;               /* by value id */
};

/* The verdict at combining node n reached through input slot `slot`. */
static enum gf_param_kind verdict(struct walk *w, const struct gf_node *n, size_t slot,
                                  unsigned char other)
{
    if (n->op == GF_OP_GATHER && slot == 0)
        return GF_PARAM_TRAINED;
    if (dims_over_one(w->c->init) >= 2 && !weight_op(n, slot) && folded_table(w->g, w->c->init))
        return GF_PARAM_TABLE;
    if (other & (DEP_CAND | DEP_DATA))
        return GF_PARAM_TRAINED;
    return GF_PARAM_POSITIONAL;
}

/* Flags of n's float inputs other than slot `slot`. */
static unsigned char others(const struct walk *w, const struct gf_node *n, size_t slot)
{
    unsigned char f = 0;
    for (size_t i = 0; i < n->n_inputs; i++)
        if (i != slot && float_value(n->inputs[i]))
            f |= w->flags[n->inputs[i]->id];
    if (n->op == GF_OP_GATHER && slot == 0)
        f |= DEP_ANY; /* the indices */
    return f;
}

static void note(struct walk *w, enum gf_param_kind k, const struct gf_node *n)
{
    struct gf_param_class *p = w->info;
    if (k == GF_PARAM_TRAINED) {
        if (p->kind != GF_PARAM_TRAINED) {
            p->kind = GF_PARAM_TRAINED;
            p->role = n->op_type;
            w->role = n->op;
        }
        for (size_t i = 0; i < w->n_seen; i++)
            if (w->seen[i] == n)
                return;
        w->seen[w->n_seen++] = n;
    } else if (p->kind == GF_PARAM_UNUSED) {
        p->kind = k;
        p->role = n->op_type;
    }
}

static void walk_value(struct walk *w, const struct gf_value *v, int depth)
{
    if (w->visited[v->id] || depth > 32)
        return;
    w->visited[v->id] = true;
    for (size_t u = 0; u < v->n_uses; u++) {
        const struct gf_node *n = v->uses[u].node;
        size_t slot = (size_t)v->uses[u].slot;
        if (n->graph != w->g || n->op == GF_OP_SHAPE || n->op == GF_OP_SIZE)
            continue;
        unsigned char f = others(w, n, slot);
        if ((f & (DEP_CAND | DEP_DATA | DEP_POS | DEP_ANY)) == 0 && !weight_op(n, slot)) {
            for (size_t o = 0; o < n->n_outputs; o++) /* constants only: pass through */
                if (float_value(n->outputs[o]))
                    walk_value(w, n->outputs[o], depth + 1);
            continue;
        }
        if (!(f & (DEP_CAND | DEP_DATA | DEP_POS)) && !weight_op(n, slot) &&
            n->op != GF_OP_GATHER) {
            /* the other inputs are integers from the inputs (Expand's shape,
             * Reshape's shape, Where's condition): still c's values */
            for (size_t o = 0; o < n->n_outputs; o++)
                if (float_value(n->outputs[o]))
                    walk_value(w, n->outputs[o], depth + 1);
            continue;
        }
        note(w, verdict(w, n, slot, f), n);
    }
}

/* Several combining nodes of one op type: the exporter may have merged. */
static void merged(struct walk *w)
{
    for (size_t i = 0; i < w->n_seen; i++)
        for (size_t j = i + 1; j < w->n_seen; j++)
            if (w->seen[i]->op == w->seen[j]->op && w->seen[i]->op != GF_OP_GATHER) {
                w->info->merged = true;
                w->info->n_roles++;
            }
    if (w->info->merged) {
        size_t k = 0;
        for (size_t i = 0; i < w->n_seen; i++)
            k += w->seen[i]->op == w->role;
        w->info->n_roles = k;
    }
}

/* "Mul x5, Gather": the op types of v's readers, in first-seen order. */
static void readers_text(const struct gf_value *v, char *buf, size_t len)
{
    const char *ops[16];
    size_t count[16], n = 0, p = 0;
    for (size_t u = 0; u < v->n_uses; u++) {
        const char *op = v->uses[u].node->op_type;
        size_t k = 0;
        while (k < n && strcmp(ops[k], op) != 0)
            k++;
        if (k == n && n == 16)
            continue;
        if (k == n) {
            ops[n] = op;
            count[n++] = 0;
        }
        count[k]++;
    }
    buf[0] = '\0';
    for (size_t k = 0; k < n && p < len; k++)
        p += (size_t)(count[k] > 1 ? snprintf(buf + p, len - p, "%s%s x%zu", k ? ", " : "",
                                              ops[k], count[k])
                                   : snprintf(buf + p, len - p, "%s%s", k ? ", " : "", ops[k]));
    if (!n)
        snprintf(buf, len, "-");
}

enum gf_status gf_params_classify(const struct gf_graph *g, struct gf_param_class **out,
                                  size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    unsigned char *flags = calloc(g->n_values + 1, 1);
    bool *visited = calloc(g->n_values + 1, sizeof(bool));
    const struct gf_node **seen = calloc(g->n_nodes + 1, sizeof(*seen));
    struct gf_param_class *info = calloc(g->n_inits + 1, sizeof(*info));
    if (!flags || !visited || !seen || !info) {
        free(flags);
        free(visited);
        free(seen);
        free(info);
        return gf_error(GF_ERR_NOMEM, "out of memory classifying parameters");
    }
    dependences(g, flags);
    size_t n = 0;
    for (size_t i = 0; i < g->n_inits; i++) {
        const struct gf_value *v = g->inits[i];
        if (!v->init || !is_float(v->init->dtype))
            continue;
        struct gf_param_class *p = &info[n++];
        *p = (struct gf_param_class){.v = v, .name = v->name, .kind = GF_PARAM_UNUSED,
                                     .rank = v->init->rank, .nelem = v->init->nelem};
        for (int d = 0; d < v->init->rank && d < 8; d++)
            p->dims[d] = v->init->dims[d];
        readers_text(v, p->readers, sizeof(p->readers));
        if (v->init->nelem < 2) {
            p->kind = GF_PARAM_SCALAR;
            continue;
        }
        memset(visited, 0, (g->n_values + 1) * sizeof(bool));
        struct walk w = {.g = g, .flags = flags, .c = v, .info = p, .seen = seen,
                         .visited = visited};
        walk_value(&w, v, 0);
        if (p->kind == GF_PARAM_TRAINED)
            merged(&w);
    }
    free(flags);
    free(visited);
    free(seen);
    *out = info;
    *n_out = n;
    return GF_OK;
}

const char *gf_param_kind_name(enum gf_param_kind k)
{
    switch (k) {
    case GF_PARAM_TRAINED: return "trained";
    case GF_PARAM_SCALAR: return "constant: fewer than 2 elements";
    case GF_PARAM_TABLE: return "constant: a mask or RoPE table (sized by batch/sequence)";
    case GF_PARAM_POSITIONAL: return "constant: meets only integers made float (positions)";
    case GF_PARAM_UNUSED: return "constant: meets no activation";
    }
    return "?";
}

/* ---- untie ------------------------------------------------------------------ */

/* The innermost module scope of node n: the dynamo exporter's
 * "pkg.torch.onnx.name_scopes" (['', 'm', 'm.model', ..., 'mul_10']: the
 * one before the op's own name), else the legacy exporter's node name
 * ("/m/model/layers.1/input_layernorm/Mul_1" -> m.model.layers.1.input_layernorm). */
static bool scope_of(const struct gf_node *n, char *buf, size_t len)
{
    const char *sc = gf_node_metadata(n, "pkg.torch.onnx.name_scopes");
    if (sc) {
        const char *q[4] = {NULL}; /* the last two quoted strings: start, end */
        for (const char *p = sc; (p = strchr(p, '\'')) != NULL;) {
            const char *e = strchr(p + 1, '\'');
            if (!e)
                break;
            q[0] = q[2];
            q[1] = q[3];
            q[2] = p + 1;
            q[3] = e;
            p = e + 1;
        }
        if (q[0] && q[1] > q[0] && (size_t)(q[1] - q[0]) < len) {
            memcpy(buf, q[0], (size_t)(q[1] - q[0]));
            buf[q[1] - q[0]] = '\0';
            return true;
        }
        return false;
    }
    const char *nm = n->name ? n->name : "";
    const char *last = strrchr(nm, '/');
    if (nm[0] != '/' || !last || last == nm || (size_t)(last - nm) > len)
        return false;
    size_t k = (size_t)(last - (nm + 1));
    memcpy(buf, nm + 1, k);
    buf[k] = '\0';
    for (char *c = buf; *c; c++)
        if (*c == '/')
            *c = '.';
    return true;
}

/* A torch-style name for the copy read by node n: its module scope and the
 * last part of the original name ("weight"), else "<name>.<k>"; unique. */
static const char *copy_name(struct gf_graph *g, const struct gf_value *v,
                             const struct gf_node *n, size_t k)
{
    char buf[512];
    const char *leaf = strrchr(v->name, '.');
    if (leaf && scope_of(n, buf, sizeof(buf) - strlen(leaf) - 1)) {
        strcat(buf, leaf);
        if (!gf_graph_find(g, buf))
            return gf_graph_unique_name(g, buf);
    }
    snprintf(buf, sizeof(buf), "%s.%zu", v->name, k);
    return gf_graph_unique_name(g, buf);
}

/* The legacy exporter writes a merged initializer's other names as
 * Identity nodes (Identity(layers.0.input_layernorm.weight) ->
 * layers.1.input_layernorm.weight): such a node becomes an initializer of
 * that name holding a copy. */
static bool identity_copy(struct gf_graph *g, struct gf_node *n, const struct gf_value *v)
{
    struct gf_value *y = n->n_outputs == 1 ? n->outputs[0] : NULL;
    if (n->op != GF_OP_IDENTITY || !y || y->is_output || y->is_input)
        return false;
    struct gf_tensor *t = gf_tensor_new(g->model, y->name, v->init->dtype, v->init->rank,
                                        v->init->dims, v->init->data);
    if (!t)
        return false;
    gf_graph_remove_node(g, n);
    return gf_value_set_initializer(y, t) == GF_OK;
}

enum gf_status gf_params_untie(struct gf_graph *g, struct gf_value *v, size_t *n_copies)
{
    if (n_copies)
        *n_copies = 0;
    if (!v || !v->init || v->is_output)
        return gf_error(GF_ERR_ARG, "--untie: '%s' is not an initializer", v ? v->name : "?");
    struct gf_model *m = g->model;
    /* uses change under us: take the node list first */
    size_t n_uses = v->n_uses;
    struct gf_use *uses = malloc((n_uses + 1) * sizeof(*uses));
    if (!uses)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    memcpy(uses, v->uses, n_uses * sizeof(*uses));
    enum gf_status st = GF_OK;
    bool kept = false; /* the first use that is no Identity keeps v */
    for (size_t u = 0; u < n_uses && st == GF_OK; u++) {
        if (uses[u].node->graph != g)
            continue;
        if (identity_copy(g, uses[u].node, v)) {
            if (n_copies)
                (*n_copies)++;
            continue;
        }
        if (!kept) {
            kept = true;
            continue;
        }
        const char *name = copy_name(g, v, uses[u].node, u);
        struct gf_tensor *t = name ? gf_tensor_new(m, name, v->init->dtype, v->init->rank,
                                                   v->init->dims, v->init->data) : NULL;
        struct gf_value *c = t ? gf_graph_add_initializer(g, name, t) : NULL;
        if (!c) {
            st = gf_error(GF_ERR_NOMEM, "out of memory untying '%s'", v->name);
            break;
        }
        gf_node_set_input(uses[u].node, (size_t)uses[u].slot, c);
        if (n_copies)
            (*n_copies)++;
    }
    free(uses);
    return st;
}
