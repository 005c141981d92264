/*
 * The per-op attribute and shape rules that shape inference (shape.c) and
 * every backend's kernels (kernels/checks.c) share: opcheck.h.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h" /* gf_node_label */
#include "opcheck.h"

/* ---- dims and shapes ----------------------------------------------------- */

struct gf_dim gf_dim_of(int64_t v)
{
    return (struct gf_dim){.value = v};
}

struct gf_dim gf_dim_unknown(void)
{
    return (struct gf_dim){.value = -1};
}

bool gf_dim_known(const struct gf_dim *d)
{
    return d->value >= 0;
}

bool gf_dim_unify(const struct gf_dim *a, const struct gf_dim *b, struct gf_dim *out)
{
    if (gf_dim_known(a) && gf_dim_known(b) && a->value != b->value)
        return false;
    if (gf_dim_known(a) || (!gf_dim_known(b) && a->param))
        *out = *a;
    else
        *out = *b;
    return true;
}

const char *gf_dim_str(const struct gf_dim *d, char *buf, size_t len)
{
    if (d->value >= 0)
        snprintf(buf, len, "%lld", (long long)d->value);
    else
        snprintf(buf, len, "%s", d->param ? d->param : "?");
    return buf;
}

const char *gf_shape_str(const struct gf_shape *s, char *buf, size_t len)
{
    char one[64];
    size_t pos = 0;
    if (s->rank < 0) {
        snprintf(buf, len, "[*]");
        return buf;
    }
    pos += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < s->rank && pos < len; i++)
        pos += (size_t)snprintf(buf + pos, len - pos, "%s%s", i ? "," : "",
                                gf_dim_str(&s->d[i], one, sizeof(one)));
    if (pos < len)
        snprintf(buf + pos, len - pos, "]");
    return buf;
}

void gf_shape_set(struct gf_shape *s, int rank, const int64_t *dims)
{
    s->rank = rank;
    for (int i = 0; i < rank; i++)
        s->d[i] = gf_dim_of(dims[i]);
}

bool gf_shape_unify(const struct gf_shape *s, const struct gf_shape *t, struct gf_shape *out)
{
    if (s->rank < 0 || t->rank < 0) {
        *out = s->rank < 0 ? *t : *s;
        return true;
    }
    if (s->rank != t->rank)
        return false;
    struct gf_shape o = {.rank = s->rank};
    for (int i = 0; i < s->rank; i++)
        if (!gf_dim_unify(&s->d[i], &t->d[i], &o.d[i]))
            return false;
    *out = o;
    return true;
}

/* Two unknown dims of one symbol. */
static bool same_sym(const struct gf_dim *a, const struct gf_dim *b)
{
    return !gf_dim_known(a) && !gf_dim_known(b) && a->param && b->param &&
           strcmp(a->param, b->param) == 0;
}

/* Multidirectional broadcast of one pair of dims. */
bool gf_dim_broadcast(const struct gf_dim *a, const struct gf_dim *b, struct gf_dim *out)
{
    if (gf_dim_known(a) && gf_dim_known(b)) {
        if (a->value == b->value || b->value == 1)
            *out = *a;
        else if (a->value == 1)
            *out = *b;
        else
            return false;
    } else if (gf_dim_known(a)) {
        *out = a->value == 1 ? *b : *a;
    } else if (gf_dim_known(b)) {
        *out = b->value == 1 ? *a : *b;
    } else if (same_sym(a, b)) {
        *out = *a;
    } else {
        *out = gf_dim_unknown();
    }
    return true;
}

/* Broadcasts a and b into out (which may alias a); false when incompatible. */
bool gf_shape_broadcast(const struct gf_shape *a, const struct gf_shape *b, struct gf_shape *out)
{
    if (a->rank < 0 || b->rank < 0) {
        out->rank = -1;
        return true;
    }
    int r = a->rank > b->rank ? a->rank : b->rank;
    struct gf_shape t;
    t.rank = r;
    for (int i = 0; i < r; i++) {
        int ia = i - (r - a->rank), ib = i - (r - b->rank);
        struct gf_dim one = gf_dim_of(1);
        const struct gf_dim *da = ia >= 0 ? &a->d[ia] : &one;
        const struct gf_dim *db = ib >= 0 ? &b->d[ib] : &one;
        if (!gf_dim_broadcast(da, db, &t.d[i]))
            return false;
    }
    *out = t;
    return true;
}

bool gf_dtype_is_int(enum gf_dtype t)
{
    switch (t) {
    case GF_INT8: case GF_INT16: case GF_INT32: case GF_INT64:
    case GF_UINT8: case GF_UINT16: case GF_UINT32: case GF_UINT64:
        return true;
    default:
        return false;
    }
}

enum gf_status gf_node_error(const struct gf_node *n, enum gf_status st, const char *fmt, ...)
{
    char who[256], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!n)
        return gf_error(st, "%s", msg);
    return gf_error(st, "%s: %s", gf_node_label(n, who, sizeof(who)), msg);
}

#define SHAPE(s) gf_shape_str(s, (char[256]){0}, 256)
#define DIM(d) gf_dim_str(d, (char[64]){0}, 64)

/* The product of two dims, known when both are (or one is 0). */
static struct gf_dim dim_mul(const struct gf_dim *a, const struct gf_dim *b)
{
    if ((gf_dim_known(a) && a->value == 0) || (gf_dim_known(b) && b->value == 0))
        return gf_dim_of(0);
    if (!gf_dim_known(a) || !gf_dim_known(b))
        return gf_dim_unknown();
    return gf_dim_of(a->value * b->value);
}

/* An integer attribute that must be 0 or 1. */
static enum gf_status attr_flag(const struct gf_node *n, const char *name, bool *v)
{
    int64_t x = gf_node_attr_int(n, name, 0);
    if (x != 0 && x != 1)
        return gf_node_error(n, GF_ERR_INVALID, "%s %lld must be 0 or 1", name, (long long)x);
    *v = x;
    return GF_OK;
}

/* ---- cross-entropy --------------------------------------------------------- */

/* reduction and ignore_index (no shift). */
static enum gf_status loss_attrs(const struct gf_node *n, struct gf_ce_attrs *ce)
{
    const char *r = gf_node_attr_string(n, "reduction", "mean");
    if (strcmp(r, "none") == 0)
        ce->red = GF_RED_NONE;
    else if (strcmp(r, "sum") == 0)
        ce->red = GF_RED_SUM;
    else if (strcmp(r, "mean") == 0)
        ce->red = GF_RED_MEAN;
    else
        return gf_node_error(n, GF_ERR_INVALID, "reduction '%s' is not one of none, sum, mean",
                             r);
    ce->has_ii = gf_node_attr(n, "ignore_index") != NULL;
    ce->ii = gf_node_attr_int(n, "ignore_index", 0);
    ce->shift = false;
    return GF_OK;
}

enum gf_status gf_rule_ce_attrs(const struct gf_node *n, struct gf_ce_attrs *ce)
{
    enum gf_status st = loss_attrs(n, ce);
    return st == GF_OK ? attr_flag(n, "shift", &ce->shift) : st;
}

/* With shift=1: x [B, S, ...] (rank 3; S >= 1) and the labels t [B, S];
 * the positions [B * (S - 1)].  `what` names x in messages. */
static enum gf_status shifted(const struct gf_node *n, const char *what, const char *form,
                              const struct gf_shape *x, const struct gf_shape *t, size_t ti,
                              struct gf_shape *pos)
{
    struct gf_shape bs = {.rank = 2, .d = {gf_dim_unknown(), gf_dim_unknown()}};
    if (x->rank >= 0 && (x->rank != 3 || (gf_dim_known(&x->d[1]) && x->d[1].value < 1)))
        return gf_node_error(n, GF_ERR_INVALID, "with shift=1 %s must be %s with S >= 1, got %s",
                             what, form, SHAPE(x));
    if (x->rank == 3)
        bs.d[0] = x->d[0], bs.d[1] = x->d[1];
    if (!gf_shape_unify(&bs, t, &bs))
        return gf_node_error(n, GF_ERR_INVALID, "label T (input %zu) has shape %s, expected %s",
                             ti, SHAPE(t), SHAPE(&bs));
    struct gf_dim s1 = gf_dim_known(&bs.d[1]) ? gf_dim_of(bs.d[1].value - 1) : gf_dim_unknown();
    pos->rank = 1;
    pos->d[0] = dim_mul(&bs.d[0], &s1);
    return GF_OK;
}

/* The labels t have the positions' shape pos (unknowns filled from t). */
static enum gf_status labels_fit(const struct gf_node *n, const struct gf_shape *t, size_t ti,
                                 struct gf_shape *pos)
{
    if (!gf_shape_unify(pos, t, pos))
        return gf_node_error(n, GF_ERR_INVALID, "label T (input %zu) has shape %s, expected %s",
                             ti, SHAPE(t), SHAPE(pos));
    return GF_OK;
}

enum gf_status gf_rule_sce(const struct gf_node *n, const struct gf_shape *l,
                           const struct gf_shape *t, const struct gf_shape *wc,
                           struct gf_sce_rule *r)
{
    enum gf_status st = gf_rule_ce_attrs(n, &r->ce);
    if (st != GF_OK)
        return st;
    r->c = gf_dim_unknown();
    r->logp = *l;
    if (r->ce.shift) {
        if ((st = shifted(n, "the logits L", "[B, S, C]", l, t, 1, &r->pos)) != GF_OK)
            return st;
        if (l->rank == 3)
            r->c = l->d[2];
        r->logp = (struct gf_shape){.rank = 2, .d = {r->pos.d[0], r->c}};
    } else {
        if (l->rank >= 0 && l->rank < 2)
            return gf_node_error(n, GF_ERR_INVALID, "logits L must be [N, C, d...], got %s",
                                 SHAPE(l));
        r->pos.rank = l->rank < 0 ? -1 : l->rank - 1;
        for (int i = 0; i < r->pos.rank; i++)
            r->pos.d[i] = l->d[i ? i + 1 : 0];
        if (l->rank >= 2)
            r->c = l->d[1];
        if ((st = labels_fit(n, t, 1, &r->pos)) != GF_OK)
            return st;
    }
    struct gf_shape want = {.rank = 1, .d = {r->c}};
    if (wc && !gf_shape_unify(wc, &want, &want))
        return gf_node_error(n, GF_ERR_INVALID, "class weights Wc (input 2) %s must be [%s]",
                             SHAPE(wc), DIM(&r->c));
    return GF_OK;
}

enum gf_status gf_rule_lce(const struct gf_node *n, const struct gf_shape *h,
                           const struct gf_shape *w, const struct gf_shape *t,
                           const struct gf_shape *bias, struct gf_lce_rule *r)
{
    enum gf_status st = gf_rule_ce_attrs(n, &r->ce);
    if (st == GF_OK)
        st = attr_flag(n, "transB", &r->tb);
    if (st != GF_OK)
        return st;
    if (h->rank == 0 || (w->rank >= 0 && w->rank != 2))
        return gf_node_error(n, GF_ERR_INVALID, "H %s must be %s and W %s 2-D", SHAPE(h),
                             r->ce.shift ? "[B, S, K] (shift=1)" : "[..., K]", SHAPE(w));
    r->k = h->rank > 0 ? h->d[h->rank - 1] : gf_dim_unknown();
    r->v = w->rank == 2 ? w->d[r->tb ? 0 : 1] : gf_dim_unknown();
    if (w->rank == 2 && !gf_dim_unify(&r->k, &w->d[r->tb ? 1 : 0], &r->k))
        return gf_node_error(n, GF_ERR_INVALID, "W%s %s does not have K = %s rows",
                             r->tb ? "^T" : "", SHAPE(w), DIM(&r->k));
    if (r->ce.shift) {
        st = shifted(n, "H", "[B, S, K]", h, t, 2, &r->pos);
    } else {
        r->pos.rank = h->rank < 0 ? -1 : h->rank - 1;
        memcpy(r->pos.d, h->d, sizeof(struct gf_dim) * (size_t)(h->rank > 0 ? h->rank - 1 : 0));
        st = labels_fit(n, t, 2, &r->pos);
    }
    if (st != GF_OK || !bias)
        return st;
    /* Bias: [V], or V with leading ones */
    bool ok = bias->rank != 0;
    for (int i = 0; ok && bias->rank > 0 && i < bias->rank; i++) {
        struct gf_dim one = gf_dim_of(1), tmp;
        ok = gf_dim_unify(&bias->d[i], i == bias->rank - 1 ? &r->v : &one, &tmp);
    }
    if (!ok)
        return gf_node_error(n, GF_ERR_INVALID, "Bias (input 3) %s must be [%s]", SHAPE(bias),
                             DIM(&r->v));
    return GF_OK;
}

enum gf_status gf_rule_ce_grad(const struct gf_node *n, const struct gf_shape *dloss,
                               const struct gf_shape *g, struct gf_ceg_rule *r)
{
    enum gf_status st = gf_rule_ce_attrs(n, &r->ce);
    if (st != GF_OK)
        return st;
    if (g->rank >= 0 && (g->rank < 2 || (r->ce.shift && g->rank != 3)))
        return gf_node_error(n, GF_ERR_INVALID, "G %s must be %s", SHAPE(g),
                             r->ce.shift ? "[B, S, C]" : "[N, C, d...]");
    struct gf_shape *o = &r->dloss;
    o->rank = r->ce.red != GF_RED_NONE ? 0 : g->rank < 0 ? -1 : r->ce.shift ? 1 : g->rank - 1;
    if (r->ce.red == GF_RED_NONE && r->ce.shift && g->rank == 3) {
        struct gf_dim s1 = gf_dim_known(&g->d[1]) ? gf_dim_of(g->d[1].value - 1)
                                                  : gf_dim_unknown();
        o->d[0] = dim_mul(&g->d[0], &s1);
    } else if (r->ce.red == GF_RED_NONE && g->rank >= 2) {
        for (int i = 0; i < o->rank; i++)
            o->d[i] = g->d[i ? i + 1 : 0];
    }
    /* a scalar dLoss may come as [1] */
    bool scalar_ok = o->rank == 0 && dloss->rank >= 0;
    for (int i = 0; scalar_ok && i < dloss->rank; i++)
        scalar_ok = !gf_dim_known(&dloss->d[i]) || dloss->d[i].value == 1;
    if (!(o->rank == 0 ? scalar_ok || dloss->rank < 0 : gf_shape_unify(dloss, o, o)))
        return gf_node_error(n, GF_ERR_INVALID, "dLoss %s must be %s", SHAPE(dloss),
                             o->rank == 0 ? "a scalar" : SHAPE(o));
    return GF_OK;
}

/* ---- the ONNX losses ------------------------------------------------------- */

/* A scalar, or a shape whose known dims are all 1 (a scalar as [1]). */
static bool scalar_like(const struct gf_shape *s)
{
    for (int i = 0; i < s->rank; i++)
        if (gf_dim_known(&s->d[i]) && s->d[i].value != 1)
            return false;
    return true;
}

enum gf_status gf_rule_loss(const struct gf_node *n, const struct gf_shape *dloss,
                            const struct gf_shape *scores, const struct gf_shape *labels,
                            const struct gf_shape *w, struct gf_loss_rule *r)
{
    enum gf_status st = loss_attrs(n, &r->ce);
    if (st != GF_OK)
        return st;
    r->si = dloss ? 1 : 0;
    r->ti = r->si + 1;
    r->wi = r->ti + 1;
    int sr = scores->rank;
    if (sr >= 0 && sr < 2)
        return gf_node_error(n, GF_ERR_INVALID, "scores (input %zu) must be [N, C, d1...], "
                             "got rank %d", r->si, sr);
    r->c = sr >= 2 ? scores->d[1] : gf_dim_unknown();
    r->pos.rank = sr < 0 ? labels->rank : sr - 1;
    for (int i = 0; i < r->pos.rank; i++)
        r->pos.d[i] = sr < 0 ? labels->d[i] : scores->d[i ? i + 1 : 0];
    if (sr >= 0 && labels->rank >= 0 && labels->rank != r->pos.rank)
        return gf_node_error(n, GF_ERR_INVALID, "labels (input %zu) must be [N, d1...] of rank "
                             "%d, got %s", r->ti, r->pos.rank, SHAPE(labels));
    for (int i = 0; sr >= 0 && labels->rank >= 0 && i < r->pos.rank; i++)
        if (!gf_dim_unify(&labels->d[i], &r->pos.d[i], &r->pos.d[i]))
            return gf_node_error(n, GF_ERR_INVALID, "labels (input %zu) dim %d is %s, scores "
                                 "need %s", r->ti, i, DIM(&labels->d[i]), DIM(&r->pos.d[i]));
    struct gf_shape want = {.rank = 1, .d = {r->c}};
    if (w && !gf_shape_unify(w, &want, &want))
        return gf_node_error(n, GF_ERR_INVALID, "weights (input %zu) must be [%s], got %s",
                             r->wi, DIM(&r->c), SHAPE(w));
    r->loss = r->pos;
    if (r->ce.red != GF_RED_NONE)
        r->loss.rank = 0;
    bool ok = !dloss || dloss->rank < 0 ||
              (r->loss.rank == 0 ? scalar_like(dloss) : gf_shape_unify(dloss, &r->loss, &want));
    if (!ok)
        return gf_node_error(n, GF_ERR_INVALID, "dLoss (input 0) is %s, expected %s",
                             SHAPE(dloss), r->loss.rank == 0 ? "a scalar" : SHAPE(&r->loss));
    return GF_OK;
}

/* ---- attention ------------------------------------------------------------- */

enum gf_status gf_rule_attention(const struct gf_node *n, const struct gf_shape *q,
                                 const struct gf_shape *k, const struct gf_shape *v,
                                 const struct gf_shape *mask, struct gf_attn_rule *r)
{
    enum gf_status st = attr_flag(n, "transB", &r->tb);
    if (st == GF_OK)
        st = attr_flag(n, "zero_masked_rows", &r->zero_rows);
    if (st != GF_OK)
        return st;
    r->scale = gf_node_attr_float(n, "scale", 1.0f);
    int rk = q->rank >= 0 ? q->rank : k->rank >= 0 ? k->rank : v->rank;
    bool ok = rk < 0 || (rk >= 2 && (q->rank < 0 || q->rank == rk) &&
                         (k->rank < 0 || k->rank == rk) && (v->rank < 0 || v->rank == rk));
    struct gf_shape b = {.rank = rk < 0 ? -1 : rk - 2};
    for (int i = 0; i < b.rank; i++)
        b.d[i] = gf_dim_unknown();
    const struct gf_shape *all[3] = {q, k, v};
    for (int j = 0; ok && j < 3; j++)
        for (int i = 0; ok && all[j]->rank >= 0 && i < b.rank; i++)
            ok = gf_dim_unify(&b.d[i], &all[j]->d[i], &b.d[i]);
    struct gf_dim u = gf_dim_unknown();
    r->sq = r->d = r->sk = r->dv = u;
    if (ok && q->rank >= 2)
        r->sq = q->d[rk - 2], r->d = q->d[rk - 1];
    if (ok && k->rank >= 2) {
        r->sk = k->d[r->tb ? rk - 2 : rk - 1];
        ok = gf_dim_unify(&r->d, &k->d[r->tb ? rk - 1 : rk - 2], &r->d);
    }
    if (ok && v->rank >= 2) {
        r->dv = v->d[rk - 1];
        ok = gf_dim_unify(&r->sk, &v->d[rk - 2], &r->sk);
    }
    if (!ok)
        return gf_node_error(n, GF_ERR_INVALID, "Q %s, K %s (transB=%d), V %s do not fit "
                             "[b..., Sq, D], %s, [b..., Sk, Dv]", SHAPE(q), SHAPE(k), r->tb,
                             SHAPE(v), r->tb ? "[b..., Sk, D]" : "[b..., D, Sk]");
    r->scores = b;
    r->o = b;
    r->stats.rank = -1;
    if (b.rank >= 0) {
        r->scores.rank = r->o.rank = rk;
        r->scores.d[rk - 2] = r->o.d[rk - 2] = r->sq;
        r->scores.d[rk - 1] = r->sk;
        r->o.d[rk - 1] = r->dv;
        r->stats.rank = rk; /* [2, b..., Sq] */
        r->stats.d[0] = gf_dim_of(2);
        for (int i = 0; i < rk - 2; i++)
            r->stats.d[1 + i] = b.d[i];
        r->stats.d[rk - 1] = r->sq;
    }
    /* Mask broadcasts to the scores without enlarging them */
    for (int i = 1; mask && mask->rank >= 0 && r->scores.rank >= 0 && i <= mask->rank; i++) {
        const struct gf_dim *m = &mask->d[mask->rank - i];
        struct gf_dim tmp;
        if (!gf_dim_known(m) || m->value == 1)
            continue;
        if (i > rk || !gf_dim_unify(m, &r->scores.d[rk - i], &tmp))
            return gf_node_error(n, GF_ERR_INVALID, "Mask %s does not broadcast to the scores "
                                 "%s", SHAPE(mask), SHAPE(&r->scores));
    }
    return GF_OK;
}

enum gf_status gf_rule_attention_grad(const struct gf_node *n, const struct gf_shape *dout,
                                      const struct gf_shape *q, const struct gf_shape *k,
                                      const struct gf_shape *v, const struct gf_shape *mask,
                                      const struct gf_shape *o, const struct gf_shape *stats,
                                      struct gf_attn_rule *r)
{
    enum gf_status st = gf_rule_attention(n, q, k, v, mask, r);
    const struct gf_shape *x[3] = {dout, o, stats};
    static const char *const names[3] = {"dO", "O", "Stats"};
    struct gf_shape tmp;
    for (int i = 0; i < 3 && st == GF_OK; i++) {
        const struct gf_shape *want = i == 2 ? &r->stats : &r->o;
        if (x[i] && !gf_shape_unify(x[i], want, &tmp))
            st = gf_node_error(n, GF_ERR_INVALID, "%s %s must be %s", names[i], SHAPE(x[i]),
                               SHAPE(want));
    }
    return st;
}

/* t broadcasts to x without enlarging it (where dims are known). */
static bool bcasts_into(const struct gf_shape *t, const struct gf_shape *x)
{
    if (t->rank < 0 || x->rank < 0)
        return true;
    for (int k = 1; k <= t->rank; k++) {
        const struct gf_dim *d = &t->d[t->rank - k];
        struct gf_dim tmp;
        if (gf_dim_known(d) && d->value != 1 &&
            (k > x->rank || !gf_dim_unify(d, &x->d[x->rank - k], &tmp)))
            return false;
    }
    return true;
}

/* ---- normalizations -------------------------------------------------------- */

/* Attributes and the block of X. */
static enum gf_status norm_common(const struct gf_node *n, const struct gf_shape *x, bool rms,
                                  bool has_w, struct gf_norm_rule *o)
{
    int64_t axis = gf_node_attr_int(n, "axis", -1);
    *o = (struct gf_norm_rule){.rms = rms, .block.rank = -1, .stats = *x};
    if (x->rank >= 0) {
        if (axis < -x->rank || axis >= x->rank)
            return gf_node_error(n, GF_ERR_INVALID, "axis %lld is out of range for X of rank %d",
                                 (long long)axis, x->rank);
        o->axis = (int)(axis < 0 ? axis + x->rank : axis);
        o->block.rank = x->rank - o->axis;
        memcpy(o->block.d, x->d + o->axis, sizeof(struct gf_dim) * (size_t)o->block.rank);
        for (int i = o->axis; i < x->rank; i++)
            o->stats.d[i] = gf_dim_of(1);
    }
    double eps = gf_node_attr_float(n, "epsilon", rms ? 1e-6f : 1e-5f);
    if (!(eps >= 0) || isinf(eps))
        return gf_node_error(n, GF_ERR_INVALID, "epsilon %g must be finite and >= 0", eps);
    o->eps = (float)eps;
    if (!rms)
        return GF_OK;
    enum gf_status st = attr_flag(n, "eps_outside", &o->eps_outside);
    double off = gf_node_attr_float(n, "weight_offset", 0.0f);
    if (st == GF_OK && !isfinite(off))
        return gf_node_error(n, GF_ERR_INVALID, "weight_offset must be finite");
    if (st == GF_OK && off != 0 && !has_w)
        return gf_node_error(n, GF_ERR_INVALID, "weight_offset %g needs the weight W", off);
    o->woff = (float)off;
    return st;
}

/* W or B (input i) broadcasts to the block without enlarging it. */
static enum gf_status norm_param(const struct gf_node *n, const struct gf_shape *t,
                                 const char *name, size_t i, const struct gf_norm_rule *o)
{
    if (t && !bcasts_into(t, &o->block))
        return gf_node_error(n, GF_ERR_INVALID, "%s (input %zu) %s does not broadcast to the "
                             "normalized dims %s", name, i, SHAPE(t), SHAPE(&o->block));
    return GF_OK;
}

/* t has X's shape; "%s %s must have X's shape %s" otherwise. */
static enum gf_status like_x(const struct gf_node *n, const struct gf_shape *t,
                             const char *name, const struct gf_shape *x)
{
    struct gf_shape tmp;
    if (t && !gf_shape_unify(t, x, &tmp))
        return gf_node_error(n, GF_ERR_INVALID, "%s %s must have X's shape %s", name, SHAPE(t),
                             SHAPE(x));
    return GF_OK;
}

enum gf_status gf_rule_norm(const struct gf_node *n, const struct gf_shape *x,
                            const struct gf_shape *r, const struct gf_shape *w,
                            const struct gf_shape *b, struct gf_norm_rule *o)
{
    bool rms = n->op == GF_OP_RMS_NORM || n->op == GF_OP_ADD_RMS_NORM;
    enum gf_status st = norm_common(n, x, rms, w != NULL, o);
    size_t wi = r ? 2 : 1;
    if (st == GF_OK)
        st = like_x(n, r, "R", x);
    if (st == GF_OK)
        st = norm_param(n, w, "W", wi, o);
    if (st == GF_OK)
        st = norm_param(n, b, "B", wi + 1, o);
    return st;
}

enum gf_status gf_rule_norm_grad(const struct gf_node *n, const struct gf_shape *dy,
                                 const struct gf_shape *x, const struct gf_shape *w,
                                 const struct gf_shape *mean, const struct gf_shape *istd,
                                 const struct gf_shape *g, struct gf_norm_rule *o)
{
    enum gf_status st = norm_common(n, x, n->op == GF_OP_RMS_NORM_GRAD, w != NULL, o);
    if (st == GF_OK)
        st = like_x(n, dy, "dY", x);
    if (st == GF_OK)
        st = like_x(n, g, "G", x);
    if (st == GF_OK)
        st = norm_param(n, w, "W", 2, o);
    if (st != GF_OK || n->op == GF_OP_RMS_NORM_GRAD)
        return st;
    if (!mean != !istd)
        return gf_node_error(n, GF_ERR_INVALID, "Mean (input 3) and InvStdDev (input 4) must "
                             "be given together");
    const struct gf_shape *s[2] = {mean, istd};
    static const char *const names[2] = {"Mean", "InvStdDev"};
    struct gf_shape tmp;
    for (int i = 0; i < 2 && mean; i++)
        if (!gf_shape_unify(s[i], &o->stats, &tmp))
            return gf_node_error(n, GF_ERR_INVALID, "%s (input %d) %s must be %s", names[i],
                                 3 + i, SHAPE(s[i]), SHAPE(&o->stats));
    return GF_OK;
}

/* ---- activations ------------------------------------------------------------- */

enum gf_status gf_rule_act(const struct gf_node *n, enum gf_act *act)
{
    enum gf_op op = n->op;
    *act = GF_ACT_SILU;
    if (op == GF_OP_SWIGLU || op == GF_OP_SILU || op == GF_OP_SWIGLU_GRAD)
        return GF_OK;
    const char *ap = gf_node_attr_string(n, "approximate", "none");
    if (strcmp(ap, "none") != 0 && strcmp(ap, "tanh") != 0)
        return gf_node_error(n, GF_ERR_INVALID, "approximate '%s' is not none or tanh", ap);
    *act = strcmp(ap, "tanh") == 0 ? GF_ACT_GELU_TANH : GF_ACT_GELU;
    return GF_OK;
}

enum gf_status gf_rule_glu(const struct gf_node *n, const struct gf_shape *g,
                           const struct gf_shape *u, enum gf_act *act, struct gf_shape *y)
{
    enum gf_status st = gf_rule_act(n, act);
    if (st != GF_OK)
        return st;
    *y = *g;
    if (u && !gf_shape_broadcast(g, u, y))
        return gf_node_error(n, GF_ERR_INVALID, "G %s and U %s do not broadcast", SHAPE(g),
                             SHAPE(u));
    return GF_OK;
}

enum gf_status gf_rule_glu_grad(const struct gf_node *n, const struct gf_shape *dy,
                                const struct gf_shape *g, const struct gf_shape *u,
                                enum gf_act *act)
{
    enum gf_status st = gf_rule_act(n, act);
    const struct gf_shape *x[2] = {g, u};
    static const char *const names[2] = {"G", "U"};
    struct gf_shape tmp;
    for (int i = 0; i < 2 && st == GF_OK; i++)
        if (!gf_shape_unify(x[i], dy, &tmp))
            st = gf_node_error(n, GF_ERR_INVALID, "%s %s must have dY's shape %s", names[i],
                               SHAPE(x[i]), SHAPE(dy));
    return st;
}

enum gf_status gf_rule_rope(const struct gf_node *n, const struct gf_shape *x,
                            const struct gf_shape *cos, const struct gf_shape *sin)
{
    const char *xname = n->op == GF_OP_ROPE_GRAD ? "dY" : "X";
    const struct gf_dim *last = x->rank > 0 ? &x->d[x->rank - 1] : NULL;
    if (x->rank == 0 || (last && gf_dim_known(last) && last->value % 2))
        return gf_node_error(n, GF_ERR_INVALID, "%s %s needs a last axis of even length", xname,
                             SHAPE(x));
    const struct gf_shape *t[2] = {cos, sin};
    static const char *const names[2] = {"Cos", "Sin"};
    for (int i = 0; i < 2; i++)
        if (!bcasts_into(t[i], x))
            return gf_node_error(n, GF_ERR_INVALID, "%s (input %d) %s does not broadcast to %s "
                                 "%s", names[i], i + 1, SHAPE(t[i]), xname, SHAPE(x));
    return GF_OK;
}

/* ---- MatMulEpilogue -------------------------------------------------------- */

const char *const gf_mme_act_names[7] = {"", "relu", "gelu", "gelu_tanh", "silu", "tanh",
                                         "sigmoid"};

enum gf_status gf_rule_matmul(const struct gf_node *n, const struct gf_shape *a,
                              const struct gf_shape *b, bool ta, bool tb,
                              struct gf_matmul_rule *r)
{
    struct gf_dim u = gf_dim_unknown(), one = gf_dim_of(1);
    *r = (struct gf_matmul_rule){.m = u, .k = u, .n = u, .batch.rank = -1, .y.rank = -1};
    if (a->rank == 0 || b->rank == 0)
        return gf_node_error(n, GF_ERR_INVALID, "A %s and B %s need rank >= 1", SHAPE(a),
                             SHAPE(b));
    if ((ta && a->rank == 1) || (tb && b->rank == 1))
        return gf_node_error(n, GF_ERR_INVALID, "transA / transB need an operand of rank >= 2 "
                             "(A %s, B %s)", SHAPE(a), SHAPE(b));
    struct gf_dim kb = u;
    if (a->rank > 0) {
        const struct gf_dim *a0 = a->rank > 1 ? &a->d[a->rank - 2] : &one;
        const struct gf_dim *a1 = &a->d[a->rank - 1];
        r->m = ta ? *a1 : *a0;
        r->k = ta ? *a0 : *a1;
    }
    if (b->rank > 0) {
        const struct gf_dim *b0 = b->rank > 1 ? &b->d[b->rank - 2] : &b->d[0];
        const struct gf_dim *b1 = b->rank > 1 ? &b->d[b->rank - 1] : &one;
        r->n = tb ? *b0 : *b1;
        kb = tb ? *b1 : *b0;
    }
    struct gf_dim tmp;
    if (!gf_dim_unify(&r->k, &kb, &tmp))
        return gf_node_error(n, GF_ERR_INVALID, "inner dims differ: A%s %s has K = %s, B%s %s "
                             "has K = %s", ta ? "^T" : "", SHAPE(a), DIM(&r->k), tb ? "^T" : "",
                             SHAPE(b), DIM(&kb));
    r->k = tmp;
    if (a->rank < 0 || b->rank < 0)
        return GF_OK;
    struct gf_shape ba = {.rank = a->rank > 2 ? a->rank - 2 : 0};
    struct gf_shape bb = {.rank = b->rank > 2 ? b->rank - 2 : 0};
    memcpy(ba.d, a->d, sizeof(struct gf_dim) * (size_t)ba.rank);
    memcpy(bb.d, b->d, sizeof(struct gf_dim) * (size_t)bb.rank);
    if (!gf_shape_broadcast(&ba, &bb, &r->batch))
        return gf_node_error(n, GF_ERR_INVALID, "batch dims of A %s and B %s do not broadcast",
                             SHAPE(a), SHAPE(b));
    r->y = r->batch;
    if (a->rank > 1 && r->y.rank < GF_SHAPE_MAX_RANK)
        r->y.d[r->y.rank++] = r->m;
    if (b->rank > 1 && r->y.rank < GF_SHAPE_MAX_RANK)
        r->y.d[r->y.rank++] = r->n;
    return GF_OK;
}

enum gf_status gf_rule_gemm(const struct gf_node *n, const struct gf_shape *a,
                            const struct gf_shape *b, const struct gf_shape *c,
                            struct gf_gemm_rule *r)
{
    int64_t opset = gf_model_opset(n->graph->model, "");
    *r = (struct gf_gemm_rule){
        .ta = gf_node_attr_int(n, "transA", 0) != 0,
        .tb = gf_node_attr_int(n, "transB", 0) != 0,
        .alpha = gf_node_attr_float(n, "alpha", 1.0f),
        .beta = gf_node_attr_float(n, "beta", 1.0f),
        .strict = opset > 0 && opset < 7 && !gf_node_attr_int(n, "broadcast", 0),
    };
    if ((a->rank >= 0 && a->rank != 2) || (b->rank >= 0 && b->rank != 2))
        return gf_node_error(n, GF_ERR_INVALID, "A %s and B %s must be 2-D", SHAPE(a), SHAPE(b));
    enum gf_status st = gf_rule_matmul(n, a, b, r->ta, r->tb, &r->mm);
    if (st != GF_OK || !c || c->rank < 0)
        return st;
    /* Y [M, N], known even where A or B has no rank yet */
    struct gf_shape y = {.rank = 2, .d = {r->mm.m, r->mm.n}};
    bool ok = c->rank <= 2 && bcasts_into(c, &y);
    for (int i = 0; ok && r->strict && i < 2; i++) {
        struct gf_dim tmp;
        ok = c->rank == 2 && gf_dim_unify(&c->d[i], &y.d[i], &tmp);
    }
    if (!ok)
        return gf_node_error(n, GF_ERR_INVALID, "C %s does not %s Y %s%s", SHAPE(c),
                             r->strict ? "match" : "broadcast to", SHAPE(&y),
                             r->strict ? " (broadcast=0)" : "");
    return GF_OK;
}

/* The epilogue's "activation": its index in gf_mme_act_names. */
static enum gf_status mme_act(const struct gf_node *n, int *act)
{
    const char *name = gf_node_attr_string(n, "activation", "");
    for (*act = 0; *act < 7; (*act)++)
        if (strcmp(name, gf_mme_act_names[*act]) == 0)
            return GF_OK;
    return gf_node_error(n, GF_ERR_INVALID, "activation '%s' is not one of \"\", relu, gelu, "
                         "gelu_tanh, silu, tanh, sigmoid", name);
}

enum gf_status gf_rule_mme(const struct gf_node *n, const struct gf_shape *a,
                           const struct gf_shape *b, const struct gf_shape *bias,
                           const struct gf_shape *res, struct gf_mme_rule *r)
{
    r->ta = gf_node_attr_int(n, "transA", 0) != 0;
    r->tb = gf_node_attr_int(n, "transB", 0) != 0;
    r->alpha = gf_node_attr_float(n, "alpha", 1.0f);
    r->beta = gf_node_attr_float(n, "beta", 1.0f);
    enum gf_status st = mme_act(n, &r->act);
    if (st == GF_OK)
        st = gf_rule_matmul(n, a, b, r->ta, r->tb, &r->mm);
    const struct gf_shape *t[2] = {bias, res};
    static const char *const names[2] = {"Bias", "Res"};
    for (int i = 0; i < 2 && st == GF_OK; i++)
        if (t[i] && !bcasts_into(t[i], &r->mm.y))
            st = gf_node_error(n, GF_ERR_INVALID, "%s (input %d) %s does not broadcast to Y %s",
                               names[i], i + 2, SHAPE(t[i]), SHAPE(&r->mm.y));
    return st;
}

enum gf_status gf_rule_mme_grad(const struct gf_node *n, const struct gf_shape *dy,
                                const struct gf_shape *z, struct gf_mme_grad_rule *r)
{
    enum gf_status st = mme_act(n, &r->act);
    if (st == GF_OK)
        st = attr_flag(n, "from_output", &r->from_y);
    if (st != GF_OK)
        return st;
    const char *name = gf_mme_act_names[r->act];
    if (r->from_y && strcmp(name, "relu") && strcmp(name, "tanh") && strcmp(name, "sigmoid") &&
        *name)
        return gf_node_error(n, GF_ERR_INVALID, "from_output=1 needs activation relu, tanh or "
                             "sigmoid (%s is not invertible from its output)", name);
    struct gf_shape tmp;
    if (!gf_shape_unify(z, dy, &tmp))
        return gf_node_error(n, GF_ERR_INVALID, "%s %s must have dY's shape %s",
                             r->from_y ? "Y" : "Z", SHAPE(z), SHAPE(dy));
    if (dy->rank == 0)
        return gf_node_error(n, GF_ERR_INVALID, "dY must have rank >= 1 (rows of the last axis)");
    r->dbias = (struct gf_shape){.rank = dy->rank < 0 ? -1 : 1};
    if (dy->rank > 0)
        r->dbias.d[0] = dy->d[dy->rank - 1];
    return GF_OK;
}

/* ---- optimizer ops ------------------------------------------------------------ */

/* The elements of s: known, or unknown (-1). */
static struct gf_dim shape_numel(const struct gf_shape *s)
{
    struct gf_dim n = s->rank < 0 ? gf_dim_unknown() : gf_dim_of(1);
    for (int i = 0; i < s->rank; i++)
        n = dim_mul(&n, &s->d[i]);
    return n;
}

/* Operand i (named `what`) has as many elements as `like` (named lname). */
static enum gf_status same_count(const struct gf_node *n, const struct gf_shape *t,
                                 const char *what, size_t i, const struct gf_shape *like,
                                 const char *lname)
{
    struct gf_dim a = shape_numel(t), b = shape_numel(like), tmp;
    if (gf_dim_unify(&a, &b, &tmp))
        return GF_OK;
    return gf_node_error(n, GF_ERR_INVALID, "%s (input %zu) %s has %s elements, %s %s has %s",
                         what, i, SHAPE(t), DIM(&a), lname, SHAPE(like), DIM(&b));
}

static enum gf_status grad_acc(const struct gf_node *n, const struct gf_shape *g,
                               const struct gf_shape *acc, struct gf_optim_rule *r)
{
    enum gf_status st = attr_flag(n, "transpose", &r->transpose);
    if (st != GF_OK)
        return st;
    r->scale = gf_node_attr_float(n, "scale", 1.0f);
    r->y = acc ? *acc : *g;
    if (r->transpose) {
        if (g->rank >= 0 && g->rank != 2)
            return gf_node_error(n, GF_ERR_INVALID, "transpose=1 needs a 2-D G, got %s",
                                 SHAPE(g));
        struct gf_shape gt = {.rank = 2, .d = {gf_dim_unknown(), gf_dim_unknown()}};
        if (g->rank == 2)
            gt.d[0] = g->d[1], gt.d[1] = g->d[0];
        if (acc && !gf_shape_unify(acc, &gt, &gt))
            return gf_node_error(n, GF_ERR_INVALID, "Acc (input 1) %s is not G %s transposed",
                                 SHAPE(acc), SHAPE(g));
        r->y = gt;
    }
    return acc ? same_count(n, acc, "Acc", 1, g, "G") : GF_OK;
}

enum gf_status gf_rule_optim(const struct gf_node *n, const struct gf_shape *const *in,
                             size_t n_in, struct gf_optim_rule *r)
{
    static const char *const sgd[] = {"P", "G", "hyper", "Buf"};
    static const char *const adamw[] = {"P", "G", "ExpAvg", "ExpAvgSq", "hyper"};
    *r = (struct gf_optim_rule){.scale = 1.0f};
    const struct gf_shape *p = n_in ? in[0] : NULL;
    if (!p)
        return gf_node_error(n, GF_ERR_INVALID, "input 0 is missing");
    if (n->op == GF_OP_GRAD_ACCUMULATE)
        return grad_acc(n, p, n_in > 1 ? in[1] : NULL, r);
    if (n->op == GF_OP_GRAD_NORM) {
        r->y = (struct gf_shape){.rank = 1, .d = {gf_dim_of(1)}};
        return GF_OK;
    }
    bool is_sgd = n->op == GF_OP_SGD_STEP;
    const char *const *names = is_sgd ? sgd : adamw;
    r->hyper = is_sgd ? 2 : 4;
    r->y = *p;
    for (size_t i = 1; i < n_in && i < (is_sgd ? 4u : 5u); i++) {
        enum gf_status st = GF_OK;
        if (!in[i] && !(is_sgd && i == 3)) /* (SGD's Buf is optional) */
            return gf_node_error(n, GF_ERR_INVALID, "%s (input %zu) is missing", names[i], i);
        if (i == r->hyper) {
            struct gf_shape h = {.rank = 1, .d = {gf_dim_of(GF_OPTIM_HYPER)}};
            if (!gf_shape_unify(in[i], &h, &h))
                return gf_node_error(n, GF_ERR_INVALID, "hyper (input %zu) %s must be [%d]",
                                     i, SHAPE(in[i]), GF_OPTIM_HYPER);
        } else if (in[i]) {
            st = same_count(n, in[i], names[i], i, p, "P");
        }
        if (st != GF_OK)
            return st;
    }
    size_t ni = is_sgd ? 4 : 5; /* N, the gradient's norm (optional) */
    if (n_in > ni && in[ni]) {
        struct gf_shape one = {.rank = 1, .d = {gf_dim_of(1)}};
        if (!gf_shape_unify(in[ni], &one, &one))
            return gf_node_error(n, GF_ERR_INVALID, "N (input %zu) %s must be [1]", ni,
                                 SHAPE(in[ni]));
    }
    return GF_OK;
}
