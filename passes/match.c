/* The fusion engine: matches pattern tables (pattern.h) against the graph
 * with backtracking, and applies the rewrites to a fixpoint. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pattern.h"

/* Where the deepest failed attempt stopped (for --explain). */
struct gf_match_why {
    int depth; /* bindings made when it failed; -1: nothing recorded */
    char msg[512];
};

/* ---- labels for messages ------------------------------------------------- */

static const char *node_label(const struct gf_node *n, char *buf, size_t len)
{
    if (n->name && *n->name)
        snprintf(buf, len, "node '%.80s' (%.40s)", n->name, n->op_type);
    else
        snprintf(buf, len, "node #%d (%.40s)", n->id, n->op_type);
    return buf;
}

static const char *pnode_op_name(const struct gf_pnode *pn)
{
    if (pn->op == GF_PAT_ALT)
        return "a choice";
    if (pn->op == GF_OP_UNKNOWN)
        return pn->op_name ? pn->op_name : "?";
    return gf_op_get_info(pn->op)->name;
}

/* ---- the match accessors ------------------------------------------------- */

struct gf_node *gf_match_node(const struct gf_match *m, int pn)
{
    return pn >= 0 && pn < m->pat->n_nodes ? m->node[pn] : NULL;
}

struct gf_value *gf_match_cap(const struct gf_match *m, int k)
{
    return k >= 0 && k < m->pat->n_caps ? m->cap[k] : NULL;
}

struct gf_value *gf_match_cap_named(const struct gf_match *m, const char *name)
{
    for (int k = 0; k < m->pat->n_caps; k++)
        if (m->pat->caps[k].name && strcmp(m->pat->caps[k].name, name) == 0)
            return m->cap[k];
    return NULL;
}

const struct gf_tensor *gf_match_const(const struct gf_match *m, int k)
{
    return gf_value_constant(gf_match_cap(m, k));
}

static int match_depth(const struct gf_match *m)
{
    int d = m->n_cast;
    for (int i = 0; i < m->pat->n_nodes; i++)
        d += m->val[i] != NULL;
    for (int k = 0; k < m->pat->n_caps; k++)
        d += (m->cap_bound >> k) & 1;
    return d;
}

/* Records a failure at pattern node pn (with `bonus` added to the depth,
 * so failures of complete matches outrank partial ones). */
static bool vfail(struct gf_match *m, int pn, int bonus, const char *fmt, va_list ap)
{
    struct gf_match_why *w = m->why;
    if (!w)
        return false;
    int d = match_depth(m) + bonus;
    if (d <= w->depth)
        return false;
    w->depth = d;
    char lab[200] = "";
    size_t k = 0;
    if (pn >= 0 && pn < m->pat->n_nodes) {
        const struct gf_pnode *p = &m->pat->nodes[pn];
        k = (size_t)snprintf(w->msg, sizeof(w->msg), "pattern node '%s' (%s)%s%s: ", p->label,
                             pnode_op_name(p), m->node[pn] ? " = " : "",
                             m->node[pn] ? node_label(m->node[pn], lab, sizeof(lab)) : "");
        if (k >= sizeof(w->msg))
            k = sizeof(w->msg) - 1;
    }
    vsnprintf(w->msg + k, sizeof(w->msg) - k, fmt, ap);
    return false;
}

bool gf_match_fail(struct gf_match *m, int pn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(m, pn, 1, fmt, ap);
    va_end(ap);
    return false;
}

static bool fail(struct gf_match *m, int pn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool fail(struct gf_match *m, int pn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(m, pn, 0, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- helpers for checks ---------------------------------------------------- */

bool gf_pat_float(const struct gf_value *v)
{
    if (!v || v->type.kind != GF_TYPE_TENSOR)
        return false;
    enum gf_dtype t = v->type.dtype;
    return t == GF_FLOAT || t == GF_DOUBLE || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

int gf_pat_rank(const struct gf_value *v)
{
    return v && v->type.kind == GF_TYPE_TENSOR ? v->type.rank : -1;
}

static bool dim_equal(const struct gf_dim *a, const struct gf_dim *b)
{
    if (a->value >= 0 || b->value >= 0)
        return a->value == b->value;
    return a->param && b->param && strcmp(a->param, b->param) == 0;
}

bool gf_pat_same_type(const struct gf_value *a, const struct gf_value *b)
{
    if (!a || !b || a->type.kind != GF_TYPE_TENSOR || b->type.kind != GF_TYPE_TENSOR)
        return false;
    if (a->type.dtype != b->type.dtype || a->type.rank < 0 || a->type.rank != b->type.rank)
        return false;
    for (int i = 0; i < a->type.rank; i++)
        if (!dim_equal(&a->type.dims[i], &b->type.dims[i]))
            return false;
    return true;
}

bool gf_pat_scalar(const struct gf_tensor *t, double *out)
{
    if (!t || t->nelem != 1 || !t->data)
        return false;
    switch (t->dtype) {
    case GF_FLOAT: case GF_DOUBLE: case GF_FLOAT16: case GF_BFLOAT16:
    case GF_INT8: case GF_INT16: case GF_INT32: case GF_INT64:
    case GF_UINT8: case GF_UINT16: case GF_UINT32: case GF_UINT64:
        *out = gf_tensor_get_f64(t, 0);
        return true;
    default:
        return false;
    }
}

bool gf_pat_reduce_axes(const struct gf_node *n, int rank, int64_t *axes, size_t cap,
                        size_t *n_axes)
{
    if (gf_node_attr_int(n, "keepdims", 1) != 1)
        return false;
    size_t cnt = 0;
    const int64_t *a = gf_node_attr_ints(n, "axes", &cnt);
    const struct gf_tensor *t = NULL;
    if (!a && n->n_inputs > 1 && n->inputs[1]) {
        t = gf_value_constant(n->inputs[1]);
        if (!t || (t->dtype != GF_INT64 && t->dtype != GF_INT32) || t->rank > 1)
            return false;
        cnt = t->nelem;
    }
    if (cnt == 0) {
        /* no axes: all of them, unless noop_with_empty_axes makes it a copy */
        if (gf_node_attr_int(n, "noop_with_empty_axes", 0) || rank < 0 || (size_t)rank > cap)
            return false;
        for (int i = 0; i < rank; i++)
            axes[i] = i;
        *n_axes = (size_t)rank;
        return true;
    }
    if (cnt > cap)
        return false;
    for (size_t i = 0; i < cnt; i++) {
        int64_t x = a ? a[i] : gf_tensor_get_i64(t, i);
        if (rank >= 0) {
            if (x < -rank || x >= rank)
                return false;
            x = x < 0 ? x + rank : x;
        } else if (x >= 0) {
            return false; /* positive axis of an unknown rank */
        }
        axes[i] = x;
    }
    *n_axes = cnt;
    return true;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

bool gf_pat_trailing_axes(const int64_t *axes, size_t n, int rank, int64_t *axis)
{
    int64_t s[64];
    if (n == 0 || n > 64)
        return false;
    memcpy(s, axes, n * sizeof(*s));
    qsort(s, n, sizeof(*s), cmp_i64);
    /* sorted, distinct and ending at the last axis (rank-1, or -1) */
    int64_t last = rank >= 0 ? rank - 1 : -1;
    for (size_t i = 0; i < n; i++)
        if (s[i] != last - (int64_t)(n - 1 - i))
            return false;
    *axis = -(int64_t)n;
    return true;
}

bool gf_pat_fits_trailing(const struct gf_value *w, const struct gf_value *x, int k)
{
    if (!w || !x || w->type.kind != GF_TYPE_TENSOR || x->type.kind != GF_TYPE_TENSOR)
        return false;
    int rw = w->type.rank, rx = x->type.rank;
    if (w->type.dtype != x->type.dtype || rw < 0 || k < 0 || rw > k)
        return false;
    if (rx >= 0 && k > rx)
        return false;
    for (int i = 0; i < rw; i++) {
        const struct gf_dim *dw = &w->type.dims[rw - 1 - i];
        if (dw->value == 1)
            continue;
        if (rx < 0 || !dim_equal(dw, &x->type.dims[rx - 1 - i]))
            return false;
    }
    return true;
}

int gf_pat_norm_axes(const struct gf_node *norm)
{
    int64_t axis = gf_node_attr_int(norm, "axis", -1);
    if (axis < 0)
        return (int)-axis;
    int r = norm->n_inputs ? gf_pat_rank(norm->inputs[0]) : -1;
    return r >= 0 && axis <= r ? r - (int)axis : -1;
}

bool gf_pat_stats_shape(const struct gf_value *v, const struct gf_value *x, int64_t axis)
{
    int r = gf_pat_rank(x);
    if (r < 0 || gf_pat_rank(v) != r || axis < -r || axis > r)
        return false;
    axis = axis < 0 ? axis + r : axis;
    for (int i = 0; i < r; i++) {
        const struct gf_dim *d = &v->type.dims[i];
        if (i >= axis ? d->value != 1 : !dim_equal(d, &x->type.dims[i]))
            return false;
    }
    return true;
}

/* ---- describing the fused node ------------------------------------------------ */

enum gf_status gf_fused_input(struct gf_fused *f, struct gf_value *v)
{
    if (f->n_in == GF_FUSED_MAX_IO)
        return gf_error(GF_ERR_INTERNAL, "fused node: too many inputs");
    f->in[f->n_in++] = v;
    return GF_OK;
}

enum gf_status gf_fused_output(struct gf_fused *f, struct gf_value *v)
{
    if (f->n_out == GF_FUSED_MAX_IO)
        return gf_error(GF_ERR_INTERNAL, "fused node: too many outputs");
    f->out[f->n_out++] = v;
    return GF_OK;
}

static struct gf_fused_attr *fused_attr(struct gf_fused *f, const char *name)
{
    for (size_t i = 0; i < f->n_attrs; i++)
        if (strcmp(f->attrs[i].name, name) == 0)
            return &f->attrs[i];
    if (f->n_attrs == GF_FUSED_MAX_ATTRS)
        return NULL;
    struct gf_fused_attr *a = &f->attrs[f->n_attrs++];
    memset(a, 0, sizeof(*a));
    a->name = name;
    return a;
}

enum gf_status gf_fused_attr_int(struct gf_fused *f, const char *name, int64_t v)
{
    struct gf_fused_attr *a = fused_attr(f, name);
    if (!a)
        return gf_error(GF_ERR_INTERNAL, "fused node: too many attributes");
    a->type = GF_ATTR_INT;
    a->i = v;
    return GF_OK;
}

enum gf_status gf_fused_attr_float(struct gf_fused *f, const char *name, float v)
{
    struct gf_fused_attr *a = fused_attr(f, name);
    if (!a)
        return gf_error(GF_ERR_INTERNAL, "fused node: too many attributes");
    a->type = GF_ATTR_FLOAT;
    a->f = v;
    return GF_OK;
}

enum gf_status gf_fused_attr_string(struct gf_fused *f, const char *name, const char *v)
{
    struct gf_fused_attr *a = fused_attr(f, name);
    if (!a)
        return gf_error(GF_ERR_INTERNAL, "fused node: too many attributes");
    a->type = GF_ATTR_STRING;
    a->s = v;
    return GF_OK;
}

enum gf_status gf_fused_copy_attrs(struct gf_fused *f, const struct gf_node *n)
{
    enum gf_status st = GF_OK;
    for (size_t i = 0; st == GF_OK && i < n->n_attrs; i++) {
        const struct gf_attr *a = &n->attrs[i];
        if (a->type == GF_ATTR_INT)
            st = gf_fused_attr_int(f, a->name, a->i);
        else if (a->type == GF_ATTR_FLOAT)
            st = gf_fused_attr_float(f, a->name, a->f);
        else if (a->type == GF_ATTR_STRING)
            st = gf_fused_attr_string(f, a->name, (const char *)a->s.data);
    }
    return st;
}

/* ---- matching: backtracking over an immutable goal list ------------------------- */

/* One thing left to match: value v against reference `ref` (pattern.h),
 * reached as input `at` of pattern node `from`.  Goals are linked and
 * never modified, so a failed branch leaves its caller's list intact. */
struct goal {
    int8_t ref;
    bool cast_ok;
    int8_t from, at;
    struct gf_value *v;
    const struct goal *next;
};

struct solver {
    const struct gf_pattern *p;
    struct gf_match *m;
};

static bool solve(struct solver *s, const struct goal *g);

static bool in_match(const struct gf_match *m, const struct gf_node *n)
{
    for (int i = 0; i < m->pat->n_nodes; i++)
        if (m->node[i] == n)
            return true;
    for (int i = 0; i < m->n_cast; i++)
        if (m->cast[i] == n)
            return true;
    return false;
}

/* True when n is bound to a pattern node (not merely a passed-through Cast). */
static bool bound_node(const struct gf_match *m, const struct gf_node *n)
{
    for (int i = 0; i < m->pat->n_nodes; i++)
        if (m->node[i] == n)
            return true;
    return false;
}

/* A Cast that changes nothing: to the dtype its input already has. */
static bool noop_cast(const struct gf_match *m, const struct gf_node *c)
{
    if (!c || c->op != GF_OP_CAST || c->graph != m->graph || c->n_inputs != 1 || !c->inputs[0])
        return false;
    const struct gf_value *x = c->inputs[0];
    return x->type.kind == GF_TYPE_TENSOR && x->type.dtype != GF_UNDEFINED &&
           gf_node_attr_int(c, "to", -1) == (int64_t)x->type.dtype;
}

static const char *where_from(const struct gf_value *v, char *buf, size_t len)
{
    char lab[200];
    if (v->producer)
        snprintf(buf, len, "'%.80s' comes from %.150s", v->name,
                 node_label(v->producer, lab, sizeof(lab)));
    else
        snprintf(buf, len, "'%.80s' is a graph %s", v->name,
                 v->init ? "initializer" : v->is_input ? "input" : "value without producer");
    return buf;
}

/* Relative tolerance for comparing a constant of dtype t with an exact
 * value: the pattern's own rtol, at least the rounding of t. */
static double dtype_tol(enum gf_dtype t, double rtol)
{
    double eps = t == GF_FLOAT16 ? 1e-3 : t == GF_BFLOAT16 ? 8e-3 : t == GF_DOUBLE ? 1e-15 : 2e-7;
    return rtol > eps ? rtol : eps;
}

static bool cap_ok(struct gf_match *m, const struct goal *g, int k, struct gf_value *v)
{
    const struct gf_pcap *c = &m->pat->caps[k];
    if (c->kind == GF_CAP_ANY)
        return true;
    const struct gf_tensor *t = gf_value_constant(v);
    char buf[256];
    if (!t)
        return fail(m, g->from, "input %d: capture '%s' must be a constant, %s", g->at, c->name,
                    where_from(v, buf, sizeof(buf)));
    if (c->kind == GF_CAP_CONST)
        return true;
    double x;
    if (!gf_pat_scalar(t, &x))
        return fail(m, g->from, "input %d: capture '%s' must hold one element, '%s' has %zu",
                    g->at, c->name, v->name, t->nelem);
    double tol = dtype_tol(t->dtype, c->rtol);
    if (!(fabs(x - c->value) <= tol * fabs(c->value)))
        return fail(m, g->from, "input %d: capture '%s' must be %.9g, '%s' is %.9g", g->at,
                    c->name, c->value, v->name, x);
    return true;
}

static bool step_capture(struct solver *s, const struct goal *g)
{
    struct gf_match *m = s->m;
    bool optional = g->ref >= GF_OPT(0);
    int k = optional ? g->ref - GF_OPT(0) : g->ref - GF_C(0);
    bool bound = (m->cap_bound >> k) & 1;
    if (!g->v && !optional)
        return fail(m, g->from, "input %d is omitted (capture '%s')", g->at, m->pat->caps[k].name);
    if (bound) {
        if (m->cap[k] == g->v)
            return solve(s, g->next);
        return fail(m, g->from, "input %d: capture '%s' is '%s' elsewhere, here '%s'", g->at,
                    m->pat->caps[k].name, m->cap[k] ? m->cap[k]->name : "(omitted)",
                    g->v ? g->v->name : "(omitted)");
    }
    if (g->v && !cap_ok(m, g, k, g->v))
        return false;
    m->cap[k] = g->v;
    m->cap_bound |= 1u << k;
    if (solve(s, g->next))
        return true;
    m->cap[k] = NULL;
    m->cap_bound &= ~(1u << k);
    return false;
}

static bool step_alt(struct solver *s, const struct goal *g, int i)
{
    const struct gf_pnode *pn = &s->p->nodes[i];
    struct gf_match saved = *s->m;
    for (int a = 0; a < GF_PAT_MAX_IN && pn->in[a]; a++) {
        s->m->val[i] = g->v;
        struct goal alt = {pn->in[a], false, (int8_t)i, (int8_t)a, g->v, g->next};
        if (solve(s, &alt))
            return true;
        *s->m = saved;
    }
    return false;
}

static bool op_matches(const struct gf_pnode *pn, const struct gf_node *n)
{
    if (pn->op != GF_OP_UNKNOWN)
        return n->op == pn->op;
    return n->op == GF_OP_UNKNOWN && pn->op_name && strcmp(n->op_type, pn->op_name) == 0;
}

/* "Div, Reciprocal or Pow": the ops a choice node accepts. */
static const char *choice_ops(const struct gf_pattern *pat, const struct gf_pnode *alt,
                              char *buf, size_t len)
{
    size_t k = 0;
    int n = 0;
    while (n < GF_PAT_MAX_IN && alt->in[n])
        n++;
    buf[0] = 0;
    for (int a = 0; a < n && k < len; a++) {
        int8_t r = alt->in[a];
        const char *what = r >= GF_C(0) ? "a captured value"
                         : r > 0        ? pnode_op_name(&pat->nodes[r - 1]) : "?";
        int w = snprintf(buf + k, len - k, "%s%s", a == 0 ? "" : a == n - 1 ? " or " : ", ",
                         what);
        k += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

/* Checks that graph node p (producing g->v) can be pattern node i. */
static bool node_fits(struct gf_match *m, const struct goal *g, int i, const struct gf_node *p)
{
    const struct gf_pnode *pn = &m->pat->nodes[i];
    char buf[256], ops[160];
    if ((!p || p->graph != m->graph || !op_matches(pn, p)) && g->from >= 0 &&
        m->pat->nodes[g->from].op == GF_PAT_ALT)
        return fail(m, g->from, "%s, not %s", where_from(g->v, buf, sizeof(buf)),
                    choice_ops(m->pat, &m->pat->nodes[g->from], ops, sizeof(ops)));
    if (!p || p->graph != m->graph || !op_matches(pn, p))
        return fail(m, g->from, "input %d: '%s' wants %s, %s", g->at, pn->label,
                    pnode_op_name(pn), where_from(g->v, buf, sizeof(buf)));
    if (g->v->producer_slot != pn->slot)
        return fail(m, i, "'%s' is output %d of the node, the pattern reads output %d",
                    g->v->name, g->v->producer_slot, pn->slot);
    if (in_match(m, p))
        return fail(m, i, "the node is already part of the match");
    int k = 0;
    while (k < GF_PAT_MAX_IN && pn->in[k])
        k++;
    for (size_t j = (size_t)k; j < p->n_inputs; j++)
        if (p->inputs[j])
            return fail(m, i, "has %zu inputs, the pattern expects %d", p->n_inputs, k);
    if ((pn->flags & GF_PF_ONE_USE) && gf_value_use_count(g->v) != 1)
        return fail(m, i, "'%s' has %zu users, the pattern wants exactly one", g->v->name,
                    gf_value_use_count(g->v));
    return true;
}

static bool step_node(struct solver *s, const struct goal *g, int i)
{
    struct gf_match *m = s->m;
    const struct gf_pnode *pn = &s->p->nodes[i];
    if (!g->v)
        return fail(m, g->from, "input %d is omitted, '%s' wants %s", g->at, pn->label,
                    pnode_op_name(pn));
    if (m->val[i])
        return m->val[i] == g->v
                   ? solve(s, g->next)
                   : fail(m, i, "reached again through '%s', which is not '%s'", g->v->name,
                          m->val[i]->name);
    if (pn->op == GF_PAT_ALT)
        return step_alt(s, g, i);
    struct gf_node *p = g->v->producer;
    if (!node_fits(m, g, i, p))
        return false;
    struct gf_match saved = *m;
    m->node[i] = p;
    m->val[i] = g->v;
    int k = 0;
    while (k < GF_PAT_MAX_IN && pn->in[k])
        k++;
    int orders = (pn->flags & GF_PF_COMMUTE) && k == 2 ? 2 : 1;
    for (int o = 0; o < orders; o++) {
        struct goal in[GF_PAT_MAX_IN];
        for (int j = k - 1; j >= 0; j--) {
            size_t slot = (size_t)(o ? 1 - j : j);
            in[j] = (struct goal){pn->in[j], (pn->cast >> j) & 1, (int8_t)i, (int8_t)slot,
                                  slot < p->n_inputs ? p->inputs[slot] : NULL,
                                  j + 1 < k ? &in[j + 1] : g->next};
        }
        if (solve(s, k ? &in[0] : g->next))
            return true;
        *m = saved;
        m->node[i] = p;
        m->val[i] = g->v;
    }
    *m = saved;
    return false;
}

static bool step(struct solver *s, const struct goal *g)
{
    if (g->ref == GF_ANY)
        return solve(s, g->next);
    if (g->ref == GF_NONE)
        return g->v ? fail(s->m, g->from, "input %d must be omitted, it is '%s'", g->at,
                           g->v->name)
                    : solve(s, g->next);
    if (g->ref >= GF_C(0))
        return step_capture(s, g);
    return step_node(s, g, g->ref - 1);
}

/* Pointer set (open addressing) for graph walks. */
struct ptrset {
    const void **slot;
    size_t cap, n;
};

static size_t ptr_hash(const void *p, size_t mask)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & mask;
}

/* Adds p; returns 1 if added, 0 if present, -1 when out of memory. */
static int ptrset_add(struct ptrset *s, const void *p)
{
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        const void **slot = calloc(cap, sizeof(*slot));
        if (!slot)
            return -1;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slot[i])
                continue;
            size_t j = ptr_hash(s->slot[i], cap - 1);
            while (slot[j])
                j = (j + 1) & (cap - 1);
            slot[j] = s->slot[i];
        }
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    size_t j = ptr_hash(p, s->cap - 1);
    for (; s->slot[j]; j = (j + 1) & (s->cap - 1))
        if (s->slot[j] == p)
            return 0;
    s->slot[j] = p;
    s->n++;
    return 1;
}

/* True when some captured value is computed (through nodes outside the
 * match) from a value the match computes: the fused node would then need
 * its own output as an input.  Iterative walk back from the captures;
 * out of memory counts as "yes" (refusing is always safe). */
static bool captures_depend_on_match(const struct gf_match *m)
{
    struct ptrset seen = {0};
    size_t sp = 0, cap = 64;
    struct gf_node **stack = malloc(cap * sizeof(*stack));
    bool found = !stack;
    for (int k = 0; !found && k < m->pat->n_caps; k++)
        if (m->cap[k] && m->cap[k]->producer && !in_match(m, m->cap[k]->producer))
            stack[sp++] = m->cap[k]->producer;
    while (!found && sp) {
        struct gf_node *n = stack[--sp];
        int added = ptrset_add(&seen, n);
        if (added <= 0) {
            found = added < 0;
            continue;
        }
        for (size_t i = 0; !found && i < n->n_inputs; i++) {
            struct gf_node *p = n->inputs[i] ? n->inputs[i]->producer : NULL;
            if (!p || p->graph != m->graph)
                continue;
            if (in_match(m, p)) {
                found = true;
            } else {
                if (sp == cap) {
                    struct gf_node **ns = realloc(stack, 2 * cap * sizeof(*ns));
                    if (!ns) {
                        found = true;
                        break;
                    }
                    stack = ns;
                    cap *= 2;
                }
                stack[sp++] = p;
            }
        }
    }
    free(stack);
    free(seen.slot);
    return found;
}

/* Values the match computes stay inside it, except the root's output 0
 * and outputs the pattern lets escape.  Sets *escapes when an escaping
 * value other than the root's output is read outside the match. */
static bool check_escapes(struct gf_match *m, bool *escapes)
{
    int root = m->pat->n_nodes - 1;
    char lab[200];
    for (int i = 0; i < m->pat->n_nodes + m->n_cast; i++) {
        bool is_cast = i >= m->pat->n_nodes;
        struct gf_node *n = is_cast ? m->cast[i - m->pat->n_nodes] : m->node[i];
        if (!n)
            continue;
        unsigned allow = is_cast ? 0 : m->pat->nodes[i].escape | (i == root ? 1u : 0u);
        int pn = is_cast ? -1 : i;
        for (size_t s = 0; s < n->n_outputs; s++) {
            struct gf_value *o = n->outputs[s];
            if (!o)
                continue;
            bool outside = o->is_output;
            for (size_t u = 0; !outside && u < o->n_uses; u++)
                outside = o->uses[u].slot < 0 || !in_match(m, o->uses[u].node);
            if (!outside)
                continue;
            if ((allow >> s) & 1) {
                if (!(i == root && s == 0))
                    *escapes = true;
                continue;
            }
            if (o->is_output)
                return fail(m, pn, "'%s' is a graph output, the fused node would hide it%s",
                            o->name, is_cast ? " (a Cast in the match)" : "");
            for (size_t u = 0; u < o->n_uses; u++)
                if (o->uses[u].slot < 0 || !in_match(m, o->uses[u].node))
                    return fail(m, pn, "'%s' is also read by %s, outside the match%s", o->name,
                                node_label(o->uses[u].node, lab, sizeof(lab)),
                                is_cast ? " (a Cast in the match)" : "");
        }
    }
    return true;
}

static bool finish(struct solver *s);

bool gf_match_read_outside(const struct gf_match *m, const struct gf_value *v)
{
    if (!v || v->is_output)
        return v != NULL;
    for (size_t u = 0; u < v->n_uses; u++)
        if (v->uses[u].slot < 0 || !in_match(m, v->uses[u].node))
            return true;
    return false;
}

/* The value a tail reads first: that of the first pattern node in its
 * inputs (NULL when that node is unbound). */
static struct gf_value *tail_anchor(const struct gf_match *m, int t)
{
    const struct gf_pnode *pn = &m->pat->nodes[t];
    for (int k = 0; k < GF_PAT_MAX_IN && pn->in[k]; k++)
        if (pn->in[k] > 0 && pn->in[k] < GF_C(0))
            return m->val[pn->in[k] - 1];
    return NULL;
}

/* Binds tail t to a reader of its anchor value, or leaves it unbound. */
static bool solve_tail(struct solver *s, int t)
{
    struct gf_match *m = s->m;
    const struct gf_pnode *pn = &m->pat->nodes[t];
    struct gf_value *v = tail_anchor(m, t);
    m->tails_done |= 1ull << t;
    struct gf_match saved = *m;
    for (size_t u = 0; v && u < v->n_uses; u++) {
        struct gf_node *r = v->uses[u].node;
        if (v->uses[u].slot < 0 || !r || in_match(m, r) || pn->slot >= r->n_outputs ||
            !r->outputs[pn->slot] || !op_matches(pn, r))
            continue;
        struct goal g = {GF_N(t), false, -1, 0, r->outputs[pn->slot], NULL};
        if (step_node(s, &g, t))
            return true;
        *m = saved;
    }
    return finish(s);
}

static bool finish(struct solver *s)
{
    struct gf_match *m = s->m;
    bool escapes = false;
    for (int t = 0; t < m->pat->n_nodes; t++)
        if ((m->pat->nodes[t].flags & GF_PF_TAIL) && !((m->tails_done >> t) & 1))
            return solve_tail(s, t);
    int root = m->pat->n_nodes - 1;
    if (!check_escapes(m, &escapes))
        return false;
    for (int k = 0; k < m->pat->n_caps; k++)
        if (m->cap[k] && m->cap[k]->producer && in_match(m, m->cap[k]->producer))
            return fail(m, root, "capture '%s' ('%s') is computed inside the match",
                        m->pat->caps[k].name, m->cap[k]->name);
    if (escapes && captures_depend_on_match(m))
        return fail(m, root, "an input of the fused node depends on one of its outputs");
    return !s->p->check || s->p->check(m);
}

static bool solve(struct solver *s, const struct goal *g)
{
    if (!g)
        return finish(s);
    struct gf_node *c = g->v ? g->v->producer : NULL;
    if (g->cast_ok && noop_cast(s->m, c) && !bound_node(s->m, c)) {
        /* first through the Cast (it joins the match), then without it */
        struct gf_match saved = *s->m;
        bool known = false;
        for (int i = 0; i < s->m->n_cast; i++)
            known |= s->m->cast[i] == c;
        if (known || s->m->n_cast < GF_PAT_MAX_CASTS) {
            if (!known)
                s->m->cast[s->m->n_cast++] = c;
            struct goal through = *g;
            through.v = c->inputs[0];
            if (solve(s, &through))
                return true;
            *s->m = saved;
        }
    }
    return step(s, g);
}

static bool try_match(const struct gf_pattern *p, struct gf_node *root, struct gf_match *m,
                      struct gf_match_why *why)
{
    memset(m, 0, sizeof(*m));
    m->pat = p;
    m->graph = root->graph;
    m->why = why;
    int r = p->n_nodes - 1;
    if (r < 0 || p->n_nodes > GF_PAT_MAX_NODES || p->n_caps > GF_PAT_MAX_CAPS)
        return false;
    uint8_t slot = p->nodes[r].slot;
    if (slot >= root->n_outputs || !root->outputs[slot])
        return fail(m, r, "the node has no output %d", slot);
    struct solver s = {p, m};
    struct goal g = {GF_N(r), false, -1, 0, root->outputs[slot], NULL};
    bool ok = solve(&s, &g);
    m->why = NULL;
    return ok;
}

bool gf_pattern_match(const struct gf_pattern *p, struct gf_node *root, struct gf_match *m,
                      char *why, size_t why_len)
{
    struct gf_match_why w = {.depth = -1};
    bool ok = try_match(p, root, m, why ? &w : NULL);
    if (why && why_len)
        snprintf(why, why_len, "%s", ok ? "" : w.depth < 0 ? "no match" : w.msg);
    return ok;
}

/* ---- applying a rewrite ----------------------------------------------------------- */

/* Nodes of a match, each once, in graph order. */
struct matched {
    struct gf_node *n[GF_PAT_MAX_NODES + GF_PAT_MAX_CASTS];
    size_t count;
};

static void collect_matched(const struct gf_match *m, struct matched *out)
{
    struct gf_node *root = m->node[m->pat->n_nodes - 1];
    size_t want = 0;
    for (int i = 0; i < m->pat->n_nodes; i++)
        want += m->node[i] != NULL;
    want += (size_t)m->n_cast;
    /* every matched node but the tails is an ancestor of the root: walk
     * back from it, then on for the tails that come after it */
    out->count = 0;
    for (struct gf_node *n = root; n && out->count < want; n = n->prev)
        if (in_match(m, n))
            out->n[out->count++] = n;
    for (size_t i = 0; i < out->count / 2; i++) {
        struct gf_node *t = out->n[i];
        out->n[i] = out->n[out->count - 1 - i];
        out->n[out->count - 1 - i] = t;
    }
    for (struct gf_node *n = root->next; n && out->count < want; n = n->next)
        if (in_match(m, n))
            out->n[out->count++] = n;
}

static bool has_tail(const struct gf_match *m)
{
    for (int i = 0; i < m->pat->n_nodes; i++)
        if ((m->pat->nodes[i].flags & GF_PF_TAIL) && m->node[i])
            return true;
    return false;
}

static bool listed(struct gf_value *const *vals, size_t n, const struct gf_value *v)
{
    for (size_t i = 0; i < n; i++)
        if (vals[i] == v)
            return true;
    return false;
}

/* The rewrite must describe a node that can replace the match: outputs
 * computed by the match, every value read from outside an input or a
 * constant, every value read outside the match an output. */
static enum gf_status check_fused(const struct gf_pattern *p, const struct matched *mt,
                                  const struct gf_fused *f)
{
    const struct gf_op_info *info = gf_op_get_info(f->op);
    if (f->op == GF_OP_UNKNOWN || strcmp(info->domain, "graphfuse") != 0)
        return gf_error(GF_ERR_INTERNAL, "pattern '%s' (%s): rewrite made no graphfuse op",
                        p->name, p->form);
    for (size_t i = 0; i < f->n_out; i++) {
        bool ok = i > 0 && !f->out[i]; /* an omitted optional output */
        for (size_t k = 0; !ok && k < mt->count; k++)
            ok = f->out[i] && listed(mt->n[k]->outputs, mt->n[k]->n_outputs, f->out[i]);
        if (!ok)
            return gf_error(GF_ERR_INTERNAL, "pattern '%s' (%s): fused output %zu is not "
                            "computed by the match", p->name, p->form, i);
    }
    for (size_t k = 0; k < mt->count; k++) {
        const struct gf_node *n = mt->n[k];
        for (size_t i = 0; i < n->n_inputs; i++) {
            struct gf_value *v = n->inputs[i];
            bool inside = false;
            for (size_t j = 0; v && !inside && j < mt->count; j++)
                inside = v->producer == mt->n[j];
            if (v && !inside && !listed(f->in, f->n_in, v) && !gf_value_constant(v))
                return gf_error(GF_ERR_INTERNAL, "pattern '%s' (%s): the match reads '%s', "
                                "which is neither a fused input nor a constant", p->name,
                                p->form, v->name);
        }
        for (size_t s = 0; s < n->n_outputs; s++) {
            struct gf_value *o = n->outputs[s];
            if (!o || listed(f->out, f->n_out, o))
                continue;
            bool outside = o->is_output;
            for (size_t u = 0; u < o->n_uses; u++) {
                bool in = false;
                for (size_t j = 0; j < mt->count; j++)
                    in |= o->uses[u].node == mt->n[j];
                outside |= !in;
            }
            if (outside)
                return gf_error(GF_ERR_INTERNAL, "pattern '%s' (%s): '%s' is read outside the "
                                "match but is not a fused output", p->name, p->form, o->name);
        }
    }
    return GF_OK;
}

static bool node_name_taken(const struct gf_graph *g, const char *name)
{
    for (const struct gf_node *n = g->first; n; n = n->next)
        if (n->name && strcmp(n->name, name) == 0)
            return true;
    return false;
}

/* Name of the fused node: the folder the matched nodes share (exporters
 * name nodes "/layers.0/input_layernorm/Pow") followed by the op, made
 * unique: "/layers.0/input_layernorm/RMSNorm". */
static void fused_name(const struct gf_graph *g, const struct matched *mt, const char *op,
                       char *buf, size_t len)
{
    size_t pre = 0;
    const char *first = mt->n[0]->name ? mt->n[0]->name : "";
    if (first[0] == '/') {
        pre = strlen(first);
        for (size_t k = 1; k < mt->count; k++) {
            const char *s = mt->n[k]->name ? mt->n[k]->name : "";
            size_t j = 0;
            while (j < pre && s[j] && s[j] == first[j])
                j++;
            pre = j;
        }
        while (pre > 0 && first[pre - 1] != '/')
            pre--;
    }
    if (pre > 200)
        pre = 200;
    snprintf(buf, len, "%.*s%s", (int)pre, first, op);
    size_t base = strlen(buf);
    for (unsigned k = 1; node_name_taken(g, buf) && k < 100000; k++)
        snprintf(buf + base, len - base, "_%u", k);
}

static enum gf_status set_attrs(struct gf_node *n, const struct gf_fused *f)
{
    enum gf_status st = GF_OK;
    for (size_t i = 0; st == GF_OK && i < f->n_attrs; i++) {
        const struct gf_fused_attr *a = &f->attrs[i];
        if (a->type == GF_ATTR_INT)
            st = gf_node_set_attr_int(n, a->name, a->i);
        else if (a->type == GF_ATTR_FLOAT)
            st = gf_node_set_attr_float(n, a->name, a->f);
        else
            st = gf_node_set_attr_string(n, a->name, a->s ? a->s : "");
    }
    return st;
}

/* True when an output other than the root's is read by some node: the
 * fused node may then sit after one of its readers and the graph needs
 * sorting again. */
static bool extra_outputs_used(const struct gf_fused *f, const struct gf_node *root)
{
    for (size_t i = 0; i < f->n_out; i++)
        if (f->out[i] && f->out[i] != root->outputs[0] && f->out[i]->n_uses)
            return true;
    return false;
}

static enum gf_status apply(struct gf_graph *g, const struct gf_engine *e, size_t pi,
                            struct gf_match *m, struct gf_node **out)
{
    const struct gf_pattern *p = e->patterns[pi];
    struct gf_node *root = m->node[p->n_nodes - 1];
    struct gf_fused f = {.op = GF_OP_UNKNOWN, .n_out = 1, .out = {root->outputs[0]}};
    struct matched mt;
    enum gf_status st = p->rewrite(m, &f);
    if (st != GF_OK)
        return st;
    while (f.n_in > 0 && !f.in[f.n_in - 1])
        f.n_in--; /* omitted trailing optional inputs are simply absent */
    while (f.n_out > 1 && !f.out[f.n_out - 1])
        f.n_out--; /* and so are omitted trailing outputs */
    collect_matched(m, &mt);
    if ((st = check_fused(p, &mt, &f)) != GF_OK)
        return st;
    const char *op = gf_op_get_info(f.op)->name;
    char name[300];
    /* a tail's inputs may come after the root: sort again then */
    bool resort = extra_outputs_used(&f, root) || has_tail(m);
    struct gf_node *anchor = root->next;
    while (anchor && in_match(m, anchor))
        anchor = anchor->next; /* a tail right after the root goes too */
    for (size_t k = 0; k < mt.count; k++)
        gf_graph_remove_node(g, mt.n[k]);
    fused_name(g, &mt, op, name, sizeof(name)); /* the removed nodes' names are free */
    struct gf_node *n = gf_graph_add_node(g, op, "graphfuse", name, f.n_in, f.in, f.n_out,
                                          f.out);
    char why[300];
    if (!n) {
        snprintf(why, sizeof(why), "%s", gf_last_error());
        return gf_error(GF_ERR_INTERNAL, "pattern '%s' (%s): cannot add %s: %s", p->name,
                        p->form, op, why);
    }
    gf_node_move_before(n, anchor);
    if ((st = set_attrs(n, &f)) != GF_OK)
        return st;
    if (resort && gf_graph_toposort(g) != GF_OK) {
        snprintf(why, sizeof(why), "%s", gf_last_error());
        return gf_error(GF_ERR_INTERNAL, "pattern '%s' (%s) left the graph unsortable: %s",
                        p->name, p->form, why);
    }
    if (e->on_rewrite)
        e->on_rewrite(e->ctx, n, mt.n, mt.count);
    *out = n;
    return GF_OK;
}

/* ---- the walk ------------------------------------------------------------------------ */

/* Patterns by root op: idx[start[op] .. start[op + 1]) in priority order;
 * roots outside ops.def (matched by name) go under GF_OP_UNKNOWN. */
struct root_index {
    size_t start[GF_OP_COUNT + 2];
    size_t *idx;
};

static enum gf_status index_roots(const struct gf_engine *e, struct root_index *ri)
{
    memset(ri->start, 0, sizeof(ri->start));
    ri->idx = malloc((e->n_patterns + 1) * sizeof(*ri->idx));
    if (!ri->idx)
        return gf_error(GF_ERR_NOMEM, "out of memory indexing patterns");
    for (size_t i = 0; i < e->n_patterns; i++) {
        const struct gf_pattern *p = e->patterns[i];
        if (p->n_nodes < 1 || p->n_nodes > GF_PAT_MAX_NODES || p->n_caps > GF_PAT_MAX_CAPS ||
            p->nodes[p->n_nodes - 1].op >= GF_OP_COUNT || !p->rewrite) {
            free(ri->idx);
            return gf_error(GF_ERR_INTERNAL, "pattern '%s' (%s) is malformed", p->name,
                            p->form);
        }
        ri->start[p->nodes[p->n_nodes - 1].op + 1]++;
    }
    for (size_t op = 1; op <= GF_OP_COUNT + 1; op++)
        ri->start[op] += ri->start[op - 1];
    size_t fill[GF_OP_COUNT + 1];
    memcpy(fill, ri->start, sizeof(fill));
    for (size_t i = 0; i < e->n_patterns; i++)
        ri->idx[fill[e->patterns[i]->nodes[e->patterns[i]->n_nodes - 1].op]++] = i;
    return GF_OK;
}

static void explain_line(const struct gf_engine *e, const struct gf_node *n, const char *fmt,
                         ...) __attribute__((format(printf, 3, 4)));
static void explain_line(const struct gf_engine *e, const struct gf_node *n, const char *fmt,
                         ...)
{
    char line[900], lab[200];
    int k = snprintf(line, sizeof(line), "%s: %s: ", e->explain,
                     node_label(n, lab, sizeof(lab)));
    va_list ap;
    va_start(ap, fmt);
    if (k > 0 && (size_t)k < sizeof(line))
        vsnprintf(line + k, sizeof(line) - (size_t)k, fmt, ap);
    va_end(ap);
    if (e->on_explain)
        e->on_explain(e->ctx, line);
}

struct attempt {
    struct gf_match_why why; /* deepest failure of the explained pattern */
    const char *why_form;
    bool explained_here;     /* the explained pattern has a form rooted here */
};

/* Tries the patterns rooted at n's op in order; applies the first match.
 * *fused receives the new node, or NULL. */
static enum gf_status try_node(struct gf_graph *g, const struct gf_engine *e,
                               const struct root_index *ri, struct gf_node *n,
                               struct gf_node **fused)
{
    struct attempt at = {.why = {.depth = -1}};
    struct gf_match m;
    *fused = NULL;
    for (size_t k = ri->start[n->op]; k < ri->start[n->op + 1]; k++) {
        const struct gf_pattern *p = e->patterns[ri->idx[k]];
        const struct gf_pnode *rp = &p->nodes[p->n_nodes - 1];
        if (rp->op == GF_OP_UNKNOWN && (!rp->op_name || strcmp(rp->op_name, n->op_type) != 0))
            continue;
        bool explained = e->explain && strcmp(p->name, e->explain) == 0;
        struct gf_match_why w = {.depth = -1};
        at.explained_here |= explained;
        if (!try_match(p, n, &m, explained ? &w : NULL)) {
            if (explained && w.depth > at.why.depth) {
                at.why = w;
                at.why_form = p->form;
            }
            continue;
        }
        enum gf_status st = apply(g, e, ri->idx[k], &m, fused);
        if (st != GF_OK)
            return st;
        e->hits[ri->idx[k]]++;
        if (explained)
            explain_line(e, n, "matched form '%s' -> %s", p->form, (*fused)->op_type);
        else if (e->explain && !at.explained_here) {
            for (size_t j = k + 1; j < ri->start[n->op + 1]; j++)
                if (strcmp(e->patterns[ri->idx[j]]->name, e->explain) == 0) {
                    explain_line(e, n, "taken first by pattern '%s' (form '%s') -> %s",
                                 p->name, p->form, (*fused)->op_type);
                    break;
                }
        }
        return GF_OK;
    }
    if (at.explained_here)
        explain_line(e, n, "no match; closest: form '%s', %s", at.why_form ? at.why_form : "?",
                     at.why.depth < 0 ? "no detail" : at.why.msg);
    return GF_OK;
}

enum gf_status gf_engine_run(struct gf_graph *g, const struct gf_engine *e)
{
    struct root_index ri;
    enum gf_status st = index_roots(e, &ri);
    if (st != GF_OK)
        return st;
    /* Each rewrite removes at least the root; one that only renames an op
     * (LayerNormalization -> LayerNorm) removes nothing, but never twice
     * in a row on the same node, so this bound is generous. */
    size_t budget = 2 * g->n_nodes + 64, done = 0;
    bool changed = true;
    for (int pass = 0; changed && st == GF_OK; pass++) {
        changed = false;
        for (struct gf_node *n = g->first; n && st == GF_OK;) {
            struct gf_node *next = n->next, *fused;
            if ((st = try_node(g, e, &ri, n, &fused)) != GF_OK)
                break;
            if (fused) {
                changed = true;
                next = fused; /* patterns rooted at the fused op get their turn */
                if (++done > budget)
                    st = gf_error(GF_ERR_INTERNAL, "fusion does not converge (%zu rewrites)",
                                  done);
            }
            n = next;
        }
    }
    free(ri.idx);
    return st;
}
