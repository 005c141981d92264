/* Lowering fused nodes to ONNX Runtime contrib ops (target ort) or to
 * standard ONNX ops (target onnx); see fuse_target.h.  What each fused
 * op becomes, and when (README "Optimize", "Targets"):
 *
 *   fused op          ort                                   onnx
 *   RMSNorm           SimplifiedLayerNormalization           RMSNormalization (opset 23)
 *   AddRMSNorm        com.microsoft.SkipSimplifiedLayerNorm. Add + RMSNormalization (23)
 *   LayerNorm         LayerNormalization                     LayerNormalization (17)
 *   AddLayerNorm      com.microsoft.SkipLayerNormalization   Add + LayerNormalization (17)
 *   Gelu              com.microsoft.Gelu / FastGelu          Gelu (20)
 *   SiLU              com.microsoft.QuickGelu {alpha 1}      -
 *   MatMulEpilogue    FusedMatMul; MatMul or FusedMatMul +   MatMul [+ Add] + Gelu (20)
 *                     BiasGelu / FastGelu / Gelu
 *   RoPE              com.microsoft.RotaryEmbedding          RotaryEmbedding (23)
 *
 * The rest (and every form outside the conditions below) stays a
 * function call.  SimplifiedLayerNormalization and the pre-17
 * LayerNormalization are ORT's own schemas in the ai.onnx domain. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_target.h"
#include "gf_half.h"

#define MS "com.microsoft"

/* dtype sets */
#define DT(t) (1u << (t))
#define DT_F32 DT(GF_FLOAT)
#define DT_NORM (DT(GF_FLOAT) | DT(GF_FLOAT16) | DT(GF_BFLOAT16)) /* fp32 statistics */
#define DT_ALL (DT_NORM | DT(GF_DOUBLE))

/* A value made once and shared by the nodes that need it. */
enum { K_I64, K_ROPE_MS, K_ROPE_ONNX };
struct shared {
    int kind;
    const struct gf_value *key; /* the table a RoPE cache is cut from */
    int64_t ints[4];            /* K_I64: the constant's elements */
    size_t n;
    struct gf_value *v;
};

struct gf_lower {
    struct gf_model *m;
    struct gf_graph *g;
    enum gf_fuse_target target;
    int64_t opset; /* ai.onnx */
    struct shared *shared;
    size_t n_shared, cap_shared;
    /* the node being replaced */
    const char *base;     /* its name: the name of the main new node, prefix of others */
    struct gf_node *next; /* new nodes go before it (NULL: at the end) */
    bool oom;
};

struct gf_lower *gf_lower_new(struct gf_model *m, enum gf_fuse_target t)
{
    struct gf_lower *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->m = m;
    l->g = m->graph;
    l->target = t;
    l->opset = gf_model_opset(m, "");
    return l;
}

void gf_lower_free(struct gf_lower *l)
{
    if (l)
        free(l->shared);
    free(l);
}

/* ---- reading values ----------------------------------------------------------- */

static int rank_of(const struct gf_value *v)
{
    return v && v->type.kind == GF_TYPE_TENSOR ? v->type.rank : -1;
}

static bool dtype_in(const struct gf_value *v, unsigned set)
{
    int dt = v && v->type.kind == GF_TYPE_TENSOR ? (int)v->type.dtype : 0;
    return dt > 0 && dt < 32 && (set & DT(dt));
}

/* Equal sizes, or the same symbol. */
static bool same_dim(const struct gf_dim *a, const struct gf_dim *b)
{
    if (a->value >= 0 || b->value >= 0)
        return a->value == b->value;
    return a->param && b->param && strcmp(a->param, b->param) == 0;
}

/* The static size of dim i of v (negative i from the end), or -1. */
static int64_t dim_of(const struct gf_value *v, int i)
{
    int r = rank_of(v);
    if (i < 0)
        i += r;
    return r > 0 && i >= 0 && i < r ? v->type.dims[i].value : -1;
}

/* Normalized axes of the constant input / attribute `axes` of node p
 * against rank r; false when not constant. */
static bool const_axes(const struct gf_node *p, size_t slot, int r, int64_t *axes, size_t *n)
{
    const struct gf_tensor *t = slot < p->n_inputs && p->inputs[slot]
                                    ? gf_value_constant(p->inputs[slot]) : NULL;
    const int64_t *at = NULL;
    size_t k = 0;
    if (!t)
        at = gf_node_attr_ints(p, "axes", &k);
    else
        k = t->nelem;
    if ((!t && !at) || k > 8)
        return false;
    for (size_t i = 0; i < k; i++) {
        int64_t a = t ? gf_tensor_get_i64(t, i) : at[i];
        axes[i] = a < 0 ? a + r : a;
    }
    *n = k;
    return true;
}

/* ---- building ---------------------------------------------------------------------- */

/* Takes fused node n out of the graph; what replaces it goes in its place. */
static void begin(struct gf_lower *l, struct gf_node *n)
{
    l->base = n->name && *n->name ? n->name : n->op_type;
    l->next = n->next;
    gf_graph_remove_node(l->g, n);
}

static enum gf_status finish(struct gf_lower *l, bool *done)
{
    *done = true;
    return l->oom ? gf_error(GF_ERR_NOMEM, "out of memory writing the target's ops") : GF_OK;
}

/* op(in) -> out, named `name` (NULL: the replaced node's name). */
static struct gf_node *add(struct gf_lower *l, const char *op, const char *domain,
                           const char *name, size_t n_in, struct gf_value *const *in,
                           size_t n_out, struct gf_value *const *out)
{
    struct gf_node *n = NULL;
    if (!l->oom && strcmp(domain, MS) == 0 && gf_model_set_opset(l->m, MS, 1) != GF_OK)
        l->oom = true;
    if (!l->oom)
        n = gf_graph_add_node(l->g, op, domain, name ? name : l->base, n_in, in, n_out, out);
    if (!n) {
        l->oom = true;
        return NULL;
    }
    gf_node_move_before(n, l->next);
    return n;
}

/* op(in) -> a new value; node and value named base/suffix. */
static struct gf_value *add1(struct gf_lower *l, const char *op, const char *base,
                             const char *suffix, size_t n_in, struct gf_value *const *in)
{
    char name[256];
    snprintf(name, sizeof(name), "%s/%s", base, suffix);
    struct gf_value *v = l->oom ? NULL : gf_graph_new_value(l->g, NULL, name);
    if (!v || !add(l, op, "", name, n_in, in, 1, &v)) {
        l->oom = true;
        return NULL;
    }
    return v;
}

static void set_int(struct gf_lower *l, struct gf_node *n, const char *name, int64_t v)
{
    if (!n || gf_node_set_attr_int(n, name, v) != GF_OK)
        l->oom = true;
}

static void set_float(struct gf_lower *l, struct gf_node *n, const char *name, float v)
{
    if (!n || gf_node_set_attr_float(n, name, v) != GF_OK)
        l->oom = true;
}

static void set_string(struct gf_lower *l, struct gf_node *n, const char *name, const char *v)
{
    if (!n || gf_node_set_attr_string(n, name, v) != GF_OK)
        l->oom = true;
}

static struct shared *shared_find(struct gf_lower *l, int kind, const struct gf_value *key,
                                  const int64_t *ints, size_t n)
{
    for (size_t i = 0; i < l->n_shared; i++) {
        struct shared *s = &l->shared[i];
        if (s->kind == kind && s->key == key && s->n == n &&
            (!n || memcmp(s->ints, ints, n * sizeof(*ints)) == 0))
            return s;
    }
    return NULL;
}

static struct gf_value *shared_put(struct gf_lower *l, int kind, const struct gf_value *key,
                                   const int64_t *ints, size_t n, struct gf_value *v)
{
    if (!v) {
        l->oom = true;
        return NULL;
    }
    if (l->n_shared == l->cap_shared) {
        size_t cap = l->cap_shared ? 2 * l->cap_shared : 16;
        struct shared *p = realloc(l->shared, cap * sizeof(*p));
        if (!p) {
            l->oom = true;
            return NULL;
        }
        l->shared = p;
        l->cap_shared = cap;
    }
    struct shared s = {kind, key, {0}, n, v};
    if (n)
        memcpy(s.ints, ints, n * sizeof(*ints));
    l->shared[l->n_shared++] = s;
    return v;
}

/* An int64 initializer [n] (n <= 4), one per distinct content. */
static struct gf_value *const_i64(struct gf_lower *l, size_t n, const int64_t *vals)
{
    struct shared *s = shared_find(l, K_I64, NULL, vals, n);
    if (s)
        return s->v;
    int64_t dim = (int64_t)n;
    struct gf_tensor *t = l->oom ? NULL : gf_tensor_new(l->m, NULL, GF_INT64, 1, &dim, vals);
    const char *name = t ? gf_graph_unique_name(l->g, "gf_const") : NULL;
    return shared_put(l, K_I64, NULL, vals, n, name ? gf_graph_add_initializer(l->g, name, t)
                                                    : NULL);
}

/* An initializer of ones, dtype dt, shape dims[rank]. */
static struct gf_value *ones(struct gf_lower *l, enum gf_dtype dt, int rank, const int64_t *dims)
{
    struct gf_tensor *t = l->oom ? NULL : gf_tensor_new(l->m, NULL, dt, rank, dims, NULL);
    const char *name = t ? gf_graph_unique_name(l->g, "gf_ones") : NULL;
    struct gf_value *v = name ? gf_graph_add_initializer(l->g, name, t) : NULL;
    if (!v) {
        l->oom = true;
        return NULL;
    }
    for (size_t i = 0; i < t->nelem; i++) {
        switch (dt) {
        case GF_FLOAT: ((float *)t->data)[i] = 1.0f; break;
        case GF_DOUBLE: ((double *)t->data)[i] = 1.0; break;
        case GF_FLOAT16: ((uint16_t *)t->data)[i] = gf_float_to_half(1.0f); break;
        default: ((uint16_t *)t->data)[i] = gf_float_to_bf16(1.0f); break;
        }
    }
    return v;
}

/* ---- normalizations ---------------------------------------------------------------- */

struct norm {
    bool rms, add;
    struct gf_value *x, *r, *w, *b, *y, *s;
    struct gf_value *mean, *istd; /* LayerNorm's optional statistics (NULL: omitted) */
    int rank, axis, brank; /* X's rank, first normalized axis, normalized rank */
    int64_t block[8];      /* the normalized dims (static) */
    float eps;
};

/* p has exactly the normalized dims (leading ones may be missing). */
static bool fits_block(const struct gf_value *p, const struct norm *nm)
{
    int r = rank_of(p);
    if (!p)
        return true;
    if (r < 0 || r > nm->brank)
        return false;
    for (int i = 0; i < nm->brank; i++) {
        int k = i - (nm->brank - r);
        int64_t d = k >= 0 ? p->type.dims[k].value : 1;
        if (d != nm->block[i])
            return false;
    }
    return true;
}

/* Reads a fused norm node; false for forms no target op has (epsilon
 * outside the root, a weight offset) and for unknown normalized dims. */
static bool norm_read(const struct gf_node *n, struct norm *nm)
{
    size_t k = 0;
    memset(nm, 0, sizeof(*nm));
    nm->rms = n->op == GF_OP_RMS_NORM || n->op == GF_OP_ADD_RMS_NORM;
    nm->add = n->op == GF_OP_ADD_RMS_NORM || n->op == GF_OP_ADD_LAYER_NORM;
    nm->x = n->inputs[k++];
    nm->r = nm->add ? n->inputs[k++] : NULL;
    nm->w = k < n->n_inputs ? n->inputs[k++] : NULL;
    nm->b = !nm->rms && k < n->n_inputs ? n->inputs[k] : NULL;
    nm->y = n->outputs[0];
    nm->s = nm->add ? n->outputs[1] : NULL;
    size_t ks = nm->add ? 2 : 1;
    nm->mean = !nm->rms && ks < n->n_outputs ? n->outputs[ks] : NULL;
    nm->istd = !nm->rms && ks + 1 < n->n_outputs ? n->outputs[ks + 1] : NULL;
    nm->eps = gf_node_attr_float(n, "epsilon", nm->rms ? 1e-6f : 1e-5f);
    if (nm->rms && (gf_node_attr_int(n, "eps_outside", 0) != 0 ||
                    gf_node_attr_float(n, "weight_offset", 0.0f) != 0.0f))
        return false;
    int64_t axis = gf_node_attr_int(n, "axis", -1);
    nm->rank = rank_of(nm->x);
    if (nm->rank < 1 || nm->rank > 8 || axis < -nm->rank || axis >= nm->rank || !nm->y ||
        (nm->add && (!nm->r || !nm->s)))
        return false;
    nm->axis = (int)(axis < 0 ? axis + nm->rank : axis);
    nm->brank = nm->rank - nm->axis;
    for (int i = 0; i < nm->brank; i++)
        if ((nm->block[i] = nm->x->type.dims[nm->axis + i].value) < 0)
            return false;
    return fits_block(nm->w, nm) && fits_block(nm->b, nm);
}

/* W, or ones over the normalized dims (the target ops need a scale). */
static struct gf_value *norm_scale(struct gf_lower *l, const struct norm *nm)
{
    return nm->w ? nm->w : ones(l, nm->x->type.dtype, nm->brank, nm->block);
}

/* The single-input norm: (Simplified)LayerNormalization / RMSNormalization;
 * LayerNorm's Mean and InvStdDev are LayerNormalization's outputs 1 and 2
 * (stash_type 1: float, as the fused op's). */
static void norm_node(struct gf_lower *l, const struct norm *nm, const char *op,
                      struct gf_value *x)
{
    struct gf_value *in[3] = {x, norm_scale(l, nm), nm->b};
    struct gf_value *out[3] = {nm->y, nm->mean, nm->istd};
    size_t n_out = nm->istd ? 3 : nm->mean ? 2 : 1;
    struct gf_node *o = add(l, op, "", NULL, nm->b ? 3 : 2, in, n_out, out);
    set_int(l, o, "axis", nm->axis - nm->rank);
    set_float(l, o, "epsilon", nm->eps);
}

/* ort: the Skip ops take X [tokens, H] or [B, S, H], gamma / beta [H]. */
static enum gf_status lower_norm_ort(struct gf_lower *l, struct gf_node *n, bool *done)
{
    struct norm nm;
    if (!norm_read(n, &nm) || !dtype_in(nm.x, DT_NORM))
        return GF_OK;
    if (nm.add && (nm.mean || nm.istd)) /* kept as the function call */
        return GF_OK;
    if (nm.add && (nm.axis != nm.rank - 1 || nm.rank < 2 || nm.rank > 3 ||
                   (nm.w && rank_of(nm.w) != 1) || (nm.b && rank_of(nm.b) != 1)))
        return GF_OK;
    begin(l, n);
    if (!nm.add) {
        norm_node(l, &nm, nm.rms ? "SimplifiedLayerNormalization" : "LayerNormalization", nm.x);
        return finish(l, done);
    }
    struct gf_value *in[4] = {nm.x, nm.r, norm_scale(l, &nm), nm.b};
    struct gf_value *out[4] = {nm.y, NULL, NULL, nm.s}; /* output, mean, inv_std_var, sum */
    const char *op = nm.rms ? "SkipSimplifiedLayerNormalization" : "SkipLayerNormalization";
    struct gf_node *o = add(l, op, MS, NULL, nm.b ? 4 : 3, in, 4, out);
    set_float(l, o, "epsilon", nm.eps); /* their default is 1e-12 */
    return finish(l, done);
}

/* onnx: LayerNormalization from opset 17, RMSNormalization from 23; the
 * Add forms as Add then the norm. */
static enum gf_status lower_norm_onnx(struct gf_lower *l, struct gf_node *n, bool *done)
{
    struct norm nm;
    if (!norm_read(n, &nm) || !dtype_in(nm.x, DT_NORM) || l->opset < (nm.rms ? 23 : 17))
        return GF_OK;
    begin(l, n);
    if (nm.add) {
        struct gf_value *in[2] = {nm.x, nm.r};
        char name[256];
        snprintf(name, sizeof(name), "%s/add", l->base);
        add(l, "Add", "", name, 2, in, 1, &nm.s);
    }
    norm_node(l, &nm, nm.rms ? "RMSNormalization" : "LayerNormalization", nm.add ? nm.s : nm.x);
    return finish(l, done);
}

/* ---- activations --------------------------------------------------------------------- */

/* "gelu" / "gelu_tanh" for Gelu's approximate "none" / "tanh", else NULL. */
static const char *gelu_kind(const struct gf_node *n)
{
    const char *a = gf_node_attr_string(n, "approximate", "none");
    return strcmp(a, "none") == 0 ? "gelu" : strcmp(a, "tanh") == 0 ? "gelu_tanh" : NULL;
}

static enum gf_status lower_gelu(struct gf_lower *l, struct gf_node *n, bool *done)
{
    const char *kind = gelu_kind(n);
    struct gf_value *x = n->inputs[0], *y = n->outputs[0];
    bool ort = l->target == GF_TARGET_ORT, tanh = kind && strcmp(kind, "gelu_tanh") == 0;
    if (!kind || !dtype_in(x, ort ? DT_F32 : DT_ALL) || (!ort && l->opset < 20))
        return GF_OK;
    begin(l, n);
    struct gf_node *o = add(l, ort ? (tanh ? "FastGelu" : "Gelu") : "Gelu", ort ? MS : "", NULL,
                            1, &x, 1, &y);
    if (!ort && tanh)
        set_string(l, o, "approximate", "tanh");
    return finish(l, done);
}

/* ort: x * sigmoid(alpha x) with alpha 1. */
static enum gf_status lower_silu(struct gf_lower *l, struct gf_node *n, bool *done)
{
    if (l->target != GF_TARGET_ORT || !dtype_in(n->inputs[0], DT_F32))
        return GF_OK;
    struct gf_value *x = n->inputs[0], *y = n->outputs[0];
    begin(l, n);
    set_float(l, add(l, "QuickGelu", MS, NULL, 1, &x, 1, &y), "alpha", 1.0f);
    return finish(l, done);
}

/* ---- MatMulEpilogue ------------------------------------------------------------------ */

struct mme {
    struct gf_value *a, *b, *bias, *res, *y;
    int64_t ta, tb;
    float alpha, beta;
    const char *act;
};

static void mme_read(const struct gf_node *n, struct mme *e)
{
    e->a = n->inputs[0];
    e->b = n->inputs[1];
    e->bias = n->n_inputs > 2 ? n->inputs[2] : NULL;
    e->res = n->n_inputs > 3 ? n->inputs[3] : NULL;
    e->y = n->outputs[0];
    e->ta = gf_node_attr_int(n, "transA", 0);
    e->tb = gf_node_attr_int(n, "transB", 0);
    e->alpha = gf_node_attr_float(n, "alpha", 1.0f);
    e->beta = gf_node_attr_float(n, "beta", 1.0f);
    e->act = gf_node_attr_string(n, "activation", "");
}

/* A bias BiasGelu / FastGelu take: [N], N the product's last dim. */
static bool bias_1d(const struct mme *e)
{
    int64_t n = dim_of(e->bias, 0);
    return rank_of(e->bias) == 1 && n >= 0 && n == dim_of(e->y, -1);
}

/* A @ B as MatMul, or FusedMatMul {transA, transB, alpha} (ort). */
static struct gf_value *mme_product(struct gf_lower *l, const struct mme *e, struct gf_value *out)
{
    char name[256];
    struct gf_value *in[2] = {e->a, e->b};
    bool plain = !e->ta && !e->tb && e->alpha == 1.0f;
    snprintf(name, sizeof(name), "%s/matmul", l->base);
    struct gf_value *p = out ? out : l->oom ? NULL : gf_graph_new_value(l->g, NULL, name);
    struct gf_node *o = add(l, plain ? "MatMul" : "FusedMatMul", plain ? "" : MS,
                            out ? NULL : name, 2, in, 1, &p);
    if (!plain) {
        set_int(l, o, "transA", e->ta != 0);
        set_int(l, o, "transB", e->tb != 0);
        set_float(l, o, "alpha", e->alpha);
    }
    return o ? p : NULL;
}

/* ort: a bare (scaled, transposed) product is FusedMatMul; with a GELU
 * (and a bias [N] at beta 1) the product then BiasGelu / FastGelu / Gelu. */
static enum gf_status lower_mme_ort(struct gf_lower *l, struct gf_node *n, bool *done)
{
    struct mme e;
    mme_read(n, &e);
    bool gelu = strcmp(e.act, "gelu") == 0, gtanh = strcmp(e.act, "gelu_tanh") == 0;
    if (e.res || !dtype_in(e.a, DT_F32))
        return GF_OK;
    if (!*e.act && !e.bias) {
        begin(l, n);
        mme_product(l, &e, e.y);
        return finish(l, done);
    }
    if (!(gelu || gtanh) || (e.bias && (e.beta != 1.0f || !bias_1d(&e))))
        return GF_OK;
    begin(l, n);
    struct gf_value *in[2] = {mme_product(l, &e, NULL), e.bias};
    add(l, gtanh ? "FastGelu" : e.bias ? "BiasGelu" : "Gelu", MS, NULL, e.bias ? 2 : 1, in, 1,
        &e.y);
    return finish(l, done);
}

/* onnx (opset 20): gelu(A @ B + Bias) as MatMul, Add, Gelu. */
static enum gf_status lower_mme_onnx(struct gf_lower *l, struct gf_node *n, bool *done)
{
    struct mme e;
    mme_read(n, &e);
    bool gelu = strcmp(e.act, "gelu") == 0, gtanh = strcmp(e.act, "gelu_tanh") == 0;
    if (l->opset < 20 || !(gelu || gtanh) || e.res || e.ta || e.tb || e.alpha != 1.0f ||
        (e.bias && e.beta != 1.0f) || !dtype_in(e.a, DT_ALL))
        return GF_OK;
    begin(l, n);
    struct gf_value *p = mme_product(l, &e, NULL);
    if (e.bias) {
        struct gf_value *in[2] = {p, e.bias};
        p = add1(l, "Add", l->base, "bias", 2, in);
    }
    struct gf_node *o = add(l, "Gelu", "", NULL, 1, &p, 1, &e.y);
    if (gtanh)
        set_string(l, o, "approximate", "tanh");
    return finish(l, done);
}

/* ---- RoPE ------------------------------------------------------------------------------ */

/* Constant t has rows (last axis, even length) equal in their halves. */
static bool const_halves(const struct gf_tensor *t)
{
    int64_t d = t->rank > 0 ? t->dims[t->rank - 1] : 0;
    if (d <= 0 || d % 2 || !t->data || t->dtype == GF_STRING)
        return false;
    for (size_t i = 0; i < t->nelem; i++)
        if ((int64_t)(i % (size_t)d) < d / 2 &&
            gf_tensor_get_f64(t, i) != gf_tensor_get_f64(t, i + (size_t)d / 2))
            return false;
    return true;
}

/* The operand of Mul / Div by a one-element constant (Div: the divisor). */
static const struct gf_value *scaled_operand(const struct gf_node *p)
{
    for (size_t k = 0; k < 2; k++) {
        const struct gf_tensor *t = gf_value_constant(p->inputs[k]);
        if (t && t->nelem == 1 && (p->op == GF_OP_MUL || k == 1))
            return p->inputs[1 - k];
    }
    return NULL;
}

/* The data input of an op that leaves the last axis of its output (rank
 * r) as it is: Unsqueeze not adding the last axis, Gather on another. */
static const struct gf_value *keeps_last_axis(const struct gf_node *p, int r)
{
    int64_t axes[8];
    size_t n = 0;
    if (p->op == GF_OP_UNSQUEEZE) {
        if (r < 1 || !const_axes(p, 1, r, axes, &n))
            return NULL;
        for (size_t i = 0; i < n; i++)
            if (axes[i] == r - 1)
                return NULL;
        return p->inputs[0];
    }
    int rd = rank_of(p->inputs[0]);
    int64_t axis = gf_node_attr_int(p, "axis", 0);
    return rd > 0 && (axis < 0 ? axis + rd : axis) < rd - 1 ? p->inputs[0] : NULL;
}

/* True when every row of v along its last axis has equal halves
 * (v[..., j] = v[..., j + d/2]), as the half-width caches of the
 * RotaryEmbedding ops assume: v is Concat(f, f) on the last axis seen
 * through elementwise ops, scalar scaling, Unsqueeze and Gather on other
 * axes (Hugging Face: emb = cat(freqs, freqs); cos = emb.cos() * scale),
 * or a constant whose rows are so. */
static bool equal_halves(const struct gf_value *v)
{
    for (int depth = 0; v && depth < 32; depth++) {
        const struct gf_tensor *t = gf_value_constant(v);
        const struct gf_node *p = v->producer;
        int r = rank_of(v);
        int64_t axis;
        if (t)
            return const_halves(t);
        if (!p)
            return false;
        switch (p->op) {
        case GF_OP_CAST: case GF_OP_IDENTITY: case GF_OP_COS: case GF_OP_SIN: case GF_OP_NEG:
            v = p->inputs[0];
            break;
        case GF_OP_MUL: case GF_OP_DIV:
            v = scaled_operand(p);
            break;
        case GF_OP_UNSQUEEZE: case GF_OP_GATHER:
            v = keeps_last_axis(p, r);
            break;
        case GF_OP_CONCAT:
            axis = gf_node_attr_int(p, "axis", 0);
            return r > 0 && (axis < 0 ? axis + r : axis) == r - 1 && p->n_inputs == 2 &&
                   p->inputs[0] && p->inputs[0] == p->inputs[1];
        default:
            return false;
        }
    }
    return false;
}

/* Cos or Sin c: X's dtype, [.., S, d] with X [B, N, S, d] and only ones
 * before S (one row per position, the same for every batch and head),
 * equal halves. */
static bool rope_table_ok(const struct gf_value *c, const struct gf_value *x)
{
    int rc = rank_of(c), rx = rank_of(x);
    if (rc < 2 || rc > rx || c->type.dtype != x->type.dtype)
        return false;
    const struct gf_dim *cd = c->type.dims, *xd = x->type.dims;
    if (!same_dim(&cd[rc - 1], &xd[rx - 1]) || !same_dim(&cd[rc - 2], &xd[rx - 2]))
        return false;
    for (int i = 0; i < rc - 2; i++)
        if (cd[i].value != 1)
            return false;
    return equal_halves(c);
}

/* The cache cut from table c: the first halves of its rows, [S, d/2]
 * (com.microsoft) or [1, S, d/2] (ONNX, expanded to the batch later). */
static struct gf_value *rope_cache(struct gf_lower *l, struct gf_value *c, int64_t d)
{
    bool ms = l->target == GF_TARGET_ORT;
    int kind = ms ? K_ROPE_MS : K_ROPE_ONNX;
    struct shared *s = shared_find(l, kind, c, NULL, 0);
    if (s)
        return s->v;
    int64_t zero = 0, half = d / 2, last = -1, shape[3] = {1, -1, d / 2};
    struct gf_value *sl[4] = {c, const_i64(l, 1, &zero), const_i64(l, 1, &half),
                              const_i64(l, 1, &last)};
    struct gf_value *h = add1(l, "Slice", c->name, "half", 4, sl);
    struct gf_value *rs[2] = {h, ms ? const_i64(l, 2, shape + 1) : const_i64(l, 3, shape)};
    return shared_put(l, kind, c, NULL, 0, add1(l, "Reshape", c->name, "cache", 2, rs));
}

/* com.microsoft.RotaryEmbedding(X, [0], cos, sin): positions 0..S-1. */
static void rope_ms(struct gf_lower *l, struct gf_value *const *in, struct gf_value *y,
                    int64_t d)
{
    int64_t zero = 0;
    struct gf_value *args[4] = {in[0], const_i64(l, 1, &zero), rope_cache(l, in[1], d),
                                rope_cache(l, in[2], d)};
    add(l, "RotaryEmbedding", MS, NULL, 4, args, 1, &y);
}

/* RotaryEmbedding-23(X, cos, sin) with the caches expanded to [B, S, d/2]
 * (without position ids its caches are per batch). */
static void rope_onnx(struct gf_lower *l, struct gf_value *const *in, struct gf_value *y,
                      int64_t d)
{
    int64_t ones2[2] = {1, 1};
    struct gf_value *x = in[0];
    struct gf_value *batch = add1(l, "Shape", l->base, "batch", 1, &x);
    if (batch) {
        set_int(l, batch->producer, "start", 0);
        set_int(l, batch->producer, "end", 1);
    }
    struct gf_value *cat[2] = {batch, const_i64(l, 2, ones2)};
    struct gf_value *shape = add1(l, "Concat", l->base, "expand_shape", 2, cat);
    if (shape)
        set_int(l, shape->producer, "axis", 0);
    struct gf_value *ec[2] = {rope_cache(l, in[1], d), shape};
    struct gf_value *es[2] = {rope_cache(l, in[2], d), shape};
    struct gf_value *args[3] = {x, add1(l, "Expand", l->base, "cos", 2, ec),
                                add1(l, "Expand", l->base, "sin", 2, es)};
    add(l, "RotaryEmbedding", "", NULL, 3, args, 1, &y);
}

/* X [B, N, S, d] (static even d) with tables of one row per position. */
static enum gf_status lower_rope(struct gf_lower *l, struct gf_node *n, bool *done)
{
    bool ms = l->target == GF_TARGET_ORT;
    struct gf_value *in[3] = {n->inputs[0], n->inputs[1], n->inputs[2]}, *y = n->outputs[0];
    int64_t d = dim_of(in[0], -1);
    unsigned dts = ms ? DT(GF_FLOAT) | DT(GF_FLOAT16) : DT_NORM;
    if (rank_of(in[0]) != 4 || d <= 0 || d % 2 || !dtype_in(in[0], dts) ||
        l->opset < (ms ? 13 : 23) || !rope_table_ok(in[1], in[0]) || !rope_table_ok(in[2], in[0]))
        return GF_OK;
    begin(l, n);
    if (ms)
        rope_ms(l, in, y, d);
    else
        rope_onnx(l, in, y, d);
    return finish(l, done);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

enum gf_status gf_lower_node(struct gf_lower *l, struct gf_node *n, bool *done)
{
    bool ort = l->target == GF_TARGET_ORT;
    *done = false;
    switch (n->op) {
    case GF_OP_RMS_NORM: case GF_OP_ADD_RMS_NORM: case GF_OP_LAYER_NORM: case GF_OP_ADD_LAYER_NORM:
        return ort ? lower_norm_ort(l, n, done) : lower_norm_onnx(l, n, done);
    case GF_OP_FUSED_GELU:
        return lower_gelu(l, n, done);
    case GF_OP_SILU:
        return lower_silu(l, n, done);
    case GF_OP_MATMUL_EPILOGUE:
        return ort ? lower_mme_ort(l, n, done) : lower_mme_onnx(l, n, done);
    case GF_OP_ROPE:
        return lower_rope(l, n, done);
    default:
        return GF_OK; /* SwiGLU, GeGLU, the losses: no op of either target */
    }
}
