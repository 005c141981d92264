/* RoPE: the rotate-half rotary embedding of the Hugging Face models,
 * Y = X*cos + rotate_half(X)*sin, as the torch.onnx exporters write it
 * (legacy and dynamo: two Slices of the last axis, or one Split).  Pattern
 * format: pattern.h; the fused op: README "Fused ops". */
#include <string.h>

#include "pattern.h"

/* ---- the halves of x ---------------------------------------------------------
 * The pattern table cannot hold the nodes that cut x in halves: a Slice has
 * five inputs (the table takes four) and the two halves of a Split are two
 * outputs of one node (a pattern node binds one).  So the halves are
 * captures, the check verifies where they come from, and absorb() adds
 * those nodes to the match through the list of passed-through nodes, which
 * the engine removes with the match and puts into the function body like
 * the others.  The check therefore does what the engine's escape check
 * does for pattern nodes: every output of an absorbed node is read only by
 * the match. */

static bool absorb(struct gf_match *m, struct gf_node *n)
{
    for (int i = 0; i < m->n_cast; i++)
        if (m->cast[i] == n)
            return true;
    if (m->n_cast == GF_PAT_MAX_CASTS)
        return false;
    m->cast[m->n_cast++] = n;
    return true;
}

/* Output s of n is read once, by readers[s], and is no graph output. */
static bool read_only_by(const struct gf_node *n, const struct gf_node *const *readers,
                         size_t n_readers)
{
    for (size_t s = 0; s < n->n_outputs; s++) {
        const struct gf_value *o = n->outputs[s];
        if (!o)
            continue;
        if (o->is_output || o->n_uses != 1 || s >= n_readers || o->uses[0].node != readers[s])
            return false;
    }
    return true;
}

/* Element i of a 1-element int tensor (a Slice bound / axis / step). */
static bool one_int(const struct gf_tensor *t, int64_t *v)
{
    if (!t || t->nelem != 1 || (t->dtype != GF_INT64 && t->dtype != GF_INT32))
        return false;
    *v = gf_tensor_get_i64(t, 0);
    return true;
}

/* Slice input k (opset >= 10) or attribute `name` (opset 1): one element,
 * `dflt` when absent. */
static bool slice_param(const struct gf_node *s, size_t k, const char *name, int64_t dflt,
                        int64_t *v)
{
    if (s->n_inputs > 1) {
        if (k >= s->n_inputs || !s->inputs[k]) {
            *v = dflt;
            return k > 2; /* starts and ends are required */
        }
        return one_int(gf_value_constant(s->inputs[k]), v);
    }
    size_t n = 0;
    const int64_t *a = gf_node_attr_ints(s, name, &n);
    if (!a) {
        *v = dflt;
        return strcmp(name, "starts") != 0 && strcmp(name, "ends") != 0;
    }
    if (n != 1)
        return false;
    *v = a[0];
    return true;
}

/* ONNX clamping of a Slice bound on an axis of size d (step 1). */
static int64_t clamp_bound(int64_t b, int64_t d)
{
    if (b < 0)
        b = b < -d ? 0 : b + d;
    return b > d ? d : b;
}

/* s is Slice(x) over [from, to) of the last axis (rank, size d), step 1. */
static bool is_slice(const struct gf_node *s, const struct gf_value *x, int rank, int64_t d,
                     int64_t from, int64_t to)
{
    int64_t st, en, ax, step;
    if (s->op != GF_OP_SLICE || s->n_inputs < 1 || s->inputs[0] != x)
        return false;
    if (!slice_param(s, 1, "starts", 0, &st) || !slice_param(s, 2, "ends", 0, &en) ||
        !slice_param(s, 3, "axes", 0, &ax) || !slice_param(s, 4, "steps", 1, &step))
        return false;
    if (ax < 0)
        ax += rank;
    return ax == rank - 1 && step == 1 && clamp_bound(st, d) == from && clamp_bound(en, d) == to;
}

/* sp is Split(x) of the last axis into two halves of size h. */
static bool is_split(const struct gf_node *sp, const struct gf_value *x, int rank, int64_t h)
{
    if (sp->op != GF_OP_SPLIT || sp->n_inputs < 1 || sp->inputs[0] != x ||
        sp->n_outputs != 2 || !sp->outputs[0] || !sp->outputs[1])
        return false;
    int64_t ax = gf_node_attr_int(sp, "axis", 0);
    if ((ax < 0 ? ax + rank : ax) != rank - 1)
        return false;
    if (sp->n_inputs > 1 && sp->inputs[1]) { /* sizes as input (opset 13) */
        const struct gf_tensor *t = gf_value_constant(sp->inputs[1]);
        return t && t->nelem == 2 && gf_tensor_get_i64(t, 0) == h &&
               gf_tensor_get_i64(t, 1) == h;
    }
    size_t n = 0;
    const int64_t *a = gf_node_attr_ints(sp, "split", &n);
    if (a) /* sizes as attribute (before opset 13) */
        return n == 2 && a[0] == h && a[1] == h;
    return true; /* two equal parts (d is even) */
}

/* The two dims are equal: the same known size or the same symbol. */
static bool same_dim(const struct gf_dim *a, const struct gf_dim *b)
{
    if (a->value >= 0 || b->value >= 0)
        return a->value == b->value;
    return a->param && b->param && strcmp(a->param, b->param) == 0;
}

/* v (cos or sin) broadcasts to x's shape without enlarging it: rank(v) <=
 * rank(x), each dim 1 or x's; same dtype. */
static bool fits_x(const struct gf_value *v, const struct gf_value *x)
{
    int rv = gf_pat_rank(v), rx = gf_pat_rank(x);
    if (rv < 0 || rv > rx || v->type.dtype != x->type.dtype)
        return false;
    for (int i = 1; i <= rv; i++) {
        const struct gf_dim *dv = &v->type.dims[rv - i];
        if (dv->value != 1 && !same_dim(dv, &x->type.dims[rx - i]))
            return false;
    }
    return true;
}

/* ---- RoPE ------------------------------------------------------------------------
 *   x ─Slice(d/2:) | Split:1─Neg─┐
 *   x ─Slice(:d/2) | Split:0─────Concat(-1)─Mul(sin)─┐
 *   x ─Mul(cos)───────────────────────────────────────Add── y   (Mul, Add either order)
 */
enum { RX, RCOS, RSIN, RHI, RLO };
static const struct gf_pcap rope_caps[] = {
    [RX] = GF_K_ANY("x"), [RCOS] = GF_K_ANY("cos"), [RSIN] = GF_K_ANY("sin"),
    [RHI] = GF_K_ANY("x[d/2:]"), [RLO] = GF_K_ANY("x[:d/2]"),
};
enum { R_XCOS, R_NEG, R_CAT, R_RSIN, R_ROOT };
static const struct gf_pnode rope_nodes[] = {
    [R_XCOS] = {GF_P("x*cos", GF_OP_MUL, GF_C(RX), GF_C(RCOS)), .flags = GF_PF_COMMUTE},
    [R_NEG] = {GF_P("-x[d/2:]", GF_OP_NEG, GF_C(RHI))},
    [R_CAT] = {GF_P("rotate_half", GF_OP_CONCAT, GF_N(R_NEG), GF_C(RLO))},
    [R_RSIN] = {GF_P("rot*sin", GF_OP_MUL, GF_N(R_CAT), GF_C(RSIN)), .flags = GF_PF_COMMUTE},
    [R_ROOT] = {GF_P("x*cos+rot*sin", GF_OP_ADD, GF_N(R_XCOS), GF_N(R_RSIN)),
                .flags = GF_PF_COMMUTE},
};

/* The halves come from x: two Slices at d/2, or one Split into equal
 * halves; they join the match (see absorb). */
static bool rope_halves(struct gf_match *m, const struct gf_value *x, int rank, int64_t d)
{
    const struct gf_value *hi = gf_match_cap(m, RHI), *lo = gf_match_cap(m, RLO);
    struct gf_node *ph = hi->producer, *pl = lo->producer;
    struct gf_node *neg = gf_match_node(m, R_NEG), *cat = gf_match_node(m, R_CAT);
    if (ph && ph == pl) {
        const struct gf_node *readers[2] = {cat, neg};
        if (!is_split(ph, x, rank, d / 2) || hi->producer_slot != 1)
            return gf_match_fail(m, R_NEG, "'%s' and '%s' are not the halves (second under "
                                 "the Neg) of a Split of x's last axis (%lld) into two equal "
                                 "parts", hi->name, lo->name, (long long)d);
        if (!read_only_by(ph, readers, 2))
            return gf_match_fail(m, R_NEG, "an output of the Split is read outside the match");
        return absorb(m, ph) || gf_match_fail(m, R_NEG, "too many nodes absorbed");
    }
    if (!ph || !is_slice(ph, x, rank, d, d / 2, d))
        return gf_match_fail(m, R_NEG, "'%s' is not x[..., %lld:] (a Slice of x's last axis "
                             "from d/2, step 1): the Neg must take the second half",
                             hi->name, (long long)(d / 2));
    if (!pl || !is_slice(pl, x, rank, d, 0, d / 2))
        return gf_match_fail(m, R_CAT, "'%s' is not x[..., :%lld] (a Slice of x's last axis "
                             "up to d/2, step 1)", lo->name, (long long)(d / 2));
    if (!read_only_by(ph, (const struct gf_node *[]){neg}, 1) ||
        !read_only_by(pl, (const struct gf_node *[]){cat}, 1))
        return gf_match_fail(m, R_CAT, "a half of x is also read outside the match");
    return (absorb(m, ph) && absorb(m, pl)) ||
           gf_match_fail(m, R_CAT, "too many nodes absorbed");
}

static bool rope_check(struct gf_match *m)
{
    const struct gf_value *x = gf_match_cap(m, RX);
    int rank = gf_pat_rank(x);
    char sx[128] = "?";
    if (!gf_pat_float(x) || rank < 1)
        return gf_match_fail(m, R_XCOS, "x is not a floating-point tensor of known rank");
    gf_type_format(&x->type, sx, sizeof(sx));
    int64_t d = x->type.dims[rank - 1].value;
    if (d <= 0 || d % 2)
        return gf_match_fail(m, R_XCOS, "x %s: the last dim is not a known even size", sx);
    int64_t axis = gf_node_attr_int(gf_match_node(m, R_CAT), "axis", 0);
    if (axis != -1 && axis != rank - 1)
        return gf_match_fail(m, R_CAT, "Concat on axis %lld, not the last axis of x %s",
                             (long long)axis, sx);
    if (!fits_x(gf_match_cap(m, RCOS), x) || !fits_x(gf_match_cap(m, RSIN), x))
        return gf_match_fail(m, R_ROOT, "cos or sin does not broadcast to x %s without "
                             "enlarging it (or differs in dtype)", sx);
    if (!gf_pat_same_type(gf_match_node(m, R_ROOT)->outputs[0], x))
        return gf_match_fail(m, R_ROOT, "the sum is not of x's shape %s", sx);
    return rope_halves(m, x, rank, d);
}

static enum gf_status rope_rewrite(struct gf_match *m, struct gf_fused *f)
{
    f->op = GF_OP_ROPE;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, RX));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, RCOS));
    return st == GF_OK ? gf_fused_input(f, gf_match_cap(m, RSIN)) : st;
}

/* ---- the table ------------------------------------------------------------------- */

const struct gf_pattern gf_patterns_rope[] = {
    GF_PATTERN("rope", "x*cos+rotate_half(x)*sin", rope_nodes, rope_caps, rope_check,
               rope_rewrite),
};
const size_t gf_patterns_rope_count = sizeof(gf_patterns_rope) / sizeof(gf_patterns_rope[0]);
