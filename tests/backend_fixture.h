/*
 * backend_fixture.h — the fixtures of the tests of fused kernels
 * (test_backend_fused.c, test_backend_attn.c): one graphfuse node in a
 * fresh model, host buffers kept until the cmocka teardown.  Include after
 * backend_util.h.
 */
#ifndef GF_BACKEND_FIXTURE_H
#define GF_BACKEND_FIXTURE_H

static struct gf_model *model;
static void *bufs[64];
static size_t n_bufs;

static inline int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < n_bufs; i++)
        free(bufs[i]);
    n_bufs = 0;
    gf_model_free(model);
    model = NULL;
    return 0;
}

/* Freed at teardown (or by release_bufs between cases). */
static inline void *keep(void *p)
{
    assert_non_null(p);
    assert_true(n_bufs < 64);
    return bufs[n_bufs++] = p;
}

static inline void release_bufs(void)
{
    teardown(NULL);
}

/* A fresh model holding one graphfuse node `op` (the previous one freed;
 * buffers stay). */
static inline struct gf_node *node(const char *op, size_t n_in, size_t n_out)
{
    gf_model_free(model);
    model = gf_model_new(8, "t");
    assert_non_null(model);
    assert_int_equal(gf_model_set_opset(model, "graphfuse", 1), GF_OK);
    struct gf_value *ins[8], *outs[8];
    for (size_t i = 0; i < n_in; i++)
        ins[i] = gf_graph_new_value(model->graph, NULL, "in");
    for (size_t i = 0; i < n_out; i++)
        outs[i] = gf_graph_new_value(model->graph, NULL, "out");
    struct gf_node *n = gf_graph_add_node(model->graph, op, "graphfuse", "n0", n_in, ins, n_out,
                                          outs);
    assert_non_null(n);
    assert_int_not_equal(n->op, GF_OP_UNKNOWN);
    return n;
}

#endif /* GF_BACKEND_FIXTURE_H */
