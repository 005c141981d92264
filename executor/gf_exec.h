/*
 * gf_exec.h — running graphs: planning, memory, dispatch.
 *
 *     struct gf_session *s;
 *     struct gf_exec_opts o = {.backend = "cpu", .profile = true};
 *     if (gf_session_new(model, &o, &s) != GF_OK) ...
 *     struct gf_tensor *const in[2] = {ids, labels};   // by graph-input order
 *     struct gf_tensor **out;
 *     size_t n_out;
 *     if (gf_session_run(s, 2, in, &out, &n_out) != GF_OK) ...
 *     gf_session_print_profile(s, stdout);
 *     gf_session_free(s);
 *
 * A run plans once per set of input shapes: shape inference with the actual
 * input shapes (and the values of inputs that describe shapes), a kernel
 * per node from the registry, and one activation block whose offsets come
 * from value lifetimes (dead buffers reused, elementwise ops in place when
 * their input dies).  Initializers are used where they lie.
 */
#ifndef GF_EXEC_H
#define GF_EXEC_H

#include "gf_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gf_exec_opts {
    const char *backend; /* NULL: "cpu" */
    int n_threads;       /* 0: every core */
    bool profile;        /* time each op type */
    size_t max_memory;   /* bytes of activations + workspace allowed; 0: no limit */
};

struct gf_session;

/* A session running the main graph of `m` (borrowed: keep it alive). */
enum gf_status gf_session_new(struct gf_model *m, const struct gf_exec_opts *o,
                              struct gf_session **out);
void gf_session_free(struct gf_session *s);

/* Graph inputs that need a tensor at run time (those without an
 * initializer), in graph order. */
size_t gf_session_input_count(const struct gf_session *s);
struct gf_value *gf_session_input(const struct gf_session *s, size_t i);

/* Runs the graph.  inputs[i] feeds gf_session_input(s, i); dtypes and
 * shapes are checked against the declared ones.  The outputs (one per
 * graph output, in order) belong to the session until the next run. */
enum gf_status gf_session_run(struct gf_session *s, size_t n_inputs,
                              struct gf_tensor *const *inputs, struct gf_tensor ***outputs,
                              size_t *n_outputs);

/* Memory figures of the last plan. */
struct gf_session_stats {
    size_t activation_bytes;   /* the planned block */
    size_t intermediate_bytes; /* sum of every intermediate tensor's size */
    size_t workspace_bytes;
    size_t n_nodes;
};
void gf_session_get_stats(const struct gf_session *s, struct gf_session_stats *st);
/* Time per op type and memory of the last run (with opts.profile). */
void gf_session_print_profile(const struct gf_session *s, FILE *f);

/* Compares a tensor with an expected one: same dtype and shape, and
 * |got - want| <= atol + rtol * |want| everywhere (NaN matches NaN).
 * *worst receives the largest absolute error. */
bool gf_tensor_allclose(const struct gf_tensor *got, const struct gf_tensor *want,
                        double rtol, double atol, double *worst);

#ifdef __cplusplus
}
#endif
#endif /* GF_EXEC_H */
