/*
 * gf_passes.h — graph-to-graph rewrites: cleanup, fusion, (later) autodiff.
 *
 *     struct gf_cleanup_opts co = {.eval = gf_exec_eval_node};
 *     gf_pass_cleanup(model->graph, &co, NULL);
 *     struct gf_fuse_opts fo = {.target = GF_TARGET_GRAPHFUSE};
 *     struct gf_fuse_report rep;
 *     gf_pass_fuse(model, &fo, &rep);
 *     gf_fuse_report_print(&rep, stdout, false);
 *     gf_fuse_report_free(&rep);
 *
 * Passes never execute anything themselves: constant folding asks the
 * caller's evaluator (the executor provides gf_exec_eval_node).
 */
#ifndef GF_PASSES_H
#define GF_PASSES_H

#include <stdio.h>

#include "gf_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- cleanup ------------------------------------------------------------- */

/* Computes the outputs of node n from constant inputs in[] (NULL entries
 * for omitted optional inputs).  out[i] receives a new tensor allocated in
 * model m's arena (NULL for an omitted output).  Returns GF_ERR_UNSUPPORTED
 * when it cannot evaluate this node (the pass then leaves it alone). */
typedef enum gf_status (*gf_eval_fn)(struct gf_model *m, const struct gf_node *n,
                                     struct gf_tensor *const *in, struct gf_tensor **out);

struct gf_cleanup_opts {
    gf_eval_fn eval;          /* NULL: no constant folding */
    size_t fold_limit;        /* largest folded output in bytes; 0: 16 MiB */
    bool keep_dropout;        /* keep Dropout (training graphs) */
};

struct gf_cleanup_stats {
    size_t folded;      /* nodes replaced by initializers */
    size_t dead;        /* nodes removed as unused */
    size_t identities;  /* no-op nodes bypassed */
    size_t cse;         /* duplicate nodes merged */
};

/* Constant folding, identity / no-op removal (Identity, inference
 * Dropout, Cast to the same type, Reshape / Expand to the same shape),
 * common-subexpression elimination and dead-code elimination, repeated
 * until nothing changes.  Graph inputs and outputs keep their names. */
enum gf_status gf_pass_cleanup(struct gf_graph *g, const struct gf_cleanup_opts *o,
                               struct gf_cleanup_stats *st);
/* The single passes (each returns the number of changes in *n). */
enum gf_status gf_pass_fold_constants(struct gf_graph *g, const struct gf_cleanup_opts *o,
                                      size_t *n);
enum gf_status gf_pass_remove_identities(struct gf_graph *g, bool keep_dropout, size_t *n);
enum gf_status gf_pass_cse(struct gf_graph *g, size_t *n);
enum gf_status gf_pass_dce(struct gf_graph *g, size_t *n);

/* The tensor a value holds when it is constant (an initializer that is not
 * a graph input, or the output of a Constant node), else NULL. */
const struct gf_tensor *gf_value_constant(const struct gf_value *v);

/* ---- fusion (see README.md, "Fused ops" and "Optimize") ------------------- */

#ifdef __cplusplus
}
#endif
#endif /* GF_PASSES_H */
