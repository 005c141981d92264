/* Helpers for the fusion tests (test_match.c, test_fuse_norm.c,
 * test_fuse_act.c): small graphs written as text, and the reference check
 * "the fused graph computes what the unfused one did" on the executor.
 *
 *     struct tg t = tg_new(17);
 *     tg_input(&t, "x", GF_FLOAT, "2,3,8");
 *     tg_node(&t, "Pow", "x,#2", "sq");         // #2: new float initializer 2.0
 *     tg_node(&t, "ReduceMean", "sq,$-1", "m"); // $-1: new int64 [-1] initializer
 *     tg_node(&t, "Add", "m,@1e-6", "a");       // @1e-6: a Constant node 1e-6
 *     ...
 *     tg_output(&t, "y");
 *     tg_check_fused(&t, NULL, &rep);           // runs, fuses, runs, compares
 */
#ifndef GF_FUSETEST_H
#define GF_FUSETEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gf_exec.h"
#include "gf_graph.h"
#include "gf_passes.h"

struct tg {
    struct gf_model *m;
    struct gf_graph *g;
    unsigned n_lit;  /* literals made so far (for their names) */
    unsigned seed;
};

static inline struct tg tg_new(int64_t opset)
{
    struct tg t = {gf_model_new(8, "t"), NULL, 0, 12345};
    assert_non_null(t.m);
    assert_int_equal(gf_model_set_opset(t.m, "", opset), GF_OK);
    t.g = t.m->graph;
    return t;
}

static inline double tg_rand(struct tg *t)
{
    t->seed = t->seed * 1103515245u + 12345u;
    return (double)((t->seed >> 8) & 0xffff) / 65535.0 * 4 - 2; /* [-2, 2] */
}

/* "2,batch,8" -> dims (symbols kept); "" is a scalar; returns the rank. */
static inline int tg_dims(struct tg *t, const char *spec, struct gf_dim *d, int64_t *concrete)
{
    int rank = 0;
    for (const char *p = spec; *p && rank < 8;) {
        size_t n = strcspn(p, ",");
        char tok[32];
        snprintf(tok, sizeof(tok), "%.*s", (int)n, p);
        d[rank] = (struct gf_dim){.value = -1};
        if (tok[0] >= '0' && tok[0] <= '9')
            d[rank].value = atoll(tok);
        else
            d[rank].param = gf_model_strdup(t->m, tok);
        concrete[rank] = d[rank].value >= 0 ? d[rank].value : 2; /* symbols run as 2 */
        rank++;
        p += n + (p[n] == ',');
    }
    return rank;
}

static struct gf_value *tg_input(struct tg *t, const char *name, enum gf_dtype dt,
                                 const char *dims)
{
    struct gf_dim d[8];
    int64_t c[8];
    struct gf_value *v = gf_graph_new_value(t->g, name, NULL);
    assert_non_null(v);
    gf_value_set_tensor_type(v, dt, tg_dims(t, dims, d, c), d);
    assert_int_equal(gf_graph_add_input(t->g, v), GF_OK);
    return v;
}

/* Float initializer of the given shape: `vals` (n of them) or, with vals
 * NULL, 1 + 0.1 * random (a norm weight that is not trivially 1). */
static struct gf_value *tg_init(struct tg *t, const char *name, enum gf_dtype dt,
                                const char *dims, const double *vals)
{
    struct gf_dim d[8];
    int64_t c[8];
    int rank = tg_dims(t, dims, d, c);
    struct gf_tensor *x = gf_tensor_new(t->m, NULL, dt, rank, c, NULL);
    assert_non_null(x);
    for (size_t i = 0; i < x->nelem; i++) {
        double v = vals ? vals[i] : 1 + 0.1 * tg_rand(t);
        if (dt == GF_FLOAT) {
            float f = (float)v;
            memcpy((char *)x->data + 4 * i, &f, 4);
        } else if (dt == GF_INT64) {
            int64_t k = (int64_t)v;
            memcpy((char *)x->data + 8 * i, &k, 8);
        } else if (dt == GF_DOUBLE) {
            memcpy((char *)x->data + 8 * i, &v, 8);
        } else {
            fail_msg("tg_init: dtype %d not handled", dt);
        }
    }
    struct gf_value *v = gf_graph_add_initializer(t->g, name, x);
    assert_non_null(v);
    return v;
}

/* Value for an input token: a name, or a literal "#2.5" (float scalar
 * initializer), "@2.5" (float scalar Constant node), "$-1" (int64 [1]
 * initializer), "" (omitted). */
static struct gf_value *tg_token(struct tg *t, const char *tok)
{
    char name[48];
    if (!tok[0])
        return NULL;
    if (tok[0] == '#' || tok[0] == '$' || tok[0] == '@') {
        double v = atof(tok + 1);
        snprintf(name, sizeof(name), "lit%u", t->n_lit++);
        if (tok[0] == '#')
            return tg_init(t, name, GF_FLOAT, "", &v);
        if (tok[0] == '$')
            return tg_init(t, name, GF_INT64, "1", &v);
        struct gf_value *out = gf_graph_new_value(t->g, name, NULL);
        struct gf_node *n = gf_graph_add_node(t->g, "Constant", "", NULL, 0, NULL, 1, &out);
        assert_non_null(n);
        float f = (float)v;
        assert_int_equal(gf_node_set_attr_tensor(n, "value",
                                                 gf_tensor_new(t->m, NULL, GF_FLOAT, 0, NULL, &f)),
                         GF_OK);
        return out;
    }
    struct gf_value *v = gf_graph_find(t->g, tok);
    if (!v)
        v = gf_graph_new_value(t->g, tok, NULL);
    assert_non_null(v);
    return v;
}

/* Node `op` reading comma-separated input tokens, writing named outputs. */
static struct gf_node *tg_node(struct tg *t, const char *op, const char *ins, const char *outs)
{
    struct gf_value *vi[8], *vo[8];
    size_t ni = 0, no = 0;
    char buf[256], *p = buf, *tok;
    snprintf(buf, sizeof(buf), "%s", ins);
    while (ins[0] && ni < 8 && (tok = strsep(&p, ",")))
        vi[ni++] = tg_token(t, tok);
    snprintf(buf, sizeof(buf), "%s", outs);
    p = buf;
    while (outs[0] && no < 8 && (tok = strsep(&p, ",")))
        vo[no++] = tok[0] ? tg_token(t, tok) : NULL;
    char name[64];
    snprintf(name, sizeof(name), "n%zu_%s", t->g->n_nodes, op);
    struct gf_node *n = gf_graph_add_node(t->g, op, "", name, ni, vi, no, vo);
    assert_non_null(n);
    return n;
}

static inline void tg_axes(struct gf_node *n, int64_t axis)
{
    assert_int_equal(gf_node_set_attr_ints(n, "axes", 1, &axis), GF_OK);
}

static inline void tg_output(struct tg *t, const char *name)
{
    struct gf_value *v = gf_graph_find(t->g, name);
    assert_non_null(v);
    assert_int_equal(gf_graph_add_output(t->g, v), GF_OK);
}

/* Nodes of op type `op` (any domain) in the main graph. */
static inline int tg_count(const struct tg *t, const char *op)
{
    int k = 0;
    for (const struct gf_node *n = t->g->first; n; n = n->next)
        k += strcmp(n->op_type, op) == 0;
    return k;
}

static const struct gf_node *tg_find_op(const struct tg *t, const char *op)
{
    for (const struct gf_node *n = t->g->first; n; n = n->next)
        if (strcmp(n->op_type, op) == 0)
            return n;
    fail_msg("no %s node in the graph", op);
    return NULL;
}

static inline size_t tg_hits(const struct gf_fuse_report *r, const char *pattern)
{
    for (size_t i = 0; i < r->n_patterns; i++)
        if (strcmp(r->patterns[i].pattern, pattern) == 0)
            return r->patterns[i].hits;
    fail_msg("pattern %s not in the report", pattern);
    return 0;
}

/* Runs the main graph on inputs (one per session input); the outputs are
 * copied into the model's arena. */
static inline size_t tg_run(struct tg *t, struct gf_tensor *const *in, size_t n_in,
                     struct gf_tensor **out, size_t cap)
{
    struct gf_session *s;
    struct gf_tensor **got;
    size_t n_got;
    enum gf_status st = gf_session_new(t->m, NULL, &s);
    if (st != GF_OK)
        fail_msg("session: %s", gf_last_error());
    st = gf_session_run(s, n_in, in, &got, &n_got);
    if (st != GF_OK)
        fail_msg("run: %s", gf_last_error());
    assert_true(n_got <= cap);
    for (size_t i = 0; i < n_got; i++) {
        out[i] = gf_tensor_new(t->m, got[i]->name, got[i]->dtype, got[i]->rank, got[i]->dims,
                               got[i]->data);
        assert_non_null(out[i]);
    }
    gf_session_free(s);
    return n_got;
}

/* Random inputs for every graph input without an initializer (symbolic
 * dims as 2); floats in [-2, 2], ints in [0, 8). */
static inline size_t tg_inputs(struct tg *t, struct gf_tensor **in)
{
    size_t n = 0;
    for (size_t i = 0; i < t->g->n_inputs; i++) {
        const struct gf_value *v = t->g->inputs[i];
        if (v->init)
            continue;
        int64_t dims[8];
        for (int d = 0; d < v->type.rank; d++)
            dims[d] = v->type.dims[d].value >= 0 ? v->type.dims[d].value : 2;
        struct gf_tensor *x = gf_tensor_new(t->m, v->name, v->type.dtype, v->type.rank, dims, NULL);
        assert_non_null(x);
        for (size_t k = 0; k < x->nelem; k++) {
            double r = tg_rand(t);
            if (x->dtype == GF_FLOAT) {
                float f = (float)r;
                memcpy((char *)x->data + 4 * k, &f, 4);
            } else if (x->dtype == GF_DOUBLE) {
                memcpy((char *)x->data + 8 * k, &r, 8);
            } else if (x->dtype == GF_INT64) {
                int64_t q = (int64_t)((r + 2) * 2);
                memcpy((char *)x->data + 8 * k, &q, 8);
            } else {
                fail_msg("tg_inputs: dtype %d not handled", x->dtype);
            }
        }
        in[n++] = x;
    }
    return n;
}

/* The reference check: runs the graph unfused, fuses (opts o, report rep,
 * both may be NULL), validates, runs again on the same inputs and compares
 * every output within rtol 1e-5 (atol 1e-6). */
static inline void tg_check_fused(struct tg *t, const struct gf_fuse_opts *o, struct gf_fuse_report *rep)
{
    struct gf_tensor *in[16], *want[16], *got[16];
    assert_int_equal(gf_graph_infer_shapes(t->g), GF_OK);
    size_t n_in = tg_inputs(t, in);
    size_t n_want = tg_run(t, in, n_in, want, 16);
    enum gf_status st = gf_pass_fuse(t->m, o, rep);
    if (st != GF_OK)
        fail_msg("fuse: %s", gf_last_error());
    assert_int_equal(gf_graph_validate(t->g), GF_OK);
    size_t n_got = tg_run(t, in, n_in, got, 16);
    assert_int_equal(n_got, n_want);
    for (size_t i = 0; i < n_got; i++) {
        double worst;
        if (!gf_tensor_allclose(got[i], want[i], 1e-5, 1e-6, &worst))
            fail_msg("output %zu ('%s') differs after fusion: worst error %g", i, got[i]->name,
                     worst);
    }
}

/* Fuses without running (structure-only checks). */
static inline void tg_fuse(struct tg *t, const struct gf_fuse_opts *o, struct gf_fuse_report *rep)
{
    enum gf_status st = gf_pass_fuse(t->m, o, rep);
    if (st != GF_OK)
        fail_msg("fuse: %s", gf_last_error());
    assert_int_equal(gf_graph_validate(t->g), GF_OK);
}

#endif
