/*
 * Shape and type inference for the ai.onnx ops of ops.def (opsets 1..23).
 *
 * gf_graph_infer_shapes() walks the nodes in order and gives every output a
 * dtype and a static or symbolic shape.  A type already on a value (from the
 * file's value_info) is refined, never contradicted: a known dim that
 * disagrees with inference is an error naming node, op and tensor.
 *
 * Shapes that depend on tensor values (Reshape's target, Slice's starts,
 * Squeeze's axes, ...) are read from "shape values": small integer tensors
 * whose elements are known, symbolic or unknown.  They come from
 * initializers and Constant nodes and are propagated through the chains
 * exporters build (Shape -> Gather -> Unsqueeze -> Concat -> Reshape,
 * Shape -> Slice, Cast, arithmetic, Equal/Where, Range ...).  They live in
 * a side table indexed by value id, freed before returning.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h" /* gf_node_label */
#include "opcheck.h"   /* the rules kernels share */

#define MAX_RANK GF_SHAPE_MAX_RANK /* ranks above this are treated as unknown */
#define MAX_SV 4096      /* longest integer tensor tracked by value */
#define LATEST_OPSET 23  /* assumed when the model imports no ai.onnx */

/* ---- types --------------------------------------------------------------- */

/* One element of a tracked integer tensor. */
struct elem {
    bool known;
    int64_t v;       /* when known */
    const char *sym; /* when not known: symbolic name, or NULL */
};

/* A small integer tensor of rank 0 or 1 whose elements we track. */
struct sval {
    struct sval *next; /* in ctx->extra when not owned by a table */
    int rank;
    size_t n;
    struct elem e[];
};

/* One graph being inferred; subgraphs chain to their parent. */
struct scope {
    const struct gf_graph *g;
    struct sval **sv; /* by value id; NULL: nothing known */
    size_t n;
    struct scope *parent;
};

struct ctx {
    struct gf_node *n; /* node being inferred */
    struct scope *sc;
    int64_t opset;
    struct sval *extra; /* svals owned by no table, freed at the end */
    gf_shape_value_fn known_fn; /* told about fully known integer outputs */
    void *known_ctx;
};

typedef enum gf_status (*infer_fn)(struct ctx *c);

/* ---- messages ------------------------------------------------------------ */

/* GF_ERR_INVALID: "node 'x' (Op): tensor 't': <message>". */
static enum gf_status fail(struct ctx *c, const struct gf_value *v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum gf_status fail(struct ctx *c, const struct gf_value *v, const char *fmt, ...)
{
    char who[256], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    gf_node_label(c->n, who, sizeof(who));
    if (v && v->name)
        return gf_error(GF_ERR_INVALID, "%s: tensor '%s': %s", who, v->name, msg);
    return gf_error(GF_ERR_INVALID, "%s: %s", who, msg);
}

/* ---- dims and shapes ----------------------------------------------------- */

/* Product of dims: known, a lone symbol (times ones), or unknown. */
static struct gf_dim dims_product(const struct gf_dim *d, int n)
{
    int64_t p = 1;
    const struct gf_dim *sym = NULL;
    bool unknown = false;
    for (int i = 0; i < n; i++) {
        if (gf_dim_known(&d[i])) {
            if (__builtin_mul_overflow(p, d[i].value, &p))
                return gf_dim_unknown();
        } else if (d[i].param && !sym) {
            sym = &d[i];
        } else {
            unknown = true;
        }
    }
    if (p == 0)
        return gf_dim_of(0);
    if (unknown)
        return gf_dim_unknown();
    if (sym)
        return p == 1 ? *sym : gf_dim_unknown();
    return gf_dim_of(p);
}

static void shape_unknown(struct gf_shape *s)
{
    s->rank = -1;
}

/* A shape of `rank` unknown dims (rank < 0 or too large: unknown rank). */
static void shape_blank(struct gf_shape *s, int64_t rank)
{
    s->rank = rank >= 0 && rank <= MAX_RANK ? (int)rank : -1;
    for (int i = 0; i < s->rank; i++)
        s->d[i] = gf_dim_unknown();
}

static void shape_of(const struct gf_value *v, struct gf_shape *s)
{
    s->rank = -1;
    if (!v || v->type.kind != GF_TYPE_TENSOR || v->type.rank < 0 ||
        v->type.rank > MAX_RANK || (v->type.rank > 0 && !v->type.dims))
        return;
    s->rank = v->type.rank;
    for (int i = 0; i < s->rank; i++) {
        s->d[i] = v->type.dims[i];
        if (s->d[i].value < 0)
            s->d[i].value = -1;
    }
}

static enum gf_dtype dtype_of(const struct gf_value *v)
{
    if (!v || v->type.kind != GF_TYPE_TENSOR || !gf_dtype_valid(v->type.dtype))
        return GF_UNDEFINED;
    return v->type.dtype;
}

static bool is_float_dtype(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_DOUBLE || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

/* ---- inputs, outputs, attributes ----------------------------------------- */

static struct gf_value *in(const struct ctx *c, size_t i)
{
    return i < c->n->n_inputs ? c->n->inputs[i] : NULL;
}

static struct gf_value *out(const struct ctx *c, size_t i)
{
    return i < c->n->n_outputs ? c->n->outputs[i] : NULL;
}

/* Required input i, or an error naming the node. */
static enum gf_status need(struct ctx *c, size_t i, struct gf_value **v)
{
    *v = in(c, i);
    if (!*v)
        return fail(c, NULL, "missing input %zu", i);
    return GF_OK;
}

/* The shape of input i (or NULL when it is omitted) for a rule. */
static const struct gf_shape *rule_shape(struct ctx *c, size_t i, struct gf_shape *s)
{
    if (!in(c, i))
        return NULL;
    shape_of(in(c, i), s);
    return s;
}

static enum gf_status need_all(struct ctx *c, size_t count)
{
    struct gf_value *v;
    for (size_t i = 0; i < count; i++)
        if (need(c, i, &v))
            return GF_ERR_INVALID;
    return GF_OK;
}

static const struct gf_attr *attr_typed(struct ctx *c, const char *name,
                                        enum gf_attr_type want, enum gf_status *st)
{
    const struct gf_attr *a = gf_node_attr(c->n, name);
    *st = GF_OK;
    if (a && a->type != want) {
        *st = fail(c, NULL, "attribute '%s' is %s, expected %s", name,
                   gf_attr_type_name(a->type), gf_attr_type_name(want));
        return NULL;
    }
    return a;
}

static enum gf_status attr_int(struct ctx *c, const char *name, int64_t dflt, int64_t *v)
{
    enum gf_status st;
    const struct gf_attr *a = attr_typed(c, name, GF_ATTR_INT, &st);
    *v = a ? a->i : dflt;
    return st;
}

/* INTS attribute: *v NULL when absent. */
static enum gf_status attr_ints(struct ctx *c, const char *name, const int64_t **v,
                                size_t *n)
{
    enum gf_status st;
    const struct gf_attr *a = attr_typed(c, name, GF_ATTR_INTS, &st);
    static const int64_t none[1];
    *v = a ? (a->ints ? a->ints : none) : NULL;
    *n = a && a->ints ? a->n : 0;
    return st;
}

/* STRING attribute copied NUL-terminated into buf (dflt when absent). */
static enum gf_status attr_str(struct ctx *c, const char *name, const char *dflt,
                               char *buf, size_t len)
{
    enum gf_status st;
    const struct gf_attr *a = attr_typed(c, name, GF_ATTR_STRING, &st);
    if (!a) {
        snprintf(buf, len, "%s", dflt);
        return st;
    }
    size_t k = a->s.len < len - 1 ? a->s.len : len - 1;
    if (k)
        memcpy(buf, a->s.data, k);
    buf[k] = 0;
    if (memchr(buf, 0, k) || a->s.len >= len)
        return fail(c, NULL, "attribute '%s' has a bad value", name);
    return GF_OK;
}

/* Normalizes axis into [0, rank); error when out of range. */
static enum gf_status norm_axis(struct ctx *c, const struct gf_value *v, int64_t axis,
                                int rank, int *out)
{
    int64_t a = axis < 0 ? axis + rank : axis;
    *out = 0;
    if (axis < -(int64_t)rank || a >= rank || a < 0)
        return fail(c, v, "axis %lld out of range for rank %d", (long long)axis, rank);
    *out = (int)a;
    return GF_OK;
}

/* Normalizes a list of axes into flags[rank]; repeated axes are an error. */
static enum gf_status norm_axes(struct ctx *c, const struct gf_value *v,
                                const int64_t *axes, size_t n, int rank, bool *flags)
{
    memset(flags, 0, sizeof(bool) * (size_t)(rank > 0 ? rank : 0));
    for (size_t i = 0; i < n; i++) {
        int a = 0;
        if (norm_axis(c, v, axes[i], rank, &a))
            return GF_ERR_INVALID;
        if (flags[a])
            return fail(c, v, "axis %lld repeated", (long long)axes[i]);
        flags[a] = true;
    }
    return GF_OK;
}

/* ---- setting output types ------------------------------------------------ */

/* Merges inferred dim `b` into the file's dim `a`. */
static bool merge_dim(const struct gf_dim *a, const struct gf_dim *b, struct gf_dim *out)
{
    if (gf_dim_known(a) && gf_dim_known(b) && a->value != b->value)
        return false;
    *out = *a;
    if (!gf_dim_known(a) && (gf_dim_known(b) || (!a->param && b->param))) {
        out->value = b->value;
        out->param = b->param;
    }
    if (!out->denotation)
        out->denotation = b->denotation;
    return true;
}

/* True when v's type is already exactly (dt, s). */
static bool type_is(const struct gf_value *v, enum gf_dtype dt, const struct gf_shape *s)
{
    const struct gf_type *t = &v->type;
    if (t->kind != GF_TYPE_TENSOR || t->dtype != dt || t->rank != s->rank)
        return false;
    for (int i = 0; i < s->rank; i++) {
        const struct gf_dim *a = &t->dims[i], *b = &s->d[i];
        if (a->value != b->value || (a->param != b->param &&
            (!a->param || !b->param || strcmp(a->param, b->param) != 0)))
            return false;
    }
    return true;
}

/* A fully known shape whose elements, or bytes of dtype dt, do not fit in
 * int64 is refused: no buffer can hold it, and the sizes computed from it
 * later (planning, constant folding, kernels) would wrap. */
static enum gf_status check_size(struct ctx *c, const struct gf_value *v, enum gf_dtype dt,
                                 const struct gf_shape *s)
{
    int64_t n = 1, bytes;
    bool zero = false, over = false;
    char b[256];
    for (int k = 0; k < s->rank; k++) {
        if (!gf_dim_known(&s->d[k]))
            return GF_OK;
        zero = zero || s->d[k].value == 0;
        over = over || __builtin_mul_overflow(n, s->d[k].value, &n);
    }
    if (zero || s->rank < 0)
        return GF_OK;
    if (over)
        return fail(c, v, "shape %s: element count overflows", gf_shape_str(s, b, sizeof(b)));
    if (!gf_dtype_valid(dt) || dt == GF_STRING)
        return GF_OK;
    if (dt == GF_UINT4 || dt == GF_INT4)
        return GF_OK; /* half a byte each: fits whenever the count does */
    if (__builtin_mul_overflow(n, (int64_t)gf_dtype_size(dt), &bytes))
        return fail(c, v, "shape %s of %s: byte count overflows",
                    gf_shape_str(s, b, sizeof(b)), gf_dtype_name(dt));
    return GF_OK;
}

/* Gives output i dtype dt and shape s, refining and checking the type the
 * value already has.  dt UNDEFINED / s->rank -1 mean "not known". */
static enum gf_status set_out(struct ctx *c, size_t i, enum gf_dtype dt, const struct gf_shape *s)
{
    struct gf_value *v = out(c, i);
    char b1[256], b2[256];
    if (!v)
        return GF_OK;
    if (v->type.kind == GF_TYPE_OTHER && (dt || s->rank >= 0))
        return fail(c, v, "the model types it as a non-tensor, inference gives a tensor");
    if (v->type.kind == GF_TYPE_OTHER)
        return GF_OK;
    struct gf_shape old, res;
    enum gf_dtype odt = dtype_of(v);
    shape_of(v, &old);
    if (odt && dt && odt != dt)
        return fail(c, v, "the model says %s, inference gives %s", gf_dtype_name(odt),
                    gf_dtype_name(dt));
    if (old.rank >= 0 && s->rank >= 0 && old.rank != s->rank)
        return fail(c, v, "the model says shape %s, inference gives %s",
                    gf_shape_str(&old, b1, sizeof(b1)), gf_shape_str(s, b2, sizeof(b2)));
    res = old.rank >= 0 ? old : *s;
    for (int k = 0; old.rank >= 0 && s->rank >= 0 && k < res.rank; k++)
        if (!merge_dim(&old.d[k], &s->d[k], &res.d[k]))
            return fail(c, v, "the model says shape %s, inference gives %s",
                        gf_shape_str(&old, b1, sizeof(b1)), gf_shape_str(s, b2, sizeof(b2)));
    if (!odt)
        odt = dt;
    if (check_size(c, v, odt ? odt : dt, &res))
        return GF_ERR_INVALID;
    if (!odt)
        return GF_OK; /* nothing to record without an element type */
    if ((v->type.kind == GF_TYPE_TENSOR && v->type.rank > MAX_RANK) || type_is(v, odt, &res))
        return GF_OK; /* beyond what we track, or unchanged */
    gf_value_set_tensor_type(v, odt, res.rank, res.rank > 0 ? res.d : NULL);
    return GF_OK;
}

/* Output i gets input j's dtype and the shape s. */
static enum gf_status set_out_like(struct ctx *c, size_t i, size_t j, const struct gf_shape *s)
{
    return set_out(c, i, dtype_of(in(c, j)), s);
}

/* ---- shape values -------------------------------------------------------- */

static struct sval *sv_alloc(struct ctx *c, int rank, size_t n)
{
    struct sval *s = calloc(1, sizeof(*s) + n * sizeof(struct elem));
    if (!s)
        return NULL;
    s->rank = rank;
    s->n = n;
    s->next = c->extra; /* owned by the ctx until sv_put moves it */
    c->extra = s;
    return s;
}

static struct elem elem_of(int64_t v)
{
    return (struct elem){.known = true, .v = v};
}

static struct elem elem_from_dim(const struct gf_dim *d)
{
    if (gf_dim_known(d))
        return elem_of(d->value);
    return (struct elem){.sym = d->param};
}

/* A dim from a shape element; negative known values are the caller's. */
static struct gf_dim dim_from_elem(const struct elem *e)
{
    if (e->known)
        return e->v >= 0 ? gf_dim_of(e->v) : gf_dim_unknown();
    return (struct gf_dim){.value = -1, .param = e->sym};
}

static bool sv_all_known(const struct sval *s)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (!s->e[i].known)
            return false;
    return s != NULL;
}

/* Elements of a small numeric tensor: integers, and floats with integral
 * values (OneHot's depth); NULL when too large or without data. */
static struct sval *sv_from_tensor(struct ctx *c, const struct gf_tensor *t)
{
    bool is_int = t && (gf_dtype_is_int(t->dtype) || t->dtype == GF_BOOL);
    if (!t || (!is_int && !is_float_dtype(t->dtype)) || t->rank > 1 ||
        t->nelem > MAX_SV || (t->rank == 1 && (!t->dims || (size_t)t->dims[0] != t->nelem)) ||
        (t->rank == 0 && t->nelem != 1) || !t->data ||
        t->nbytes < gf_dtype_bytes(t->dtype, t->nelem))
        return NULL;
    struct sval *s = sv_alloc(c, t->rank, t->nelem);
    for (size_t i = 0; s && i < t->nelem; i++) {
        if (is_int) {
            s->e[i] = elem_of(gf_tensor_get_i64(t, i));
            continue;
        }
        double d = gf_tensor_get_f64(t, i);
        if (d == floor(d) && fabs(d) < 9e18)
            s->e[i] = elem_of((int64_t)d);
    }
    return s;
}

static struct scope *scope_of(const struct ctx *c, const struct gf_value *v)
{
    for (struct scope *sc = c->sc; sc; sc = sc->parent)
        if (sc->g == v->graph)
            return sc;
    return NULL;
}

static struct sval **sv_slot(const struct ctx *c, const struct gf_value *v)
{
    struct scope *sc = v ? scope_of(c, v) : NULL;
    if (!sc || v->id < 0 || (size_t)v->id >= sc->n || sc->g->values[v->id] != v)
        return NULL;
    return &sc->sv[v->id];
}

/* Unlinks s from ctx->extra (it becomes owned by a table). */
static void sv_adopt(struct ctx *c, struct sval *s)
{
    for (struct sval **p = &c->extra; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            s->next = NULL;
            return;
        }
}

/* Records s as the value of v (no-op for NULL s or an untracked v). */
static void sv_put(struct ctx *c, const struct gf_value *v, struct sval *s)
{
    struct sval **slot = sv_slot(c, v);
    if (!s || !slot)
        return;
    sv_adopt(c, s);
    free(*slot);
    *slot = s;
}

/* The tracked value of v: computed earlier, or from its initializer. */
static const struct sval *sv_get(struct ctx *c, const struct gf_value *v)
{
    if (!v)
        return NULL;
    struct sval **slot = sv_slot(c, v);
    if (slot && *slot)
        return *slot;
    if (!v->init)
        return NULL;
    struct sval *s = sv_from_tensor(c, v->init);
    if (s && slot)
        sv_put(c, v, s);
    return s;
}

/* An integer list given as input or attribute (axes, pads, sizes, ...). */
struct ilist {
    bool given;           /* input or attribute present */
    int64_t len;          /* -1: unknown */
    const struct sval *s; /* the elements, or NULL when not tracked */
};

static bool ilist_known(const struct ilist *l)
{
    return l->s && sv_all_known(l->s);
}

/* List from input `idx` (when present) or attribute `name` (when not
 * NULL). */
static enum gf_status int_list(struct ctx *c, size_t idx, const char *name, struct ilist *l)
{
    struct gf_value *v = in(c, idx);
    *l = (struct ilist){.len = -1};
    if (v) {
        struct gf_shape sh;
        shape_of(v, &sh);
        if (sh.rank > 1)
            return fail(c, v, "expected a 1-D tensor, got rank %d", sh.rank);
        l->given = true;
        l->s = sv_get(c, v);
        if (l->s)
            l->len = (int64_t)l->s->n;
        else if (sh.rank == 1 && gf_dim_known(&sh.d[0]) && sh.d[0].value <= MAX_SV)
            l->len = sh.d[0].value; /* longer: treated as unknown */
        else if (sh.rank == 0)
            l->len = 1;
        return GF_OK;
    }
    const int64_t *p;
    size_t n;
    if (!name)
        return GF_OK;
    if (attr_ints(c, name, &p, &n))
        return GF_ERR_INVALID;
    if (!p)
        return GF_OK;
    l->given = true;
    if (n > MAX_SV)
        return GF_OK; /* too long to track: unknown */
    struct sval *t = sv_alloc(c, 1, n);
    if (!t)
        return gf_error(GF_ERR_NOMEM, "out of memory in shape inference");
    for (size_t i = 0; i < n; i++)
        t->e[i] = elem_of(p[i]);
    l->len = (int64_t)n;
    l->s = t;
    return GF_OK;
}

/* Normalizes a fully known list of axes into flags[rank]. */
static enum gf_status list_axes(struct ctx *c, const struct gf_value *v, const struct ilist *l,
                                int rank, bool *flags)
{
    int64_t axes[MAX_RANK];
    if (l->s->n > (size_t)rank)
        return fail(c, v, "%zu axes for rank %d", l->s->n, rank);
    for (size_t i = 0; i < l->s->n; i++)
        axes[i] = l->s->e[i].v;
    return norm_axes(c, v, axes, l->s->n, rank, flags);
}

/* ---- elementwise --------------------------------------------------------- */

/* Broadcasts inputs [first, first + count); with same_type, their element
 * types must agree.  *dt: the first known element type. */
static enum gf_status broadcast_inputs(struct ctx *c, size_t first, size_t count,
                                       bool same_type, struct gf_shape *s, enum gf_dtype *dt)
{
    char b1[256], b2[256];
    *dt = GF_UNDEFINED;
    for (size_t i = first; i < first + count; i++) {
        struct gf_value *v;
        struct gf_shape x, prev = *s;
        if (need(c, i, &v))
            return GF_ERR_INVALID;
        enum gf_dtype t = dtype_of(v);
        if (same_type && *dt && t && t != *dt)
            return fail(c, v, "element type %s differs from %s", gf_dtype_name(t),
                        gf_dtype_name(*dt));
        if (!*dt)
            *dt = t;
        shape_of(v, &x);
        if (i == first)
            *s = x;
        else if (!gf_shape_broadcast(&prev, &x, s))
            return fail(c, v, "cannot broadcast %s with %s", gf_shape_str(&prev, b1, sizeof(b1)),
                        gf_shape_str(&x, b2, sizeof(b2)));
    }
    return GF_OK;
}

/* Opsets 1-6: B is broadcast onto A (attribute "broadcast"); the result
 * has A's shape. */
static enum gf_status legacy_binary(struct ctx *c, enum gf_dtype dt)
{
    struct gf_value *a, *b;
    if (need(c, 0, &a) || need(c, 1, &b))
        return GF_ERR_INVALID;
    struct gf_shape s;
    shape_of(a, &s);
    return set_out(c, 0, dt ? dt : dtype_of(a), &s);
}

static enum gf_status binary(struct ctx *c, enum gf_dtype out_dt, bool same_type)
{
    struct gf_shape s;
    enum gf_dtype dt;
    if (c->opset < 7)
        return legacy_binary(c, out_dt);
    if (broadcast_inputs(c, 0, 2, same_type, &s, &dt))
        return GF_ERR_INVALID;
    return set_out(c, 0, out_dt ? out_dt : dtype_of(in(c, 0)), &s);
}

/* Add Sub Mul Div Mod */
static enum gf_status infer_arith(struct ctx *c)
{
    return binary(c, GF_UNDEFINED, true);
}

/* Pow: the exponent may have another type (opset 12); Y has X's type. */
static enum gf_status infer_pow(struct ctx *c)
{
    return binary(c, GF_UNDEFINED, false);
}

/* Equal Less LessOrEqual Greater GreaterOrEqual And Or Xor */
static enum gf_status infer_compare(struct ctx *c)
{
    return binary(c, GF_BOOL, true);
}

/* Max Min Mean Sum */
static enum gf_status infer_variadic(struct ctx *c)
{
    struct gf_shape s;
    enum gf_dtype dt;
    if (c->n->n_inputs == 0)
        return fail(c, NULL, "needs at least one input");
    if (broadcast_inputs(c, 0, c->n->n_inputs, true, &s, &dt))
        return GF_ERR_INVALID;
    return set_out(c, 0, dt, &s);
}

static enum gf_status infer_where(struct ctx *c)
{
    struct gf_shape s;
    enum gf_dtype dt;
    if (broadcast_inputs(c, 0, 3, false, &s, &dt))
        return GF_ERR_INVALID;
    enum gf_dtype x = dtype_of(in(c, 1)), y = dtype_of(in(c, 2));
    if (x && y && x != y)
        return fail(c, in(c, 2), "element type %s differs from %s", gf_dtype_name(y),
                    gf_dtype_name(x));
    return set_out(c, 0, x ? x : y, &s);
}

/* Output 0 is input 0's type and shape (optional inputs after it). */
static enum gf_status infer_unary(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s;
    if (need(c, 0, &x))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    return set_out(c, 0, dtype_of(x), &s);
}

/* Not IsNaN IsInf */
static enum gf_status infer_unary_bool(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s;
    if (need(c, 0, &x))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    return set_out(c, 0, GF_BOOL, &s);
}

/* Identity also passes sequences and optionals (opset 14+): types are
 * only known here for tensors. */
static enum gf_status infer_identity(struct ctx *c)
{
    struct gf_value *x;
    if (need(c, 0, &x))
        return GF_ERR_INVALID;
    if (x->type.kind == GF_TYPE_OTHER || (out(c, 0) && out(c, 0)->type.kind == GF_TYPE_OTHER))
        return GF_OK;
    return infer_unary(c);
}

/* Dropout: output, and the mask (bool from opset 10, T before). */
static enum gf_status infer_dropout(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s;
    if (need(c, 0, &x))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    if (set_out(c, 0, dtype_of(x), &s))
        return GF_ERR_INVALID;
    return set_out(c, 1, c->opset >= 10 ? GF_BOOL : dtype_of(x), &s);
}

/* Cast-1..5 name the type as a string ("FLOAT"). */
static enum gf_dtype dtype_from_name(const char *s)
{
    static const char *names[] = {
        [GF_FLOAT] = "FLOAT", [GF_UINT8] = "UINT8", [GF_INT8] = "INT8",
        [GF_UINT16] = "UINT16", [GF_INT16] = "INT16", [GF_INT32] = "INT32",
        [GF_INT64] = "INT64", [GF_STRING] = "STRING", [GF_BOOL] = "BOOL",
        [GF_FLOAT16] = "FLOAT16", [GF_DOUBLE] = "DOUBLE", [GF_UINT32] = "UINT32",
        [GF_UINT64] = "UINT64", [GF_COMPLEX64] = "COMPLEX64",
        [GF_COMPLEX128] = "COMPLEX128", [GF_BFLOAT16] = "BFLOAT16",
    };
    for (size_t i = 1; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i] && strcasecmp(names[i], s) == 0)
            return (enum gf_dtype)i;
    return GF_UNDEFINED;
}

static enum gf_status infer_cast(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s;
    const struct gf_attr *a = gf_node_attr(c->n, "to");
    int64_t to = GF_UNDEFINED;
    if (need(c, 0, &x))
        return GF_ERR_INVALID;
    if (!a)
        return fail(c, NULL, "missing attribute 'to'");
    if (a->type == GF_ATTR_INT) {
        to = a->i;
    } else if (a->type == GF_ATTR_STRING) {
        char name[32];
        if (attr_str(c, "to", "", name, sizeof(name)))
            return GF_ERR_INVALID;
        to = dtype_from_name(name);
    }
    if (to <= GF_UNDEFINED || to >= GF_DTYPE_COUNT)
        return fail(c, NULL, "attribute 'to' is not a valid element type");
    shape_of(x, &s);
    return set_out(c, 0, (enum gf_dtype)to, &s);
}

static enum gf_status infer_cast_like(struct ctx *c)
{
    struct gf_value *x, *like;
    struct gf_shape s;
    if (need(c, 0, &x) || need(c, 1, &like))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    return set_out(c, 0, dtype_of(like), &s);
}

/* ---- constants and shape ops --------------------------------------------- */

static enum gf_status tensor_shape(struct ctx *c, const struct gf_tensor *t, struct gf_shape *s)
{
    if (!t || t->rank < 0 || t->rank > MAX_RANK || (t->rank > 0 && !t->dims))
        return fail(c, NULL, "constant tensor has a bad shape");
    s->rank = t->rank;
    for (int i = 0; i < t->rank; i++) {
        if (t->dims[i] < 0)
            return fail(c, NULL, "constant tensor has a negative dim");
        s->d[i] = gf_dim_of(t->dims[i]);
    }
    return GF_OK;
}

/* The one "value*" attribute of a Constant node, or NULL. */
static const struct gf_attr *constant_attr(const struct gf_node *n)
{
    for (size_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].name && (strncmp(n->attrs[i].name, "value", 5) == 0 ||
                                 strcmp(n->attrs[i].name, "sparse_value") == 0))
            return &n->attrs[i];
    return NULL;
}

static enum gf_status infer_constant(struct ctx *c)
{
    static const struct {
        const char *name;
        enum gf_attr_type type;
        enum gf_dtype dtype;
        int rank;
    } forms[] = {
        {"value_float", GF_ATTR_FLOAT, GF_FLOAT, 0},
        {"value_floats", GF_ATTR_FLOATS, GF_FLOAT, 1},
        {"value_int", GF_ATTR_INT, GF_INT64, 0},
        {"value_ints", GF_ATTR_INTS, GF_INT64, 1},
        {"value_string", GF_ATTR_STRING, GF_STRING, 0},
        {"value_strings", GF_ATTR_STRINGS, GF_STRING, 1},
    };
    const struct gf_attr *a = constant_attr(c->n);
    struct gf_shape s;
    if (!a)
        return fail(c, NULL, "no value attribute");
    if (strcmp(a->name, "sparse_value") == 0)
        return GF_OK; /* kept packed: shape not modelled */
    if (strcmp(a->name, "value") == 0) {
        if (a->type != GF_ATTR_TENSOR || tensor_shape(c, a->t, &s))
            return fail(c, NULL, "attribute 'value' is not a valid tensor");
        return set_out(c, 0, a->t->dtype, &s);
    }
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        if (strcmp(a->name, forms[i].name) != 0)
            continue;
        if (a->type != forms[i].type)
            return fail(c, NULL, "attribute '%s' is %s", a->name, gf_attr_type_name(a->type));
        shape_blank(&s, forms[i].rank);
        if (forms[i].rank == 1)
            s.d[0] = gf_dim_of((int64_t)a->n);
        return set_out(c, 0, forms[i].dtype, &s);
    }
    return fail(c, NULL, "unknown attribute '%s'", a->name);
}

/* A shape given as a tensor value (ConstantOfShape, Expand, Reshape). */
static enum gf_status shape_from_list(struct ctx *c, const struct gf_value *v,
                                      const struct ilist *l, struct gf_shape *s)
{
    if (l->len < 0 || l->len > MAX_RANK) {
        shape_unknown(s);
        return GF_OK;
    }
    shape_blank(s, l->len);
    for (int i = 0; l->s && i < s->rank; i++) {
        const struct elem *e = &l->s->e[i];
        if (e->known && e->v < 0)
            return fail(c, v, "negative dim %lld in shape", (long long)e->v);
        s->d[i] = dim_from_elem(e);
    }
    return GF_OK;
}

static enum gf_status infer_constant_of_shape(struct ctx *c)
{
    struct gf_value *x;
    struct ilist l;
    struct gf_shape s;
    enum gf_status st;
    const struct gf_attr *a = attr_typed(c, "value", GF_ATTR_TENSOR, &st);
    if (st || need(c, 0, &x) || int_list(c, 0, NULL, &l))
        return GF_ERR_INVALID;
    if (a && (!a->t || !gf_dtype_valid(a->t->dtype)))
        return fail(c, NULL, "attribute 'value' is not a valid tensor");
    if (shape_from_list(c, x, &l, &s))
        return GF_ERR_INVALID;
    return set_out(c, 0, a ? a->t->dtype : GF_FLOAT, &s);
}

/* Shape's [start, end) range of dims (opset 15), clamped. */
static enum gf_status shape_range(struct ctx *c, int rank, int *start, int *end)
{
    int64_t b, e;
    if (attr_int(c, "start", 0, &b) || attr_int(c, "end", rank, &e))
        return GF_ERR_INVALID;
    b = b < 0 ? b + rank : b;
    e = e < 0 ? e + rank : e;
    *start = (int)(b < 0 ? 0 : b > rank ? rank : b);
    *end = (int)(e < 0 ? 0 : e > rank ? rank : e);
    if (*end < *start)
        *end = *start;
    return GF_OK;
}

static enum gf_status infer_shape(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s, o;
    int b, e;
    if (need(c, 0, &x))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    shape_blank(&o, 1);
    if (s.rank >= 0) {
        if (shape_range(c, s.rank, &b, &e))
            return GF_ERR_INVALID;
        o.d[0] = gf_dim_of(e - b);
    }
    return set_out(c, 0, GF_INT64, &o);
}

static enum gf_status infer_size(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape o = {.rank = 0};
    if (need(c, 0, &x))
        return GF_ERR_INVALID;
    return set_out(c, 0, GF_INT64, &o);
}

/* The value of a scalar constant (initializer, Constant or tracked). */
static bool scalar_f64(struct ctx *c, const struct gf_value *v, double *d)
{
    const struct gf_tensor *t = v ? v->init : NULL;
    if (!t && v && v->producer && v->producer->op == GF_OP_CONSTANT) {
        const struct gf_attr *a = constant_attr(v->producer);
        if (a && a->type == GF_ATTR_TENSOR)
            t = a->t;
        else if (a && a->type == GF_ATTR_FLOAT && strcmp(a->name, "value_float") == 0)
            return *d = a->f, true;
    }
    if (t && t->nelem == 1 && t->data && t->dtype != GF_STRING &&
        t->nbytes >= gf_dtype_bytes(t->dtype, 1)) {
        *d = gf_dtype_is_int(t->dtype) ? (double)gf_tensor_get_i64(t, 0) : gf_tensor_get_f64(t, 0);
        return true;
    }
    const struct sval *s = sv_get(c, v);
    if (s && s->n == 1 && s->e[0].known)
        return *d = (double)s->e[0].v, true;
    return false;
}

/* Range: max(ceil((limit - start) / delta), 0) elements; Range(0, n, 1)
 * of a symbolic n has n elements. */
static enum gf_status infer_range(struct ctx *c)
{
    struct gf_shape o;
    double v[3];
    bool ok[3];
    if (need_all(c, 3))
        return GF_ERR_INVALID;
    for (size_t i = 0; i < 3; i++) {
        struct gf_shape s;
        shape_of(in(c, i), &s);
        if (s.rank > 1 || (s.rank == 1 && gf_dim_known(&s.d[0]) && s.d[0].value != 1))
            return fail(c, in(c, i), "must be a scalar");
        ok[i] = scalar_f64(c, in(c, i), &v[i]);
    }
    shape_blank(&o, 1);
    if (ok[2] && v[2] == 0)
        return fail(c, in(c, 2), "delta is zero");
    if (ok[0] && ok[1] && ok[2]) {
        double n = ceil((v[1] - v[0]) / v[2]);
        if (!(n < 9e18))
            return fail(c, NULL, "range too long");
        o.d[0] = gf_dim_of(n > 0 ? (int64_t)n : 0);
    } else if (ok[0] && ok[2] && v[0] == 0 && v[2] == 1) {
        const struct sval *limit = sv_get(c, in(c, 1));
        if (limit && limit->n == 1)
            o.d[0] = dim_from_elem(&limit->e[0]);
    }
    return set_out(c, 0, dtype_of(in(c, 0)), &o);
}

/* ---- matrix products ----------------------------------------------------- */

/* MatMul: 1-D operands are promoted ([K] -> [1,K] / [K,1]) and the added
 * dim dropped; batch dims broadcast. */
static enum gf_status infer_matmul(struct ctx *c)
{
    struct gf_value *va, *vb;
    struct gf_shape a, b;
    struct gf_matmul_rule r;
    if (need(c, 0, &va) || need(c, 1, &vb))
        return GF_ERR_INVALID;
    shape_of(va, &a);
    shape_of(vb, &b);
    if (gf_rule_matmul(c->n, &a, &b, false, false, &r))
        return GF_ERR_INVALID;
    return set_out_like(c, 0, 0, &r.y);
}

/* Gemm: [M,K] x [K,N] (+ C broadcast to [M,N]) with transA / transB
 * (opcheck.c). */
static enum gf_status infer_gemm(struct ctx *c)
{
    struct gf_value *va, *vb;
    struct gf_shape a, b, cc, o;
    struct gf_gemm_rule r;
    if (need(c, 0, &va) || need(c, 1, &vb))
        return GF_ERR_INVALID;
    shape_of(va, &a);
    shape_of(vb, &b);
    if (gf_rule_gemm(c->n, &a, &b, rule_shape(c, 2, &cc), &r))
        return GF_ERR_INVALID;
    shape_blank(&o, 2);
    o.d[0] = r.mm.m;
    o.d[1] = r.mm.n;
    return set_out_like(c, 0, 0, &o);
}

/* ---- Einsum -------------------------------------------------------------- */

#define EIN_MAX_TERMS 32

struct ein_term {
    int n;            /* letters, not counting "..." */
    int ell;          /* index of "..." among the letters, -1 when none */
    char l[MAX_RANK]; /* the letters */
};

/* Parses one term ("ij", "b...k") of an equation; false when malformed. */
static bool ein_term(const char *s, size_t len, struct ein_term *t)
{
    t->n = 0;
    t->ell = -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ')
            continue;
        if (s[i] == '.') {
            if (t->ell >= 0 || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
                return false;
            t->ell = t->n;
            i += 2;
        } else if (((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')) &&
                   t->n < MAX_RANK) {
            t->l[t->n++] = s[i];
        } else {
            return false;
        }
    }
    return true;
}

/* Splits "in1,in2->out" into terms; *has_out false in implicit mode. */
static bool ein_parse(const char *eq, struct ein_term *ins, int *n_in,
                      struct ein_term *o, bool *has_out)
{
    const char *arrow = strstr(eq, "->");
    const char *end = arrow ? arrow : eq + strlen(eq);
    *n_in = 0;
    *has_out = arrow != NULL;
    for (const char *p = eq;; ) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        if (*n_in >= EIN_MAX_TERMS || !ein_term(p, (size_t)(stop - p), &ins[(*n_in)++]))
            return false;
        if (!comma)
            break;
        p = comma + 1;
    }
    return !arrow || ein_term(arrow + 2, strlen(arrow + 2), o);
}

/* Implicit output: "..." then the letters used once, in ASCII order. */
static void ein_implicit(const struct ein_term *ins, int n_in, struct ein_term *o)
{
    int count[128] = {0};
    bool ell = false;
    for (int i = 0; i < n_in; i++) {
        ell = ell || ins[i].ell >= 0;
        for (int j = 0; j < ins[i].n; j++)
            count[(int)ins[i].l[j]]++;
    }
    o->n = 0;
    o->ell = ell ? 0 : -1;
    for (int ch = 0; ch < 128; ch++)
        if (count[ch] == 1 && o->n < MAX_RANK)
            o->l[o->n++] = (char)ch;
}

/* Binds each letter and the "..." dims of every operand. */
static enum gf_status ein_bind(struct ctx *c, const struct ein_term *ins, int n_in,
                               struct gf_dim *letter, bool *seen, struct gf_shape *ell)
{
    ell->rank = 0;
    for (int i = 0; i < n_in; i++) {
        struct gf_value *v = in(c, (size_t)i);
        struct gf_shape s, e;
        shape_of(v, &s);
        if (s.rank < 0)
            return GF_ERR_UNSUPPORTED; /* caller: result unknown */
        int ne = s.rank - ins[i].n;
        if (ne < 0 || (ins[i].ell < 0 && ne != 0))
            return fail(c, v, "rank %d does not match the equation term", s.rank);
        e.rank = ins[i].ell >= 0 ? ne : 0;
        for (int j = 0; j < e.rank; j++)
            e.d[j] = s.d[ins[i].ell + j];
        if (!gf_shape_broadcast(ell, &e, ell))
            return fail(c, v, "'...' dims do not broadcast");
        for (int j = 0; j < ins[i].n; j++) {
            int ch = ins[i].l[j];
            const struct gf_dim *d = &s.d[j < ins[i].ell || ins[i].ell < 0 ? j : j + ne];
            if (seen[ch] && !gf_dim_broadcast(&letter[ch], d, &letter[ch]))
                return fail(c, v, "dim of '%c' differs between operands", ch);
            if (!seen[ch])
                letter[ch] = *d;
            seen[ch] = true;
        }
    }
    return GF_OK;
}

static enum gf_status infer_einsum(struct ctx *c)
{
    struct ein_term ins[EIN_MAX_TERMS], o;
    struct gf_dim letter[128];
    bool seen[128] = {false}, has_out;
    struct gf_shape ell, res;
    char eq[512];
    int n_in;
    if (!gf_node_attr(c->n, "equation"))
        return fail(c, NULL, "missing attribute 'equation'");
    if (attr_str(c, "equation", "", eq, sizeof(eq)))
        return GF_ERR_INVALID;
    if (!ein_parse(eq, ins, &n_in, &o, &has_out) || (size_t)n_in != c->n->n_inputs)
        return fail(c, NULL, "bad equation '%s' for %zu inputs", eq, c->n->n_inputs);
    if (need_all(c, (size_t)n_in))
        return GF_ERR_INVALID;
    if (!has_out)
        ein_implicit(ins, n_in, &o);
    enum gf_status st = ein_bind(c, ins, n_in, letter, seen, &ell);
    if (st == GF_ERR_UNSUPPORTED) {
        shape_unknown(&res);
        return set_out_like(c, 0, 0, &res);
    }
    if (st)
        return st;
    res.rank = 0;
    for (int j = 0; j <= o.n; j++) {
        if (j == o.ell)
            for (int k = 0; k < ell.rank && res.rank < MAX_RANK; k++)
                res.d[res.rank++] = ell.d[k];
        if (j == o.n)
            break;
        if (!seen[(int)o.l[j]] || memchr(o.l, o.l[j], (size_t)j))
            return fail(c, NULL, "bad output letter '%c' in '%s'", o.l[j], eq);
        if (res.rank < MAX_RANK)
            res.d[res.rank++] = letter[(int)o.l[j]];
    }
    return set_out_like(c, 0, 0, &res);
}

/* ---- layout -------------------------------------------------------------- */

static enum gf_status infer_transpose(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s, o;
    const int64_t *perm;
    size_t n;
    bool used[MAX_RANK] = {false};
    if (need(c, 0, &x) || attr_ints(c, "perm", &perm, &n))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    if (s.rank < 0) {
        shape_blank(&o, perm ? (int64_t)n : -1);
        return set_out_like(c, 0, 0, &o);
    }
    if (perm && n != (size_t)s.rank)
        return fail(c, x, "perm has %zu entries for rank %d", n, s.rank);
    o.rank = s.rank;
    for (int i = 0; i < s.rank; i++) {
        int64_t p = perm ? perm[i] : s.rank - 1 - i;
        if (p < 0 || p >= s.rank || used[p])
            return fail(c, x, "perm is not a permutation of %d axes", s.rank);
        used[p] = true;
        o.d[i] = s.d[p];
    }
    return set_out_like(c, 0, 0, &o);
}

/* Reshape's -1 dim: the input's element count over the others', symbols
 * cancelling; unknown when undecidable; *bad when not divisible. */
static struct gf_dim reshape_fill(const struct gf_shape *s, const struct gf_shape *o, int skip,
                                  bool *bad)
{
    const char *syms[MAX_RANK];
    int ns = 0, left = 0;
    int64_t pin = 1, pout = 1;
    for (int i = 0; i < s->rank; i++) {
        if (gf_dim_known(&s->d[i])) {
            if (__builtin_mul_overflow(pin, s->d[i].value, &pin))
                return gf_dim_unknown();
        } else if (s->d[i].param) {
            syms[ns++] = s->d[i].param;
        } else {
            return gf_dim_unknown();
        }
    }
    for (int j = 0; j < o->rank; j++) {
        int k = 0;
        if (j == skip)
            continue;
        if (gf_dim_known(&o->d[j])) {
            if (__builtin_mul_overflow(pout, o->d[j].value, &pout))
                return gf_dim_unknown();
            continue;
        }
        while (k < ns && (!syms[k] || !o->d[j].param || strcmp(syms[k], o->d[j].param)))
            k++;
        if (k == ns)
            return gf_dim_unknown();
        syms[k] = NULL;
    }
    for (int k = 0; k < ns; k++)
        left += syms[k] != NULL;
    if (pout == 0)
        return gf_dim_unknown();
    if (left == 0) {
        *bad = pin % pout != 0;
        return gf_dim_of(pin / pout);
    }
    for (int k = 0; left == 1 && pin == pout && k < ns; k++)
        if (syms[k])
            return (struct gf_dim){.value = -1, .param = syms[k]};
    return gf_dim_unknown();
}

/* Target dims of Reshape: 0 copies the input dim (unless allowzero), one
 * -1 is inferred.  *fill: index of the -1, or -1. */
static enum gf_status reshape_target(struct ctx *c, const struct gf_shape *s,
                                     const struct ilist *l, bool allowzero,
                                     struct gf_shape *o, int *fill)
{
    *fill = -1;
    for (int j = 0; l->s && j < o->rank; j++) {
        const struct elem *e = &l->s->e[j];
        if (!e->known || e->v > 0) {
            o->d[j] = dim_from_elem(e);
        } else if (e->v == -1) {
            if (*fill >= 0)
                return fail(c, in(c, 1), "more than one -1 in the target shape");
            *fill = j;
        } else if (e->v == 0 && allowzero) {
            o->d[j] = gf_dim_of(0);
        } else if (e->v == 0) {
            if (s->rank >= 0 && j >= s->rank)
                return fail(c, in(c, 1), "0 at index %d copies a dim of rank %d input", j,
                            s->rank);
            o->d[j] = s->rank >= 0 ? s->d[j] : gf_dim_unknown();
        } else {
            return fail(c, in(c, 1), "bad dim %lld in the target shape", (long long)e->v);
        }
    }
    return GF_OK;
}

static enum gf_status infer_reshape(struct ctx *c)
{
    struct gf_value *x;
    struct ilist l;
    struct gf_shape s, o;
    int64_t allowzero;
    int fill;
    bool bad = false;
    char b1[256], b2[256];
    if (need(c, 0, &x) || int_list(c, 1, "shape", &l) || attr_int(c, "allowzero", 0, &allowzero))
        return GF_ERR_INVALID;
    if (!l.given)
        return fail(c, NULL, "missing the target shape");
    shape_of(x, &s);
    shape_blank(&o, l.len);
    if (o.rank < 0)
        return set_out_like(c, 0, 0, &o);
    if (reshape_target(c, &s, &l, allowzero != 0, &o, &fill))
        return GF_ERR_INVALID;
    if (fill >= 0)
        o.d[fill] = reshape_fill(&s, &o, fill, &bad);
    struct gf_dim ni = dims_product(s.d, s.rank), no = dims_product(o.d, o.rank);
    if (bad || (fill < 0 && s.rank >= 0 && gf_dim_known(&ni) && gf_dim_known(&no) &&
                ni.value != no.value))
        return fail(c, x, "cannot reshape %s into %s", gf_shape_str(&s, b1, sizeof(b1)),
                    gf_shape_str(&o, b2, sizeof(b2)));
    return set_out_like(c, 0, 0, &o);
}

static enum gf_status infer_flatten(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s, o;
    int64_t axis;
    int a = 0;
    if (need(c, 0, &x) || attr_int(c, "axis", 1, &axis))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    shape_blank(&o, 2);
    if (s.rank >= 0) {
        if (axis < -(int64_t)s.rank || axis > s.rank)
            return fail(c, x, "axis %lld out of range for rank %d", (long long)axis, s.rank);
        a = (int)(axis < 0 ? axis + s.rank : axis);
        o.d[0] = dims_product(s.d, a);
        o.d[1] = dims_product(s.d + a, s.rank - a);
    }
    return set_out_like(c, 0, 0, &o);
}

/* Squeeze: axes from input 1 (opset 13) or attribute; without (or, in
 * the attribute form, with empty) axes every dim of size 1 goes. */
static enum gf_status infer_squeeze(struct ctx *c)
{
    struct gf_value *x;
    struct ilist l;
    struct gf_shape s, o;
    bool drop[MAX_RANK];
    if (need(c, 0, &x) || int_list(c, 1, "axes", &l))
        return GF_ERR_INVALID;
    if (!in(c, 1) && l.len == 0)
        l.given = false;
    shape_of(x, &s);
    if (s.rank < 0 || (l.given && !ilist_known(&l))) {
        shape_blank(&o, s.rank >= 0 && l.len >= 0 ? s.rank - l.len : -1);
        return set_out_like(c, 0, 0, &o);
    }
    if (l.given && list_axes(c, x, &l, s.rank, drop))
        return GF_ERR_INVALID;
    o.rank = 0;
    for (int i = 0; i < s.rank; i++) {
        if (!l.given && !gf_dim_known(&s.d[i])) {
            shape_unknown(&o); /* might be 1 or not */
            return set_out_like(c, 0, 0, &o);
        }
        if (l.given ? !drop[i] : s.d[i].value != 1) {
            o.d[o.rank++] = s.d[i];
            continue;
        }
        if (gf_dim_known(&s.d[i]) && s.d[i].value != 1)
            return fail(c, x, "cannot squeeze axis %d of size %lld", i,
                        (long long)s.d[i].value);
    }
    return set_out_like(c, 0, 0, &o);
}

/* Unsqueeze: axes (input 1 from opset 13, else attribute) index the output. */
static enum gf_status infer_unsqueeze(struct ctx *c)
{
    struct gf_value *x;
    struct ilist l;
    struct gf_shape s, o;
    bool add[MAX_RANK];
    if (need(c, 0, &x) || int_list(c, 1, "axes", &l))
        return GF_ERR_INVALID;
    if (!l.given)
        return fail(c, NULL, "missing axes");
    shape_of(x, &s);
    if (s.rank < 0 || !ilist_known(&l)) {
        shape_blank(&o, s.rank >= 0 && l.len >= 0 ? s.rank + l.len : -1);
        return set_out_like(c, 0, 0, &o);
    }
    if (s.rank + l.len > MAX_RANK)
        return fail(c, x, "output rank %lld too large", (long long)(s.rank + l.len));
    o.rank = s.rank + (int)l.len;
    if (list_axes(c, x, &l, o.rank, add))
        return GF_ERR_INVALID;
    for (int i = 0, j = 0; i < o.rank; i++)
        o.d[i] = add[i] ? gf_dim_of(1) : s.d[j++];
    return set_out_like(c, 0, 0, &o);
}

/* Concat's axis dim: the sum when known, or a lone symbol among zeros. */
static struct gf_dim concat_axis_dim(struct ctx *c, int a)
{
    int64_t sum = 0;
    struct gf_dim only = gf_dim_unknown();
    int n_unknown = 0;
    for (size_t i = 0; i < c->n->n_inputs; i++) {
        struct gf_shape s;
        shape_of(in(c, i), &s);
        if (s.rank <= a)
            return gf_dim_unknown();
        if (!gf_dim_known(&s.d[a]))
            only = s.d[a], n_unknown++;
        else if (__builtin_add_overflow(sum, s.d[a].value, &sum))
            return gf_dim_unknown();
    }
    if (n_unknown == 0)
        return gf_dim_of(sum);
    return n_unknown == 1 && sum == 0 ? only : gf_dim_unknown();
}

/* Concat: dims equal except along axis, where they add up. */
static enum gf_status infer_concat(struct ctx *c)
{
    struct gf_shape o, s;
    enum gf_dtype dt = GF_UNDEFINED;
    int64_t axis;
    int a = -1;
    char b1[256], b2[256];
    if (c->n->n_inputs == 0)
        return fail(c, NULL, "needs at least one input");
    if (need_all(c, c->n->n_inputs) || attr_int(c, "axis", c->opset < 4 ? 1 : INT64_MIN, &axis))
        return GF_ERR_INVALID;
    if (axis == INT64_MIN)
        return fail(c, NULL, "missing attribute 'axis'");
    o.rank = -1;
    for (size_t i = 0; i < c->n->n_inputs; i++) {
        struct gf_value *v = in(c, i);
        enum gf_dtype t = dtype_of(v);
        if (dt && t && t != dt)
            return fail(c, v, "element type %s differs from %s", gf_dtype_name(t),
                        gf_dtype_name(dt));
        dt = dt ? dt : t;
        shape_of(v, &s);
        if (s.rank < 0)
            continue;
        if (o.rank >= 0 && s.rank != o.rank)
            return fail(c, v, "rank %d differs from %d", s.rank, o.rank);
        if (o.rank < 0 && norm_axis(c, v, axis, s.rank, &a))
            return GF_ERR_INVALID;
        if (o.rank < 0) {
            o = s;
            continue;
        }
        for (int k = 0; k < s.rank; k++)
            if (k != a && !gf_dim_unify(&o.d[k], &s.d[k], &o.d[k]))
                return fail(c, v, "shape %s does not match %s", gf_shape_str(&s, b1, sizeof(b1)),
                            gf_shape_str(&o, b2, sizeof(b2)));
    }
    if (o.rank >= 0)
        o.d[a] = concat_axis_dim(c, a);
    return set_out(c, 0, dt, &o);
}

/* Element i of a list: false when not known. */
static bool list_at(const struct ilist *l, size_t i, int64_t *v)
{
    if (!l->s || i >= l->s->n || !l->s->e[i].known)
        return false;
    *v = l->s->e[i].v;
    return true;
}

/* Checks Split's explicit sizes against the dim being split. */
static enum gf_status split_check(struct ctx *c, const struct ilist *l, size_t n_out,
                                  const struct gf_dim *d)
{
    int64_t sum = 0, v;
    bool all = true;
    if (l->len >= 0 && (size_t)l->len != n_out)
        return fail(c, in(c, 1), "split has %lld sizes for %zu outputs", (long long)l->len,
                    n_out);
    for (size_t i = 0; i < n_out; i++) {
        if (!list_at(l, i, &v)) {
            all = false;
            continue;
        }
        if (v < 0 || __builtin_add_overflow(sum, v, &sum))
            return fail(c, in(c, 1), "bad split size %lld", (long long)v);
    }
    if (all && gf_dim_known(d) && sum != d->value)
        return fail(c, in(c, 0), "split sizes add up to %lld, dim is %lld", (long long)sum,
                    (long long)d->value);
    return GF_OK;
}

/* Dim of output i of an equal split of d into n (uneven from opset 18). */
static enum gf_status split_equal(struct ctx *c, const struct gf_dim *d, size_t n, size_t i,
                                  struct gf_dim *o)
{
    if (!gf_dim_known(d)) {
        *o = n == 1 ? *d : gf_dim_unknown();
        return GF_OK;
    }
    int64_t chunk = d->value / (int64_t)n, v = d->value;
    if (v % (int64_t)n == 0) {
        *o = gf_dim_of(chunk);
        return GF_OK;
    }
    if (c->opset < 18)
        return fail(c, in(c, 0), "dim %lld does not split evenly into %zu", (long long)v, n);
    chunk++;
    if (v - chunk * (int64_t)(n - 1) < 0)
        return fail(c, in(c, 0), "dim %lld cannot split into %zu chunks", (long long)v, n);
    *o = gf_dim_of(i + 1 < n ? chunk : v - chunk * (int64_t)(n - 1));
    return GF_OK;
}

/* Split: sizes from input 1 (opset 13) or attribute "split", else equal
 * parts, num_outputs of them (opset 18) or one per output. */
static enum gf_status infer_split(struct ctx *c)
{
    struct gf_value *x;
    struct ilist l;
    struct gf_shape s, o;
    int64_t axis, num;
    size_t n_out = c->n->n_outputs;
    int a = 0;
    if (need(c, 0, &x) || int_list(c, 1, "split", &l) || attr_int(c, "axis", 0, &axis) ||
        attr_int(c, "num_outputs", -1, &num))
        return GF_ERR_INVALID;
    if (n_out == 0 || (num != -1 && (l.given || num != (int64_t)n_out)))
        return fail(c, NULL, "num_outputs %lld does not fit %zu outputs%s", (long long)num,
                    n_out, l.given ? " and a split input" : "");
    shape_of(x, &s);
    if (s.rank >= 0 && norm_axis(c, x, axis, s.rank, &a))
        return GF_ERR_INVALID;
    if (s.rank >= 0 && l.given && split_check(c, &l, n_out, &s.d[a]))
        return GF_ERR_INVALID;
    for (size_t i = 0; i < n_out; i++) {
        int64_t v;
        o = s;
        if (s.rank >= 0 && l.given)
            o.d[a] = list_at(&l, i, &v) ? gf_dim_of(v) : gf_dim_unknown();
        else if (s.rank >= 0 && split_equal(c, &s.d[a], n_out, i, &o.d[a]))
            return GF_ERR_INVALID;
        if (set_out_like(c, i, 0, &o))
            return GF_ERR_INVALID;
    }
    return GF_OK;
}

/* Elements Slice takes from a dim of size n (ONNX clamping rules);
 * *first: the first index taken. */
static int64_t slice_count(int64_t n, int64_t start, int64_t end, int64_t step, int64_t *first)
{
    start = start < 0 ? start + n : start;
    end = end < 0 ? end + n : end;
    *first = 0;
    if (n == 0)
        return 0;
    if (step > 0) {
        start = start < 0 ? 0 : start > n ? n : start;
        end = end < 0 ? 0 : end > n ? n : end;
        *first = start;
        return end > start ? (end - start - 1) / step + 1 : 0;
    }
    start = start < 0 ? 0 : start > n - 1 ? n - 1 : start;
    end = end < -1 ? -1 : end > n - 1 ? n - 1 : end;
    *first = start;
    uint64_t ustep = (uint64_t)0 - (uint64_t)step;
    return start > end ? (int64_t)((uint64_t)(start - end - 1) / ustep + 1) : 0;
}

/* One sliced axis: known count, the whole symbolic dim, or unknown. */
static struct gf_dim slice_dim(const struct gf_dim *d, bool ok, int64_t start, int64_t end,
                               int64_t step)
{
    int64_t first;
    if (ok && gf_dim_known(d))
        return gf_dim_of(slice_count(d->value, start, end, step, &first));
    if (ok && start == 0 && end == INT64_MAX && step == 1)
        return *d;
    return gf_dim_unknown();
}

struct slice_args {
    struct ilist starts, ends, axes, steps;
};

/* Slice's lists: inputs 1..4 (opset 10) or attributes starts/ends/axes. */
static enum gf_status slice_args(struct ctx *c, struct slice_args *sa)
{
    const struct ilist *all[4] = {&sa->starts, &sa->ends, &sa->axes, &sa->steps};
    if (int_list(c, 1, "starts", &sa->starts) || int_list(c, 2, "ends", &sa->ends) ||
        int_list(c, 3, "axes", &sa->axes) || int_list(c, 4, NULL, &sa->steps))
        return GF_ERR_INVALID;
    if (!sa->starts.given || !sa->ends.given)
        return fail(c, NULL, "missing starts or ends");
    for (int i = 1; i < 4; i++)
        if (all[i]->given && all[i]->len >= 0 && sa->starts.len >= 0 &&
            all[i]->len != sa->starts.len)
            return fail(c, NULL, "starts, ends, axes and steps differ in length");
    return GF_OK;
}

static enum gf_status infer_slice(struct ctx *c)
{
    struct gf_value *x;
    struct slice_args sa;
    struct gf_shape s, o;
    bool seen[MAX_RANK] = {false};
    if (need(c, 0, &x) || slice_args(c, &sa))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    o = s;
    bool axes_known = !sa.axes.given || ilist_known(&sa.axes);
    if (s.rank < 0 || sa.starts.len < 0 || !axes_known) {
        shape_blank(&o, s.rank);
        return set_out_like(c, 0, 0, &o);
    }
    for (size_t i = 0; i < (size_t)sa.starts.len; i++) {
        int64_t axis = (int64_t)i, st = 0, en = 0, sp = 1;
        int a = 0;
        if (sa.axes.given)
            list_at(&sa.axes, i, &axis);
        if (norm_axis(c, x, axis, s.rank, &a))
            return GF_ERR_INVALID;
        if (seen[a])
            return fail(c, x, "axis %lld sliced twice", (long long)axis);
        seen[a] = true;
        bool ok = list_at(&sa.starts, i, &st) && list_at(&sa.ends, i, &en);
        if (sa.steps.given)
            ok = list_at(&sa.steps, i, &sp) && ok;
        if (ok && sp == 0)
            return fail(c, in(c, 4), "step is zero");
        o.d[a] = slice_dim(&s.d[a], ok, st, en, sp);
    }
    return set_out_like(c, 0, 0, &o);
}

/* ---- indexing ------------------------------------------------------------ */

/* Gather: data[:axis] + indices + data[axis+1:]. */
static enum gf_status infer_gather(struct ctx *c)
{
    struct gf_value *x, *vi;
    struct gf_shape s, idx, o;
    int64_t axis;
    int a = 0;
    if (need(c, 0, &x) || need(c, 1, &vi) || attr_int(c, "axis", 0, &axis))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    shape_of(vi, &idx);
    if (s.rank >= 0 && norm_axis(c, x, axis, s.rank, &a))
        return GF_ERR_INVALID;
    if (s.rank < 0 || idx.rank < 0) {
        shape_blank(&o, s.rank >= 0 && idx.rank >= 0 ? s.rank - 1 + idx.rank : -1);
        return set_out_like(c, 0, 0, &o);
    }
    if (s.rank - 1 + idx.rank > MAX_RANK)
        return fail(c, vi, "output rank too large");
    o.rank = 0;
    for (int i = 0; i < a; i++)
        o.d[o.rank++] = s.d[i];
    for (int i = 0; i < idx.rank; i++)
        o.d[o.rank++] = idx.d[i];
    for (int i = a + 1; i < s.rank; i++)
        o.d[o.rank++] = s.d[i];
    return set_out_like(c, 0, 0, &o);
}

/* GatherElements: the shape of the indices. */
static enum gf_status infer_gather_elements(struct ctx *c)
{
    struct gf_value *x, *vi;
    struct gf_shape s, idx;
    int64_t axis;
    int a = 0;
    if (need(c, 0, &x) || need(c, 1, &vi) || attr_int(c, "axis", 0, &axis))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    shape_of(vi, &idx);
    if (s.rank >= 0 && idx.rank >= 0 && s.rank != idx.rank)
        return fail(c, vi, "rank %d differs from the data's %d", idx.rank, s.rank);
    if (s.rank >= 0 && norm_axis(c, x, axis, s.rank, &a))
        return GF_ERR_INVALID;
    return set_out_like(c, 0, 0, &idx);
}

/* GatherND: indices[:-1] + data[batch_dims + indices[-1]:]. */
static enum gf_status infer_gather_nd(struct ctx *c)
{
    struct gf_value *x, *vi;
    struct gf_shape s, idx, o;
    int64_t b;
    if (need(c, 0, &x) || need(c, 1, &vi) || attr_int(c, "batch_dims", 0, &b))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    shape_of(vi, &idx);
    if (idx.rank == 0)
        return fail(c, vi, "indices must have rank >= 1");
    if (s.rank < 0 || idx.rank < 0 || !gf_dim_known(&idx.d[idx.rank - 1])) {
        shape_unknown(&o);
        return set_out_like(c, 0, 0, &o);
    }
    int64_t last = idx.d[idx.rank - 1].value;
    if (b < 0 || b >= idx.rank || b >= s.rank || last > s.rank - b)
        return fail(c, vi, "batch_dims %lld and index depth %lld do not fit data rank %d",
                    (long long)b, (long long)last, s.rank);
    o.rank = 0;
    for (int i = 0; i < idx.rank - 1; i++)
        o.d[o.rank++] = idx.d[i];
    for (int i = (int)(b + last); i < s.rank && o.rank < MAX_RANK; i++)
        o.d[o.rank++] = s.d[i];
    return set_out_like(c, 0, 0, &o);
}

/* ScatterND ScatterElements: the data's type and shape. */
static enum gf_status infer_scatter(struct ctx *c)
{
    if (need_all(c, 3))
        return GF_ERR_INVALID;
    return infer_unary(c);
}

/* Expand: the input broadcast with the shape given as input 1. */
static enum gf_status infer_expand(struct ctx *c)
{
    struct gf_value *x = in(c, 0);
    struct ilist l;
    struct gf_shape s, t, o;
    char b1[256], b2[256];
    if (need_all(c, 2) || int_list(c, 1, NULL, &l))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    if (shape_from_list(c, in(c, 1), &l, &t))
        return GF_ERR_INVALID;
    if (!gf_shape_broadcast(&s, &t, &o))
        return fail(c, x, "cannot expand %s to %s", gf_shape_str(&s, b1, sizeof(b1)),
                    gf_shape_str(&t, b2, sizeof(b2)));
    return set_out_like(c, 0, 0, &o);
}

/* Tile: each dim times its repeat count. */
static enum gf_status infer_tile(struct ctx *c)
{
    struct gf_value *x = in(c, 0);
    struct ilist l;
    struct gf_shape s, o;
    if (need_all(c, 2) || int_list(c, 1, NULL, &l))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    if (s.rank >= 0 && l.len >= 0 && l.len != s.rank)
        return fail(c, in(c, 1), "%lld repeats for rank %d", (long long)l.len, s.rank);
    shape_blank(&o, s.rank >= 0 ? s.rank : l.len);
    for (int i = 0; s.rank >= 0 && i < s.rank; i++) {
        int64_t r, p;
        if (!list_at(&l, (size_t)i, &r))
            continue;
        if (r < 0)
            return fail(c, in(c, 1), "negative repeat %lld", (long long)r);
        if (r == 1 || (r == 0 && !gf_dim_known(&s.d[i])))
            o.d[i] = r == 1 ? s.d[i] : gf_dim_of(0);
        else if (gf_dim_known(&s.d[i]) && !__builtin_mul_overflow(s.d[i].value, r, &p))
            o.d[i] = gf_dim_of(p);
    }
    return set_out_like(c, 0, 0, &o);
}

/* Pad: pads from input 1 (opset 11) or attribute "pads" ("paddings" in
 * opset 1); axes from input 3 (opset 18). */
static enum gf_status infer_pad(struct ctx *c)
{
    struct gf_value *x;
    struct ilist pads, axes;
    struct gf_shape s, o;
    int64_t ax[MAX_RANK] = {0};
    bool seen[MAX_RANK] = {false};
    if (need(c, 0, &x) || int_list(c, 1, c->opset < 2 ? "paddings" : "pads", &pads) ||
        int_list(c, 3, NULL, &axes))
        return GF_ERR_INVALID;
    if (!pads.given)
        return fail(c, NULL, "missing pads");
    shape_of(x, &s);
    if (s.rank < 0 || (axes.given && !ilist_known(&axes))) {
        shape_blank(&o, s.rank);
        return set_out_like(c, 0, 0, &o);
    }
    int64_t n = axes.given ? axes.len : s.rank;
    if (n > s.rank || (pads.len >= 0 && pads.len != 2 * n))
        return fail(c, in(c, 1) ? in(c, 1) : x, "%lld pads for %lld axes", (long long)pads.len,
                    (long long)n);
    for (int64_t i = 0; i < n; i++)
        ax[i] = axes.given ? axes.s->e[i].v : i;
    if (norm_axes(c, x, ax, (size_t)n, s.rank, seen))
        return GF_ERR_INVALID;
    o = s;
    for (int64_t i = 0; i < n; i++) {
        int a = (int)(ax[i] < 0 ? ax[i] + s.rank : ax[i]);
        int64_t b, e, r;
        if (!list_at(&pads, (size_t)i, &b) || !list_at(&pads, (size_t)(i + n), &e))
            o.d[a] = gf_dim_unknown();
        else if (b == 0 && e == 0)
            continue;
        else if (!gf_dim_known(&s.d[a]) || __builtin_add_overflow(s.d[a].value, b, &r) ||
                 __builtin_add_overflow(r, e, &r))
            o.d[a] = gf_dim_unknown();
        else if (r < 0)
            return fail(c, x, "pads make axis %d negative", a);
        else
            o.d[a] = gf_dim_of(r);
    }
    return set_out_like(c, 0, 0, &o);
}

/* OneHot: a new axis of size depth; values give the type. */
static enum gf_status infer_one_hot(struct ctx *c)
{
    struct gf_value *vi;
    struct ilist depth;
    struct gf_shape s, o;
    int64_t axis, d;
    int a = 0;
    if (need_all(c, 3) || int_list(c, 1, NULL, &depth) || attr_int(c, "axis", -1, &axis))
        return GF_ERR_INVALID;
    vi = in(c, 0);
    shape_of(vi, &s);
    if (depth.len > 1)
        return fail(c, in(c, 1), "depth must have one element");
    if (s.rank < 0 || s.rank >= MAX_RANK) {
        shape_unknown(&o);
        return set_out_like(c, 0, 2, &o);
    }
    if (norm_axis(c, vi, axis, s.rank + 1, &a))
        return GF_ERR_INVALID;
    o.rank = s.rank + 1;
    for (int i = 0, j = 0; i < o.rank; i++)
        o.d[i] = i == a ? gf_dim_unknown() : s.d[j++];
    if (list_at(&depth, 0, &d) && d < 0)
        return fail(c, in(c, 1), "negative depth %lld", (long long)d);
    if (list_at(&depth, 0, &d))
        o.d[a] = gf_dim_of(d);
    return set_out_like(c, 0, 2, &o);
}

/* ---- reductions ---------------------------------------------------------- */

/* Removes (or with keepdims sets to 1) the dims flagged in `axes`. */
static void reduce_shape(const struct gf_shape *s, const bool *axes, bool keepdims,
                         struct gf_shape *o)
{
    o->rank = 0;
    for (int i = 0; i < s->rank; i++) {
        if (!axes[i])
            o->d[o->rank++] = s->d[i];
        else if (keepdims)
            o->d[o->rank++] = gf_dim_of(1);
    }
}

/* ArgMax ArgMin: int64 indices along one axis. */
static enum gf_status infer_arg(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s, o;
    int64_t axis, keep;
    bool flags[MAX_RANK] = {false};
    int a = 0;
    if (need(c, 0, &x) || attr_int(c, "axis", 0, &axis) || attr_int(c, "keepdims", 1, &keep))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    shape_blank(&o, s.rank >= 0 && !keep ? s.rank - 1 : s.rank);
    if (s.rank >= 0) {
        if (norm_axis(c, x, axis, s.rank, &a))
            return GF_ERR_INVALID;
        flags[a] = true;
        reduce_shape(&s, flags, keep != 0, &o);
    }
    return set_out(c, 0, GF_INT64, &o);
}

/* TopK: k from input 1 (opset 10) or attribute; values and int64 indices. */
static enum gf_status infer_top_k(struct ctx *c)
{
    struct gf_value *x;
    struct ilist kl;
    struct gf_shape s, o;
    int64_t axis, k;
    int a = 0;
    if (need(c, 0, &x) || attr_int(c, "axis", -1, &axis))
        return GF_ERR_INVALID;
    if (in(c, 1)) {
        if (int_list(c, 1, NULL, &kl))
            return GF_ERR_INVALID;
    } else {
        const struct gf_attr *ka = gf_node_attr(c->n, "k");
        if (!ka)
            return fail(c, NULL, "missing k");
        if (attr_int(c, "k", 0, &k))
            return GF_ERR_INVALID;
        struct sval *one = sv_alloc(c, 1, 1);
        if (!one)
            return gf_error(GF_ERR_NOMEM, "out of memory in shape inference");
        one->e[0] = elem_of(k);
        kl = (struct ilist){.given = true, .len = 1, .s = one};
    }
    if (kl.len > 1)
        return fail(c, in(c, 1), "k must have one element");
    shape_of(x, &s);
    o = s;
    if (s.rank >= 0 && norm_axis(c, x, axis, s.rank, &a))
        return GF_ERR_INVALID;
    if (s.rank >= 0) {
        if (!list_at(&kl, 0, &k))
            o.d[a] = gf_dim_unknown();
        else if (k < 0 || (gf_dim_known(&s.d[a]) && k > s.d[a].value))
            return fail(c, x, "k = %lld out of range for axis %d", (long long)k, a);
        else
            o.d[a] = gf_dim_of(k);
    }
    if (set_out_like(c, 0, 0, &o))
        return GF_ERR_INVALID;
    return set_out(c, 1, GF_INT64, &o);
}

/* Reduce*: axes from input 1 (ReduceSum 13, the others 18) or attribute;
 * keepdims; empty axes reduce all, or nothing with noop_with_empty_axes. */
static enum gf_status infer_reduce(struct ctx *c)
{
    struct gf_value *x;
    struct ilist l;
    struct gf_shape s, o;
    int64_t keep, noop;
    bool flags[MAX_RANK];
    if (need(c, 0, &x) || int_list(c, 1, "axes", &l) || attr_int(c, "keepdims", 1, &keep) ||
        attr_int(c, "noop_with_empty_axes", 0, &noop))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    bool empty = !l.given || l.len == 0;
    if (empty && noop)
        return set_out_like(c, 0, 0, &s);
    if (empty && s.rank < 0 && !keep) {
        shape_blank(&o, 0);
        return set_out_like(c, 0, 0, &o);
    }
    if (s.rank < 0 || (!empty && !ilist_known(&l))) {
        int64_t r = s.rank < 0 ? -1 : keep ? s.rank : l.len >= 0 ? s.rank - l.len : -1;
        shape_blank(&o, r);
        return set_out_like(c, 0, 0, &o);
    }
    if (empty)
        for (int i = 0; i < s.rank; i++)
            flags[i] = true;
    else if (list_axes(c, x, &l, s.rank, flags))
        return GF_ERR_INVALID;
    reduce_shape(&s, flags, keep != 0, &o);
    return set_out_like(c, 0, 0, &o);
}

/* ---- softmax, normalization, losses -------------------------------------- */

/* Softmax LogSoftmax Hardmax: same shape; the axis must be valid. */
static enum gf_status infer_softmax(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s;
    int64_t axis;
    int a = 0;
    if (need(c, 0, &x) || attr_int(c, "axis", c->opset < 13 ? 1 : -1, &axis))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    if (s.rank > 0 && norm_axis(c, x, axis, s.rank, &a))
        return GF_ERR_INVALID;
    return set_out_like(c, 0, 0, &s);
}

/* LayerNormalization: Y like X; Mean and InvStdDev of type stash_type,
 * X's shape with the normalized dims set to 1. */
static enum gf_status infer_layer_norm(struct ctx *c)
{
    struct gf_value *x, *scale;
    struct gf_shape s, o;
    int64_t axis, stash;
    bool flags[MAX_RANK] = {false};
    int a = 0;
    if (need(c, 0, &x) || need(c, 1, &scale) || attr_int(c, "axis", -1, &axis) ||
        attr_int(c, "stash_type", GF_FLOAT, &stash))
        return GF_ERR_INVALID;
    if (stash <= GF_UNDEFINED || stash >= GF_DTYPE_COUNT)
        return fail(c, NULL, "bad stash_type %lld", (long long)stash);
    shape_of(x, &s);
    if (set_out_like(c, 0, 0, &s))
        return GF_ERR_INVALID;
    shape_unknown(&o);
    if (s.rank >= 0) {
        if (norm_axis(c, x, axis, s.rank, &a))
            return GF_ERR_INVALID;
        for (int i = a; i < s.rank; i++)
            flags[i] = true;
        reduce_shape(&s, flags, true, &o);
    }
    if (set_out(c, 1, (enum gf_dtype)stash, &o))
        return GF_ERR_INVALID;
    return set_out(c, 2, (enum gf_dtype)stash, &o);
}

/* SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss: the loss [N,d...] with
 * reduction "none", else a scalar; SCE's second output (log_prob) like the
 * scores.  The checks: opcheck.c. */
static enum gf_status infer_loss(struct ctx *c)
{
    struct gf_value *x, *t;
    struct gf_shape s, l, w;
    struct gf_loss_rule r;
    if (need(c, 0, &x) || need(c, 1, &t))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    shape_of(t, &l);
    if (gf_rule_loss(c->n, NULL, &s, &l, rule_shape(c, 2, &w), &r))
        return GF_ERR_INVALID;
    if (set_out_like(c, 0, 0, &r.loss))
        return GF_ERR_INVALID;
    return set_out_like(c, 1, 0, &s);
}

/* ---- shape value propagation --------------------------------------------- */

typedef enum gf_status (*sv_fn)(struct ctx *c);

static enum gf_status sv_constant(struct ctx *c)
{
    const struct gf_attr *a = constant_attr(c->n);
    struct sval *s = NULL;
    if (!a)
        return GF_OK;
    if (a->type == GF_ATTR_TENSOR && strcmp(a->name, "value") == 0) {
        s = sv_from_tensor(c, a->t);
    } else if (a->type == GF_ATTR_INT && strcmp(a->name, "value_int") == 0) {
        if ((s = sv_alloc(c, 0, 1)))
            s->e[0] = elem_of(a->i);
    } else if (a->type == GF_ATTR_INTS && strcmp(a->name, "value_ints") == 0 && a->ints &&
               a->n <= MAX_SV && (s = sv_alloc(c, 1, a->n))) {
        for (size_t i = 0; i < a->n; i++)
            s->e[i] = elem_of(a->ints[i]);
    }
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

static enum gf_status sv_shape(struct ctx *c)
{
    struct gf_shape x;
    struct sval *s;
    int b, e;
    shape_of(in(c, 0), &x);
    if (x.rank < 0 || shape_range(c, x.rank, &b, &e) || !(s = sv_alloc(c, 1, (size_t)(e - b))))
        return GF_OK;
    for (int i = b; i < e; i++)
        s->e[i - b] = elem_from_dim(&x.d[i]);
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

static enum gf_status sv_size(struct ctx *c)
{
    struct gf_shape x;
    struct sval *s;
    shape_of(in(c, 0), &x);
    if (x.rank < 0 || !(s = sv_alloc(c, 0, 1)))
        return GF_OK;
    struct gf_dim d = dims_product(x.d, x.rank);
    s->e[0] = elem_from_dim(&d);
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

/* A copy of input 0's value with `rank` (0 needs exactly one element). */
static void sv_copy_rank(struct ctx *c, int rank)
{
    const struct sval *x = sv_get(c, in(c, 0));
    struct sval *s;
    if (!x || rank < 0 || rank > 1 || (rank == 0 && x->n != 1) || !(s = sv_alloc(c, rank, x->n)))
        return;
    memcpy(s->e, x->e, x->n * sizeof(struct elem));
    sv_put(c, out(c, 0), s);
}

/* Identity Reshape Squeeze Unsqueeze Flatten: the values are unchanged. */
static enum gf_status sv_reshape(struct ctx *c)
{
    struct gf_shape o;
    shape_of(out(c, 0), &o);
    sv_copy_rank(c, o.rank);
    return GF_OK;
}

/* Cast CastLike to an integer or floating type keep integral values. */
static enum gf_status sv_cast(struct ctx *c)
{
    enum gf_dtype t = dtype_of(out(c, 0));
    if (gf_dtype_is_int(t) || is_float_dtype(t))
        return sv_reshape(c);
    return GF_OK;
}

static enum gf_status sv_gather(struct ctx *c)
{
    const struct sval *x = sv_get(c, in(c, 0)), *idx = sv_get(c, in(c, 1));
    int64_t axis;
    struct sval *s;
    if (!x || x->rank != 1 || !sv_all_known(idx) || attr_int(c, "axis", 0, &axis) ||
        (axis != 0 && axis != -1) || !(s = sv_alloc(c, idx->rank, idx->n)))
        return GF_OK;
    for (size_t i = 0; i < idx->n; i++) {
        int64_t k = idx->e[i].v < 0 ? idx->e[i].v + (int64_t)x->n : idx->e[i].v;
        if (k < 0 || k >= (int64_t)x->n)
            return fail(c, in(c, 1), "index %lld out of range for %zu elements",
                        (long long)idx->e[i].v, x->n);
        s->e[i] = x->e[k];
    }
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

static enum gf_status sv_concat(struct ctx *c)
{
    size_t total = 0, k = 0;
    struct sval *s;
    for (size_t i = 0; i < c->n->n_inputs; i++) {
        const struct sval *x = sv_get(c, in(c, i));
        if (!x || x->rank != 1)
            return GF_OK;
        total += x->n;
    }
    if (total > MAX_SV || !(s = sv_alloc(c, 1, total)))
        return GF_OK;
    for (size_t i = 0; i < c->n->n_inputs; i++) {
        const struct sval *x = sv_get(c, in(c, i));
        memcpy(s->e + k, x->e, x->n * sizeof(struct elem));
        k += x->n;
    }
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

/* Slice of a 1-D value along axis 0. */
static enum gf_status sv_slice(struct ctx *c)
{
    const struct sval *x = sv_get(c, in(c, 0));
    struct slice_args sa;
    int64_t st, en, sp = 1, ax = 0, first;
    struct sval *s;
    if (!x || x->rank != 1 || slice_args(c, &sa) || sa.starts.len != 1 ||
        !list_at(&sa.starts, 0, &st) || !list_at(&sa.ends, 0, &en) ||
        (sa.steps.given && !list_at(&sa.steps, 0, &sp)) ||
        (sa.axes.given && !list_at(&sa.axes, 0, &ax)) || (ax != 0 && ax != -1) || sp == 0)
        return GF_OK;
    int64_t n = slice_count((int64_t)x->n, st, en, sp, &first);
    if (!(s = sv_alloc(c, 1, (size_t)n)))
        return GF_OK;
    for (int64_t i = 0; i < n; i++)
        s->e[i] = x->e[first + i * sp];
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

static bool same_elem(const struct elem *a, const struct elem *b)
{
    if (a->known || b->known)
        return a->known && b->known && a->v == b->v;
    return a->sym && b->sym && strcmp(a->sym, b->sym) == 0;
}

/* Python-style modulo (Mod with fmod=0); false on a zero divisor. */
static bool int_mod(int64_t a, int64_t b, bool fmod_, int64_t *r)
{
    if (b == 0 || (a == INT64_MIN && b == -1))
        return false;
    *r = a % b;
    if (!fmod_ && *r != 0 && ((*r < 0) != (b < 0)))
        *r += b;
    return true;
}

/* a op b on known values; false when not representable. */
static bool known_binop(enum gf_op op, int64_t a, int64_t b, bool exact, bool fmod_,
                        int64_t *r)
{
    switch (op) {
    case GF_OP_ADD: return !__builtin_add_overflow(a, b, r);
    case GF_OP_SUB: return !__builtin_sub_overflow(a, b, r);
    case GF_OP_MUL: return !__builtin_mul_overflow(a, b, r);
    case GF_OP_DIV:
        if (b == 0 || (a == INT64_MIN && b == -1) || (exact && a % b))
            return false;
        return *r = a / b, true;
    case GF_OP_MOD: return int_mod(a, b, fmod_, r);
    case GF_OP_MAX: return *r = a > b ? a : b, true;
    case GF_OP_MIN: return *r = a < b ? a : b, true;
    case GF_OP_EQUAL: return *r = a == b, true;
    case GF_OP_LESS: return *r = a < b, true;
    case GF_OP_LESS_OR_EQUAL: return *r = a <= b, true;
    case GF_OP_GREATER: return *r = a > b, true;
    case GF_OP_GREATER_OR_EQUAL: return *r = a >= b, true;
    default: return false;
    }
}

/* a op b where a or b is symbolic: the identities that keep a symbol
 * (x*1, x+0, x-0, x/1, x-x, x==x) and dims compared with negatives. */
static struct elem sym_binop(enum gf_op op, const struct elem *a, const struct elem *b)
{
    struct elem unknown = {0};
    bool bk = b->known, ak = a->known;
    if (same_elem(a, b))
        return op == GF_OP_SUB ? elem_of(0) : op == GF_OP_EQUAL ? elem_of(1) :
               op == GF_OP_MAX || op == GF_OP_MIN ? *a : unknown;
    if (op == GF_OP_EQUAL && ((ak && a->v < 0) || (bk && b->v < 0)))
        return elem_of(0); /* a dim is never negative */
    if ((op == GF_OP_MUL && bk && b->v == 1) || ((op == GF_OP_ADD || op == GF_OP_SUB) &&
        bk && b->v == 0) || (op == GF_OP_DIV && bk && b->v == 1))
        return *a;
    if ((op == GF_OP_MUL && ak && a->v == 1) || (op == GF_OP_ADD && ak && a->v == 0))
        return *b;
    if (op == GF_OP_MUL && ((ak && a->v == 0) || (bk && b->v == 0)))
        return elem_of(0);
    return unknown;
}

/* Elementwise arithmetic and comparisons on values of rank <= 1. */
static enum gf_status sv_binary(struct ctx *c)
{
    const struct sval *a = sv_get(c, in(c, 0)), *b = sv_get(c, in(c, 1));
    enum gf_op op = c->n->op;
    int64_t fmod_ = 0;
    struct sval *s;
    if (!a || !b || c->n->n_inputs != 2 || (a->n != b->n && a->n != 1 && b->n != 1))
        return GF_OK;
    if (op == GF_OP_MOD && attr_int(c, "fmod", 0, &fmod_))
        return GF_OK;
    size_t n = a->n > b->n ? a->n : b->n;
    if (a->n == 0 || b->n == 0)
        n = 0;
    if (!(s = sv_alloc(c, a->rank > b->rank ? a->rank : b->rank, n)))
        return GF_OK;
    bool exact = is_float_dtype(dtype_of(out(c, 0))) || is_float_dtype(dtype_of(in(c, 0)));
    for (size_t i = 0; i < n; i++) {
        const struct elem *x = &a->e[a->n == 1 ? 0 : i], *y = &b->e[b->n == 1 ? 0 : i];
        int64_t r;
        /* an integer divisor known to be zero fails at run time anyway */
        if ((op == GF_OP_DIV || op == GF_OP_MOD) && !exact && y->known && y->v == 0)
            return fail(c, in(c, 1), "division by zero in a shape computation");
        if (x->known && y->known)
            s->e[i] = known_binop(op, x->v, y->v, exact, fmod_ != 0, &r) ? elem_of(r) :
                      (struct elem){0};
        else
            s->e[i] = sym_binop(op, x, y);
    }
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

static enum gf_status sv_neg(struct ctx *c)
{
    const struct sval *x = sv_get(c, in(c, 0));
    struct sval *s;
    if (!x || !(s = sv_alloc(c, x->rank, x->n)))
        return GF_OK;
    for (size_t i = 0; i < x->n; i++)
        if (x->e[i].known && x->e[i].v != INT64_MIN)
            s->e[i] = elem_of(-x->e[i].v);
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

/* Where on values: known conditions pick; equal branches need none. */
static enum gf_status sv_where(struct ctx *c)
{
    const struct sval *v[3];
    size_t n = 1;
    int rank = 0;
    struct sval *s;
    for (int i = 0; i < 3; i++) {
        if (!(v[i] = sv_get(c, in(c, (size_t)i))))
            return GF_OK;
        if (v[i]->n != 1 && n != 1 && v[i]->n != n)
            return GF_OK;
        n = v[i]->n != 1 ? v[i]->n : n;
        rank = v[i]->rank > rank ? v[i]->rank : rank;
    }
    if (!(s = sv_alloc(c, rank, n)))
        return GF_OK;
    for (size_t i = 0; i < n; i++) {
        const struct elem *e[3];
        for (int k = 0; k < 3; k++)
            e[k] = &v[k]->e[v[k]->n == 1 ? 0 : i];
        if (e[0]->known)
            s->e[i] = *e[e[0]->v ? 1 : 2];
        else if (same_elem(e[1], e[2]))
            s->e[i] = *e[1];
    }
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

static enum gf_status sv_range(struct ctx *c)
{
    const struct sval *v[3];
    struct sval *s;
    for (int i = 0; i < 3; i++)
        if (!(v[i] = sv_get(c, in(c, (size_t)i))) || v[i]->n != 1 || !v[i]->e[0].known)
            return GF_OK;
    int64_t start = v[0]->e[0].v, delta = v[2]->e[0].v;
    struct gf_shape o;
    shape_of(out(c, 0), &o);
    if (!gf_dtype_is_int(dtype_of(out(c, 0))) || o.rank != 1 || !gf_dim_known(&o.d[0]) ||
        o.d[0].value > MAX_SV || !(s = sv_alloc(c, 1, (size_t)o.d[0].value)))
        return GF_OK;
    for (size_t i = 0; i < s->n; i++) {
        int64_t step, val;
        if (__builtin_mul_overflow((int64_t)i, delta, &step) ||
            __builtin_add_overflow(start, step, &val))
            return GF_OK; /* past int64 (fuzz_load): the values stay unknown */
        s->e[i] = elem_of(val);
    }
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

static enum gf_status sv_constant_of_shape(struct ctx *c)
{
    const struct sval *x = sv_get(c, in(c, 0));
    const struct gf_attr *a = gf_node_attr(c->n, "value");
    struct elem e = elem_of(0);
    struct sval *s;
    if (a && a->type == GF_ATTR_TENSOR) {
        const struct sval *v = sv_from_tensor(c, a->t);
        if (!v || v->n != 1)
            return GF_OK;
        e = v->e[0];
    }
    if (!sv_all_known(x) || x->n != 1 || x->e[0].v > MAX_SV || x->e[0].v < 0 ||
        !(s = sv_alloc(c, 1, (size_t)x->e[0].v)))
        return GF_OK;
    for (size_t i = 0; i < s->n; i++)
        s->e[i] = e;
    sv_put(c, out(c, 0), s);
    return GF_OK;
}

/* ---- backward ops (domain graphfuse; written by the autodiff pass) -------- */

/* Output 0: input `from`'s dtype and the shape held by int64 input `at`
 * (a forward tensor's shape, read from Shape(x)). */
static enum gf_status bw_shape_input(struct ctx *c, size_t from, size_t at, struct gf_shape *t)
{
    struct gf_value *v, *s;
    struct ilist l;
    if (need(c, from, &v) || need(c, at, &s) || int_list(c, at, NULL, &l))
        return GF_ERR_INVALID;
    if (shape_from_list(c, s, &l, t))
        return GF_ERR_INVALID;
    return set_out_like(c, 0, from, t);
}

/* SumToShape(X, shape): the target must broadcast to X (numpy rules). */
static enum gf_status infer_sum_to_shape(struct ctx *c)
{
    struct gf_shape x, t;
    char b1[256], b2[256];
    if (bw_shape_input(c, 0, 1, &t))
        return GF_ERR_INVALID;
    shape_of(in(c, 0), &x);
    if (x.rank >= 0 && t.rank > x.rank)
        return fail(c, in(c, 1), "target rank %d exceeds the input's %d", t.rank, x.rank);
    for (int i = 0; x.rank >= 0 && t.rank >= 0 && i < t.rank; i++) {
        const struct gf_dim *dt = &t.d[i], *dx = &x.d[x.rank - t.rank + i];
        if (gf_dim_known(dt) && gf_dim_known(dx) && dt->value != 1 && dt->value != dx->value)
            return fail(c, in(c, 0), "%s cannot be summed to %s",
                        gf_shape_str(&x, b1, sizeof(b1)), gf_shape_str(&t, b2, sizeof(b2)));
    }
    return GF_OK;
}

/* ReluGrad SigmoidGrad TanhGrad GeluGrad SoftmaxGrad LogSoftmaxGrad
 * DropoutGrad: dX like dY (input 0), whose shape input 1 shares. */
static enum gf_status infer_bw_like_dy(struct ctx *c)
{
    struct gf_value *dy, *y;
    struct gf_shape s, t;
    char b1[256], b2[256];
    if (need(c, 0, &dy) || need(c, 1, &y))
        return GF_ERR_INVALID;
    shape_of(dy, &s);
    shape_of(y, &t);
    if (c->n->op != GF_OP_DROPOUT_GRAD && s.rank >= 0 && t.rank >= 0) {
        bool same = s.rank == t.rank;
        for (int i = 0; same && i < s.rank; i++)
            same = !gf_dim_known(&s.d[i]) || !gf_dim_known(&t.d[i]) || s.d[i].value == t.d[i].value;
        if (!same)
            return fail(c, y, "shape %s differs from the gradient's %s",
                        gf_shape_str(&t, b1, sizeof(b1)), gf_shape_str(&s, b2, sizeof(b2)));
    }
    if (c->n->op == GF_OP_SOFTMAX_GRAD || c->n->op == GF_OP_LOG_SOFTMAX_GRAD) {
        int64_t axis;
        int a;
        if (attr_int(c, "axis", -1, &axis) || (s.rank > 0 && norm_axis(c, dy, axis, s.rank, &a)))
            return GF_ERR_INVALID;
    }
    return set_out_like(c, 0, 0, &s);
}

/* GatherGrad GatherElementsGrad SliceGrad: dY's dtype (input 0), the data
 * shape given as input 1. */
static enum gf_status infer_bw_scatter(struct ctx *c)
{
    struct gf_shape t;
    return bw_shape_input(c, 0, 1, &t);
}

/* LayerNormalizationGrad(dY, X, Scale, Mean?, InvStdDev?) -> dX like X,
 * dScale and dBias shaped X.shape[axis:] (the rule reduces them to the
 * shapes of Scale and B when those are broadcast). */
static enum gf_status infer_layer_norm_grad(struct ctx *c)
{
    struct gf_value *dy, *x, *w;
    struct gf_shape s, o;
    int64_t axis;
    int a = 0;
    if (need(c, 0, &dy) || need(c, 1, &x) || need(c, 2, &w) || attr_int(c, "axis", -1, &axis))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    if (set_out_like(c, 0, 0, &s))
        return GF_ERR_INVALID;
    shape_unknown(&o);
    if (s.rank >= 0) {
        if (norm_axis(c, x, axis, s.rank, &a))
            return GF_ERR_INVALID;
        o.rank = s.rank - a;
        for (int i = a; i < s.rank; i++)
            o.d[i - a] = s.d[i];
    }
    if (set_out_like(c, 1, 0, &o))
        return GF_ERR_INVALID;
    return set_out_like(c, 2, 0, &o);
}

/* SoftmaxCrossEntropyLossGrad(dLoss, scores, labels, weights?) like the
 * scores; NLLLossGrad(dLoss, shape, labels, weights?) of dLoss's dtype and
 * the scores' shape its input 1 holds.  The checks: opcheck.c. */
static enum gf_status infer_loss_grad(struct ctx *c)
{
    struct gf_value *v;
    struct gf_shape d, s, l, w;
    struct gf_loss_rule r;
    bool nll = c->n->op == GF_OP_NLL_LOSS_GRAD;
    if (need_all(c, 3) || (nll ? bw_shape_input(c, 0, 1, &s) : need(c, 1, &v)))
        return GF_ERR_INVALID;
    if (!nll)
        shape_of(v, &s);
    shape_of(in(c, 0), &d);
    shape_of(in(c, 2), &l);
    if (gf_rule_loss(c->n, &d, &s, &l, rule_shape(c, 3, &w), &r))
        return GF_ERR_INVALID;
    return nll ? GF_OK : set_out_like(c, 0, 1, &s);
}

/* ---- fused ops (domain graphfuse, README "Fused ops") ---------------------- */

/* RMSNorm AddRMSNorm LayerNorm AddLayerNorm: Y (and S) like X (Y like a
 * 16-bit R added to an fp32 X); LayerNorm's
 * Mean and InvStdDev (after them) shaped like the statistics, in the
 * compute type (float; double for a double X).  The checks: opcheck.c. */
static enum gf_status infer_fused_norm(struct ctx *c)
{
    struct gf_value *x, *v = NULL;
    struct gf_shape s, rs, ws, bs;
    struct gf_norm_rule r;
    enum gf_op op = c->n->op;
    bool add = op == GF_OP_ADD_RMS_NORM || op == GF_OP_ADD_LAYER_NORM;
    bool ln = op == GF_OP_LAYER_NORM || op == GF_OP_ADD_LAYER_NORM;
    size_t wi = add ? 2 : 1;
    if (need(c, 0, &x) || (add && need(c, 1, &v)))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    const struct gf_shape *rp = add ? rule_shape(c, 1, &rs) : NULL;
    if (gf_rule_norm(c->n, &s, rp, rule_shape(c, wi, &ws), ln ? rule_shape(c, wi + 1, &bs) : NULL,
                     &r))
        return GF_ERR_INVALID;
    if (rp)
        gf_shape_unify(&s, rp, &s);
    /* the mixed form (an fp32 X, a 16-bit R: kernels/checks.h): Y has R's type */
    enum gf_dtype rt = add ? dtype_of(v) : GF_UNDEFINED;
    bool mixed = dtype_of(x) == GF_FLOAT && (rt == GF_FLOAT16 || rt == GF_BFLOAT16);
    if ((mixed ? set_out(c, 0, rt, &s) : set_out_like(c, 0, 0, &s)) ||
        (add && set_out_like(c, 1, 0, &s)))
        return GF_ERR_INVALID;
    if (!ln)
        return GF_OK;
    enum gf_dtype dt = dtype_of(x) == GF_DOUBLE ? GF_DOUBLE : dtype_of(x) ? GF_FLOAT : GF_UNDEFINED;
    if (set_out(c, wi, dt, &r.stats))
        return GF_ERR_INVALID;
    return set_out(c, wi + 1, dt, &r.stats);
}

/* SwiGLU GeGLU: Y is G and U broadcast, of their element type (opcheck.c). */
static enum gf_status infer_fused_glu(struct ctx *c)
{
    struct gf_shape g, u, y;
    enum gf_act act;
    enum gf_dtype dt;
    if (need_all(c, 2))
        return GF_ERR_INVALID;
    dt = dtype_of(in(c, 0));
    if (dt && dtype_of(in(c, 1)) && dtype_of(in(c, 1)) != dt)
        return fail(c, in(c, 1), "element type %s differs from %s",
                    gf_dtype_name(dtype_of(in(c, 1))), gf_dtype_name(dt));
    shape_of(in(c, 0), &g);
    shape_of(in(c, 1), &u);
    if (gf_rule_glu(c->n, &g, &u, &act, &y))
        return GF_ERR_INVALID;
    return set_out(c, 0, dt ? dt : dtype_of(in(c, 1)), &y);
}

/* RoPE: Y like X (opcheck.c); RoPEGrad the same for dX and dY. */
static enum gf_status infer_fused_rope(struct ctx *c)
{
    struct gf_shape s, cs, sn;
    if (need_all(c, 3))
        return GF_ERR_INVALID;
    shape_of(in(c, 0), &s);
    shape_of(in(c, 1), &cs);
    shape_of(in(c, 2), &sn);
    if (gf_rule_rope(c->n, &s, &cs, &sn))
        return GF_ERR_INVALID;
    return set_out_like(c, 0, 0, &s);
}

/* MatMulEpilogue: MatMul's shape of A' x B', A' / B' with the last two
 * axes swapped when transA / transB (opcheck.c). */
static enum gf_status infer_fused_matmul(struct ctx *c)
{
    struct gf_shape a, b, bias, res;
    struct gf_mme_rule r;
    if (need_all(c, 2))
        return GF_ERR_INVALID;
    shape_of(in(c, 0), &a);
    shape_of(in(c, 1), &b);
    if (gf_rule_mme(c->n, &a, &b, rule_shape(c, 2, &bias), rule_shape(c, 3, &res), &r))
        return GF_ERR_INVALID;
    return set_out_like(c, 0, 0, &r.mm.y);
}

/* SoftmaxCrossEntropy: Loss the positions (reduction none) or a scalar,
 * LogP like L (shift=1: [B*(S-1), C]), the gradient G (output 2) like L;
 * the checks are opcheck.c's. */
static enum gf_status infer_fused_sce(struct ctx *c)
{
    struct gf_value *x, *t;
    struct gf_shape s, ts, ws, o;
    struct gf_sce_rule r;
    if (need(c, 0, &x) || need(c, 1, &t))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    shape_of(t, &ts);
    if (gf_rule_sce(c->n, &s, &ts, rule_shape(c, 2, &ws), &r))
        return GF_ERR_INVALID;
    o = r.pos;
    if (r.ce.red != GF_RED_NONE)
        o.rank = 0;
    if (set_out_like(c, 0, 0, &o) || set_out_like(c, 1, 0, &r.logp))
        return GF_ERR_INVALID;
    return set_out_like(c, 2, 0, &s);
}

/* LinearCrossEntropy: Loss the positions (reduction none) or a scalar; the
 * gradients dH, dW, dBias (outputs 1-3) like H, W, Bias; the checks are
 * opcheck.c's. */
static enum gf_status infer_fused_lce(struct ctx *c)
{
    struct gf_value *h, *w, *t;
    struct gf_shape hs, ws, ts, bs, o;
    struct gf_lce_rule r;
    if (need(c, 0, &h) || need(c, 1, &w) || need(c, 2, &t))
        return GF_ERR_INVALID;
    shape_of(h, &hs);
    shape_of(w, &ws);
    shape_of(t, &ts);
    if (gf_rule_lce(c->n, &hs, &ws, &ts, rule_shape(c, 3, &bs), &r))
        return GF_ERR_INVALID;
    o = r.pos;
    if (r.ce.red != GF_RED_NONE)
        o.rank = 0;
    for (size_t i = 1; i < 4; i++) { /* dH, dW, dBias like H, W, Bias */
        struct gf_shape g;
        shape_of(in(c, i == 1 ? 0 : i == 2 ? 1 : 3), &g);
        if (set_out_like(c, i, 0, &g))
            return GF_ERR_INVALID;
    }
    /* fp16 / bf16 H (the precision pass's): the loss is computed and kept in fp32 */
    enum gf_dtype ht = dtype_of(h);
    return set_out(c, 0, ht == GF_FLOAT16 || ht == GF_BFLOAT16 ? GF_FLOAT : ht, &o);
}

/* JSD: X and Y of one shape; the loss is a scalar. */
static enum gf_status infer_fused_jsd(struct ctx *c)
{
    struct gf_value *x, *y;
    struct gf_shape s, t, o;
    char b1[256], b2[256];
    if (need(c, 0, &x) || need(c, 1, &y))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    shape_of(y, &t);
    if (s.rank == 0)
        return fail(c, x, "JSD input is a scalar");
    bool same = s.rank < 0 || t.rank < 0 || s.rank == t.rank;
    for (int i = 0; same && s.rank >= 0 && t.rank >= 0 && i < s.rank; i++)
        same = gf_dim_unify(&s.d[i], &t.d[i], &o.d[0]);
    if (!same)
        return fail(c, y, "Y %s does not have X's shape %s", gf_shape_str(&t, b1, sizeof(b1)),
                    gf_shape_str(&s, b2, sizeof(b2)));
    shape_blank(&o, 0);
    return set_out_like(c, 0, 0, &o);
}

/* Q's compute type: double for double, else float (attention's Stats). */
static enum gf_dtype attn_stats_type(struct ctx *c, size_t qi)
{
    enum gf_dtype dt = dtype_of(in(c, qi));
    return dt == GF_DOUBLE ? GF_DOUBLE : dt ? GF_FLOAT : GF_UNDEFINED;
}

/* Attention(Q, K, V, Mask?) -> O [b..., Sq, Dv], Stats? [2, b..., Sq]
 * (opcheck.c). */
static enum gf_status infer_fused_attn(struct ctx *c)
{
    struct gf_shape q, k, v, m;
    struct gf_attn_rule r;
    if (need_all(c, 3))
        return GF_ERR_INVALID;
    shape_of(in(c, 0), &q);
    shape_of(in(c, 1), &k);
    shape_of(in(c, 2), &v);
    if (gf_rule_attention(c->n, &q, &k, &v, rule_shape(c, 3, &m), &r) ||
        set_out_like(c, 0, 0, &r.o))
        return GF_ERR_INVALID;
    return set_out(c, 1, attn_stats_type(c, 0), &r.stats);
}

/* ---- ONNX Runtime contrib ops, opset-23 ops (optimize --target ort / onnx) -- */

/* SkipSimplifiedLayerNormalization SkipLayerNormalization: input [B,S,H]
 * or [T,H]; output (0) and the sum (3) like it, mean and inv_std_var
 * (1, 2) float with H reduced to 1. */
static enum gf_status infer_skip_norm(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s, o;
    bool flags[MAX_RANK] = {false};
    if (need_all(c, 3) || need(c, 0, &x))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    if (s.rank >= 0 && (s.rank < 2 || s.rank > 3))
        return fail(c, x, "input has rank %d, expected 2 or 3", s.rank);
    if (set_out_like(c, 0, 0, &s) || set_out_like(c, 3, 0, &s))
        return GF_ERR_INVALID;
    shape_unknown(&o);
    if (s.rank >= 0) {
        flags[s.rank - 1] = true;
        reduce_shape(&s, flags, true, &o);
    }
    if (set_out(c, 1, GF_FLOAT, &o))
        return GF_ERR_INVALID;
    return set_out(c, 2, GF_FLOAT, &o);
}

/* FusedMatMul: MatMulEpilogue's shapes (transA, transB); no batch
 * transposes. */
static enum gf_status infer_ms_fused_matmul(struct ctx *c)
{
    int64_t ba, bb;
    if (attr_int(c, "transBatchA", 0, &ba) || attr_int(c, "transBatchB", 0, &bb))
        return GF_ERR_INVALID;
    if (ba || bb)
        return fail(c, NULL, "transBatchA / transBatchB are not supported");
    return infer_fused_matmul(c);
}

/* com.microsoft RotaryEmbedding (X, position_ids, cos, sin), ONNX
 * RotaryEmbedding (X, cos, sin, position_ids?): Y like X. */
static enum gf_status infer_rotary(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s;
    if (need_all(c, c->n->op == GF_OP_ROTARY_EMBEDDING ? 3 : 4) || need(c, 0, &x))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    if (s.rank >= 0 && s.rank != 3 && s.rank != 4)
        return fail(c, x, "input has rank %d, expected 3 or 4", s.rank);
    return set_out_like(c, 0, 0, &s);
}

/* ---- fused backward ops (graphfuse; passes/grad_rules_fused.c) ------------ */

/* RMSNormGrad(dY, X, W?, G?) -> dX like X, dW shaped X.shape[axis:] (the
 * rule sums it down to W's shape when W was broadcast), dXl (dX in dY's
 * type: a 16-bit dY's R gradient, docs/precision.md); LayerNormGrad(dY, X, W?,
 * Mean?, InvStdDev?) -> dX, dW, dB, the same with dB like dW.  The checks:
 * opcheck.c. */
static enum gf_status infer_rms_norm_grad(struct ctx *c)
{
    struct gf_value *dy, *x;
    struct gf_shape d, s, ws, ms, is, gs;
    struct gf_norm_rule r;
    bool ln = c->n->op == GF_OP_LAYER_NORM_GRAD;
    if (need(c, 0, &dy) || need(c, 1, &x))
        return GF_ERR_INVALID;
    shape_of(dy, &d);
    shape_of(x, &s);
    if (gf_rule_norm_grad(c->n, &d, &s, rule_shape(c, 2, &ws), ln ? rule_shape(c, 3, &ms) : NULL,
                          ln ? rule_shape(c, 4, &is) : NULL, ln ? NULL : rule_shape(c, 3, &gs),
                          &r))
        return GF_ERR_INVALID;
    if (set_out_like(c, 0, 1, &s) || set_out_like(c, 1, 1, &r.block))
        return GF_ERR_INVALID;
    /* LayerNormGrad's dB like dW; RMSNormGrad's dXl: dX in dY's type */
    return ln ? set_out_like(c, 2, 1, &r.block) : set_out_like(c, 2, 0, &s);
}

/* SwiGLUGrad GeGLUGrad (dY, G, U) -> dG, dU, both like dY (the rule writes
 * them only where G and U have dY's shape; opcheck.c checks it). */
static enum gf_status infer_glu_grad(struct ctx *c)
{
    struct gf_shape s, g, u;
    enum gf_act act;
    if (need_all(c, 3))
        return GF_ERR_INVALID;
    shape_of(in(c, 0), &s);
    shape_of(in(c, 1), &g);
    shape_of(in(c, 2), &u);
    if (gf_rule_glu_grad(c->n, &s, &g, &u, &act))
        return GF_ERR_INVALID;
    if (set_out_like(c, 0, 0, &s))
        return GF_ERR_INVALID;
    return set_out_like(c, 1, 0, &s);
}

/* MatMulEpilogueGrad(dY, Z) -> dZ like dY, dBias [N] (dY's last dim);
 * the checks: opcheck.c. */
static enum gf_status infer_mme_grad(struct ctx *c)
{
    struct gf_shape s, z;
    struct gf_mme_grad_rule r;
    if (need_all(c, 2))
        return GF_ERR_INVALID;
    shape_of(in(c, 0), &s);
    shape_of(in(c, 1), &z);
    if (gf_rule_mme_grad(c->n, &s, &z, &r) || set_out_like(c, 0, 0, &s))
        return GF_ERR_INVALID;
    return set_out_like(c, 1, 0, &r.dbias);
}

/* CrossEntropyGrad(dLoss, G) -> dL like G (opcheck.c). */
static enum gf_status infer_ce_grad(struct ctx *c)
{
    struct gf_shape d, s;
    struct gf_ceg_rule r;
    if (need_all(c, 2))
        return GF_ERR_INVALID;
    shape_of(in(c, 0), &d);
    shape_of(in(c, 1), &s);
    if (gf_rule_ce_grad(c->n, &d, &s, &r))
        return GF_ERR_INVALID;
    return set_out_like(c, 0, 1, &s);
}

/* JSDGrad(dLoss, X, Y, T?) -> dX, dY like X. */
static enum gf_status infer_jsd_grad(struct ctx *c)
{
    struct gf_value *x;
    struct gf_shape s;
    if (need_all(c, 3) || need(c, 1, &x))
        return GF_ERR_INVALID;
    shape_of(x, &s);
    if (set_out_like(c, 0, 1, &s))
        return GF_ERR_INVALID;
    return set_out_like(c, 1, 1, &s);
}

/* AttentionGrad(dO, Q, K, V, Mask?, O, Stats?) -> dQ, dK, dV like Q, K, V;
 * dO and O like Attention's O, Stats like its Stats (opcheck.c). */
static enum gf_status infer_attn_grad(struct ctx *c)
{
    struct gf_shape s[3], d, m, o, st;
    struct gf_attn_rule r;
    struct gf_value *v;
    if (need_all(c, 4) || need(c, 5, &v))
        return GF_ERR_INVALID;
    for (size_t i = 0; i < 3; i++)
        shape_of(in(c, 1 + i), &s[i]);
    shape_of(in(c, 0), &d);
    shape_of(in(c, 5), &o);
    if (gf_rule_attention_grad(c->n, &d, &s[0], &s[1], &s[2], rule_shape(c, 4, &m), &o,
                               rule_shape(c, 6, &st), &r))
        return GF_ERR_INVALID;
    for (size_t i = 0; i < 3; i++)
        if (set_out_like(c, i, 1 + i, &s[i]))
            return GF_ERR_INVALID;
    return GF_OK;
}

/* RoPEGrad(dY, Cos, Sin) -> dX like dY, whose last axis has an even length. */
static enum gf_status infer_rope_grad(struct ctx *c)
{
    return infer_fused_rope(c);
}

/* GradAccumulate GradNorm SGDStep AdamWStep (graph/ops.def, "optimizer
 * ops"): GradAccumulate's Y the rule's shape, of G's type; GradNorm's N one
 * float64; the steps' outputs (P', and Buf' or ExpAvg', ExpAvgSq') like P.
 * The checks: opcheck.c. */
static enum gf_status infer_optim(struct ctx *c)
{
    struct gf_shape s[5];
    const struct gf_shape *ins[5];
    size_t n_in = c->n->n_inputs < 5 ? c->n->n_inputs : 5;
    struct gf_optim_rule r;
    for (size_t i = 0; i < n_in; i++)
        ins[i] = rule_shape(c, i, &s[i]);
    if (gf_rule_optim(c->n, ins, n_in, &r))
        return GF_ERR_INVALID;
    if (c->n->op == GF_OP_GRAD_NORM)
        return set_out(c, 0, GF_DOUBLE, &r.y);
    for (size_t k = 0; k < c->n->n_outputs; k++)
        if (set_out_like(c, k, 0, &r.y))
            return GF_ERR_INVALID;
    return GF_OK;
}

/* ---- tables -------------------------------------------------------------- */

static const infer_fn infer_table[GF_OP_COUNT] = {
    [GF_OP_ADD] = infer_arith, [GF_OP_SUB] = infer_arith, [GF_OP_MUL] = infer_arith,
    [GF_OP_DIV] = infer_arith, [GF_OP_MOD] = infer_arith, [GF_OP_POW] = infer_pow,
    [GF_OP_AND] = infer_compare, [GF_OP_OR] = infer_compare, [GF_OP_XOR] = infer_compare,
    [GF_OP_EQUAL] = infer_compare, [GF_OP_LESS] = infer_compare,
    [GF_OP_LESS_OR_EQUAL] = infer_compare, [GF_OP_GREATER] = infer_compare,
    [GF_OP_GREATER_OR_EQUAL] = infer_compare,

    [GF_OP_SQRT] = infer_unary, [GF_OP_RECIPROCAL] = infer_unary, [GF_OP_NEG] = infer_unary,
    [GF_OP_ABS] = infer_unary, [GF_OP_EXP] = infer_unary, [GF_OP_LOG] = infer_unary,
    [GF_OP_SIN] = infer_unary, [GF_OP_COS] = infer_unary, [GF_OP_TANH] = infer_unary,
    [GF_OP_SIGMOID] = infer_unary, [GF_OP_RELU] = infer_unary,
    [GF_OP_LEAKY_RELU] = infer_unary, [GF_OP_ELU] = infer_unary, [GF_OP_SELU] = infer_unary,
    [GF_OP_SOFTPLUS] = infer_unary, [GF_OP_SOFTSIGN] = infer_unary,
    [GF_OP_HARD_SIGMOID] = infer_unary, [GF_OP_HARD_SWISH] = infer_unary,
    [GF_OP_ERF] = infer_unary, [GF_OP_GELU] = infer_unary, [GF_OP_FLOOR] = infer_unary,
    [GF_OP_CEIL] = infer_unary, [GF_OP_ROUND] = infer_unary, [GF_OP_SIGN] = infer_unary,
    [GF_OP_CLIP] = infer_unary, [GF_OP_NOT] = infer_unary_bool,
    [GF_OP_IS_NAN] = infer_unary_bool, [GF_OP_IS_INF] = infer_unary_bool,

    [GF_OP_MAX] = infer_variadic, [GF_OP_MIN] = infer_variadic,
    [GF_OP_MEAN] = infer_variadic, [GF_OP_SUM] = infer_variadic, [GF_OP_WHERE] = infer_where,

    [GF_OP_CAST] = infer_cast, [GF_OP_CAST_LIKE] = infer_cast_like,
    [GF_OP_IDENTITY] = infer_identity, [GF_OP_DROPOUT] = infer_dropout,
    [GF_OP_CONSTANT] = infer_constant, [GF_OP_CONSTANT_OF_SHAPE] = infer_constant_of_shape,
    [GF_OP_SHAPE] = infer_shape, [GF_OP_SIZE] = infer_size, [GF_OP_RANGE] = infer_range,

    [GF_OP_MATMUL] = infer_matmul, [GF_OP_GEMM] = infer_gemm, [GF_OP_EINSUM] = infer_einsum,

    [GF_OP_TRANSPOSE] = infer_transpose, [GF_OP_RESHAPE] = infer_reshape,
    [GF_OP_FLATTEN] = infer_flatten, [GF_OP_SQUEEZE] = infer_squeeze,
    [GF_OP_UNSQUEEZE] = infer_unsqueeze, [GF_OP_CONCAT] = infer_concat,
    [GF_OP_SPLIT] = infer_split, [GF_OP_SLICE] = infer_slice, [GF_OP_GATHER] = infer_gather,
    [GF_OP_GATHER_ELEMENTS] = infer_gather_elements, [GF_OP_GATHER_ND] = infer_gather_nd,
    [GF_OP_SCATTER_ND] = infer_scatter, [GF_OP_SCATTER_ELEMENTS] = infer_scatter,
    [GF_OP_EXPAND] = infer_expand, [GF_OP_TILE] = infer_tile, [GF_OP_PAD] = infer_pad,
    [GF_OP_TRILU] = infer_unary, [GF_OP_CUM_SUM] = infer_unary,
    [GF_OP_ONE_HOT] = infer_one_hot, [GF_OP_ARG_MAX] = infer_arg, [GF_OP_ARG_MIN] = infer_arg,
    [GF_OP_TOP_K] = infer_top_k,

    [GF_OP_REDUCE_MEAN] = infer_reduce, [GF_OP_REDUCE_SUM] = infer_reduce,
    [GF_OP_REDUCE_MAX] = infer_reduce, [GF_OP_REDUCE_MIN] = infer_reduce,
    [GF_OP_REDUCE_PROD] = infer_reduce, [GF_OP_REDUCE_L1] = infer_reduce,
    [GF_OP_REDUCE_L2] = infer_reduce, [GF_OP_REDUCE_SUM_SQUARE] = infer_reduce,
    [GF_OP_REDUCE_LOG_SUM_EXP] = infer_reduce,

    [GF_OP_SOFTMAX] = infer_softmax, [GF_OP_LOG_SOFTMAX] = infer_softmax,
    [GF_OP_HARDMAX] = infer_softmax, [GF_OP_LAYER_NORMALIZATION] = infer_layer_norm,
    [GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS] = infer_loss,
    [GF_OP_NEGATIVE_LOG_LIKELIHOOD_LOSS] = infer_loss,

    /* backward ops (autodiff) */
    [GF_OP_SUM_TO_SHAPE] = infer_sum_to_shape, [GF_OP_SOFTMAX_GRAD] = infer_bw_like_dy,
    [GF_OP_LOG_SOFTMAX_GRAD] = infer_bw_like_dy, [GF_OP_RELU_GRAD] = infer_bw_like_dy,
    [GF_OP_SIGMOID_GRAD] = infer_bw_like_dy, [GF_OP_TANH_GRAD] = infer_bw_like_dy,
    [GF_OP_GELU_GRAD] = infer_bw_like_dy, [GF_OP_DROPOUT_GRAD] = infer_bw_like_dy,
    [GF_OP_GATHER_GRAD] = infer_bw_scatter, [GF_OP_GATHER_ELEMENTS_GRAD] = infer_bw_scatter,
    [GF_OP_SLICE_GRAD] = infer_bw_scatter, [GF_OP_NLL_LOSS_GRAD] = infer_loss_grad,
    [GF_OP_LAYER_NORMALIZATION_GRAD] = infer_layer_norm_grad,
    [GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS_GRAD] = infer_loss_grad,

    /* fused ops (graphfuse) */
    [GF_OP_RMS_NORM] = infer_fused_norm, [GF_OP_ADD_RMS_NORM] = infer_fused_norm,
    [GF_OP_LAYER_NORM] = infer_fused_norm, [GF_OP_ADD_LAYER_NORM] = infer_fused_norm,
    [GF_OP_SWIGLU] = infer_fused_glu, [GF_OP_GEGLU] = infer_fused_glu,
    [GF_OP_SILU] = infer_unary, [GF_OP_FUSED_GELU] = infer_unary,
    [GF_OP_MATMUL_EPILOGUE] = infer_fused_matmul, [GF_OP_ROPE] = infer_fused_rope,
    [GF_OP_SOFTMAX_CROSS_ENTROPY] = infer_fused_sce,
    [GF_OP_LINEAR_CROSS_ENTROPY] = infer_fused_lce, [GF_OP_JSD] = infer_fused_jsd,
    [GF_OP_ATTENTION] = infer_fused_attn,

    /* ONNX Runtime contrib ops, opset-23 ops (optimize --target ort / onnx) */
    [GF_OP_MS_SKIP_SIMPLIFIED_LAYER_NORM] = infer_skip_norm,
    [GF_OP_MS_SKIP_LAYER_NORM] = infer_skip_norm, [GF_OP_MS_GELU] = infer_unary,
    [GF_OP_MS_FAST_GELU] = infer_unary, [GF_OP_MS_BIAS_GELU] = infer_unary,
    [GF_OP_MS_QUICK_GELU] = infer_unary, [GF_OP_MS_FUSED_MATMUL] = infer_ms_fused_matmul,
    [GF_OP_MS_ROTARY_EMBEDDING] = infer_rotary, [GF_OP_ROTARY_EMBEDDING] = infer_rotary,
    [GF_OP_SIMPLIFIED_LAYER_NORMALIZATION] = infer_layer_norm,
    [GF_OP_RMS_NORMALIZATION] = infer_layer_norm,

    /* fused backward ops (graphfuse) */
    [GF_OP_RMS_NORM_GRAD] = infer_rms_norm_grad, [GF_OP_SWIGLU_GRAD] = infer_glu_grad,
    [GF_OP_GEGLU_GRAD] = infer_glu_grad, [GF_OP_ROPE_GRAD] = infer_rope_grad,
    [GF_OP_LAYER_NORM_GRAD] = infer_rms_norm_grad, [GF_OP_MATMUL_EPILOGUE_GRAD] = infer_mme_grad,
    [GF_OP_CROSS_ENTROPY_GRAD] = infer_ce_grad, [GF_OP_JSD_GRAD] = infer_jsd_grad,
    [GF_OP_ATTENTION_GRAD] = infer_attn_grad,

    /* optimizer ops (graphfuse) */
    [GF_OP_GRAD_ACCUMULATE] = infer_optim, [GF_OP_GRAD_NORM] = infer_optim,
    [GF_OP_SGD_STEP] = infer_optim, [GF_OP_ADAMW_STEP] = infer_optim,
};

/* Ops whose output values (not just shapes) are tracked. */
static const sv_fn sv_table[GF_OP_COUNT] = {
    [GF_OP_CONSTANT] = sv_constant, [GF_OP_SHAPE] = sv_shape, [GF_OP_SIZE] = sv_size,
    [GF_OP_IDENTITY] = sv_reshape, [GF_OP_RESHAPE] = sv_reshape,
    [GF_OP_SQUEEZE] = sv_reshape, [GF_OP_UNSQUEEZE] = sv_reshape,
    [GF_OP_FLATTEN] = sv_reshape, [GF_OP_CAST] = sv_cast, [GF_OP_CAST_LIKE] = sv_cast,
    [GF_OP_GATHER] = sv_gather, [GF_OP_CONCAT] = sv_concat, [GF_OP_SLICE] = sv_slice,
    [GF_OP_ADD] = sv_binary, [GF_OP_SUB] = sv_binary, [GF_OP_MUL] = sv_binary,
    [GF_OP_DIV] = sv_binary, [GF_OP_MOD] = sv_binary, [GF_OP_MAX] = sv_binary,
    [GF_OP_MIN] = sv_binary, [GF_OP_EQUAL] = sv_binary, [GF_OP_LESS] = sv_binary,
    [GF_OP_LESS_OR_EQUAL] = sv_binary, [GF_OP_GREATER] = sv_binary,
    [GF_OP_GREATER_OR_EQUAL] = sv_binary, [GF_OP_WHERE] = sv_where, [GF_OP_NEG] = sv_neg,
    [GF_OP_RANGE] = sv_range, [GF_OP_CONSTANT_OF_SHAPE] = sv_constant_of_shape,
};

/* ---- driver -------------------------------------------------------------- */

static enum gf_status infer_graph(struct ctx *c, struct gf_graph *g);

/* Subgraphs (If / Loop / Scan bodies ...) of node n, whatever its op. */
static enum gf_status infer_subgraphs(struct ctx *c, struct gf_node *n)
{
    for (size_t i = 0; i < n->n_attrs; i++) {
        const struct gf_attr *a = &n->attrs[i];
        if (a->type == GF_ATTR_GRAPH && a->g && infer_graph(c, a->g))
            return GF_ERR_INVALID;
        for (size_t k = 0; a->type == GF_ATTR_GRAPHS && a->graphs && k < a->n; k++)
            if (a->graphs[k] && infer_graph(c, a->graphs[k]))
                return GF_ERR_INVALID;
    }
    return GF_OK;
}

/* Tells the caller about outputs of n (main graph only) that are integer
 * tensors whose every element is known. */
static void report_known(struct ctx *c, struct gf_node *n)
{
    int64_t buf[MAX_SV];
    for (size_t o = 0; o < n->n_outputs; o++) {
        const struct gf_value *v = n->outputs[o];
        const struct sval *s = v ? sv_get(c, v) : NULL;
        if (!s || s->n > MAX_SV || !sv_all_known(s) || v->type.kind != GF_TYPE_TENSOR ||
            (v->type.dtype != GF_INT64 && v->type.dtype != GF_INT32) ||
            gf_type_numel(&v->type) != (int64_t)s->n || v->type.rank != s->rank)
            continue;
        for (size_t i = 0; i < s->n; i++)
            buf[i] = s->e[i].v;
        c->known_fn(c->known_ctx, v, s->n, buf);
    }
}

/* Scan (run by no backend, but checked so that nothing downstream reads
 * past its inputs): num_scan_inputs M of its inputs are scanned, so
 * 1 <= M <= inputs. */
static enum gf_status check_scan(struct ctx *c)
{
    const struct gf_node *n = c->n;
    int64_t m;
    if (strcmp(n->op_type, "Scan") != 0 ||
        (n->domain && *n->domain && strcmp(n->domain, "ai.onnx") != 0))
        return GF_OK;
    if (!gf_node_attr(n, "num_scan_inputs"))
        return fail(c, NULL, "missing attribute 'num_scan_inputs'");
    if (attr_int(c, "num_scan_inputs", 0, &m))
        return GF_ERR_INVALID;
    if (m < 1 || (uint64_t)m > n->n_inputs)
        return fail(c, NULL, "num_scan_inputs is %lld but the node has %zu input%s",
                    (long long)m, n->n_inputs, n->n_inputs == 1 ? "" : "s");
    return GF_OK;
}

static enum gf_status infer_node(struct ctx *c, struct gf_node *n)
{
    if (infer_subgraphs(c, n))
        return GF_ERR_INVALID;
    c->n = n;
    if (n->op == GF_OP_UNKNOWN && n->op_type && check_scan(c))
        return GF_ERR_INVALID;
    if (n->op <= GF_OP_UNKNOWN || n->op >= GF_OP_COUNT || !infer_table[n->op])
        return GF_OK;
    enum gf_status st = infer_table[n->op](c);
    if (st == GF_OK && sv_table[n->op])
        st = sv_table[n->op](c);
    if (st == GF_OK && c->known_fn && !c->sc->parent)
        report_known(c, n);
    return st;
}

static enum gf_status infer_graph(struct ctx *c, struct gf_graph *g)
{
    struct scope sc = {.g = g, .n = g->n_values, .parent = c->sc};
    struct gf_node *saved = c->n;
    enum gf_status st = GF_OK;
    if (sc.n && !(sc.sv = calloc(sc.n, sizeof(*sc.sv))))
        return gf_error(GF_ERR_NOMEM, "out of memory in shape inference");
    c->sc = &sc;
    for (struct gf_node *n = g->first; n && st == GF_OK; n = n->next)
        st = infer_node(c, n);
    c->sc = sc.parent;
    c->n = saved;
    for (size_t i = 0; i < sc.n; i++)
        free(sc.sv[i]);
    free(sc.sv);
    return st;
}

enum gf_status gf_graph_infer_shapes(struct gf_graph *g)
{
    return gf_graph_infer_shapes_values(g, NULL, NULL);
}

enum gf_status gf_graph_infer_shapes_values(struct gf_graph *g, gf_shape_value_fn fn,
                                            void *ctx)
{
    if (!g)
        return gf_error(GF_ERR_ARG, "gf_graph_infer_shapes: no graph");
    struct ctx c = {.opset = g->model ? gf_model_opset(g->model, "") : 0,
                    .known_fn = fn, .known_ctx = ctx};
    if (c.opset <= 0)
        c.opset = LATEST_OPSET;
    enum gf_status st = infer_graph(&c, g);
    while (c.extra) {
        struct sval *next = c.extra->next;
        free(c.extra);
        c.extra = next;
    }
    return st;
}
