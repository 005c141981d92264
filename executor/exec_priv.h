/*
 * exec_priv.h — what the executor's files share and the public header
 * leaves out (internal to executor/): a session's device memory for the
 * trainer, ops run outside any graph, the optimizer on a backend, and the
 * host <-> device traffic counters of `train --profile`.
 */
#ifndef GF_EXEC_PRIV_H
#define GF_EXEC_PRIV_H

#include "gf_exec.h"
#include "gf_kernels.h"

/* Bytes copied between the host and a device backend (0 on the CPU). */
struct gf_traffic {
    uint64_t h2d, d2h;
};

/* ---- sessions (session.c) -------------------------------------------------------- */

/* The backend the session runs on. */
struct gf_backend *gf_session_get_backend(const struct gf_session *s);
/* Value v, an initializer that is a graph input (a trained parameter),
 * lives in backend memory `dev` of `bytes` (its size), which the caller
 * keeps up to date: the session reads it there and never uploads it.  On
 * the CPU dev is the host memory holding it (v->init->data).  Kept across
 * plans. */
enum gf_status gf_session_bind_param(struct gf_session *s, const struct gf_value *v,
                                     void *dev, size_t bytes);
/* Graph output i is written into backend memory `dev` of `bytes` instead of
 * the planned block, and gf_session_run's outputs[i] does not copy it back:
 * its data is dev on the CPU, NULL on a device.  A run whose plan gives the
 * output another size fails (GF_ERR_INTERNAL, naming it). */
enum gf_status gf_session_bind_output(struct gf_session *s, size_t i, void *dev, size_t bytes);
/* fn(ctx) runs at the end of every run, after the last node and before the
 * final synchronization (the trainer's optimizer launches; NULL fn: none).
 * When the plan's last graph ends the plan, its launches are captured into
 * that graph, so one replay holds both; else (graphs off, a node after the
 * last graph, a capture of fn that failed) fn runs after the last node,
 * launching directly.  fn must launch the same work on the same memory in
 * every run, and may neither allocate nor synchronize once the plan's
 * first run is done.  A failure of fn fails the run. */
void gf_session_set_epilogue(struct gf_session *s, enum gf_status (*fn)(void *ctx), void *ctx);
/* Copies of the last run between host and device, and (with opts.profile)
 * the time its nodes took, synchronized after each, and the whole run. */
void gf_session_last_run(const struct gf_session *s, struct gf_traffic *tr, double *kernel_ms,
                         double *total_ms);
/* Of kernel_ms: the epilogue's runs outside a graph (with opts.profile). */
double gf_session_epilogue_ms(const struct gf_session *s);

/* ---- CUDA Graphs (session.c) -------------------------------------------------------- */

/* Why a session with options o on a backend with ops never captures its
 * runs (NULL: it may), checked in this order: a backend without the capture
 * ops ("the backend cannot capture": nothing to report), opts.no_cuda_graph,
 * GRAPHFUSE_NO_CUDA_GRAPH (set, not "" or "0"), opts.check_finite (reads
 * every node's outputs back). */
const char *gf_capture_off_reason(const struct gf_exec_opts *o, const struct gf_backend_ops *ops);

/* What a step of a plan is to capture: nothing to launch (folded, a view),
 * launches a graph may hold, or a step that must run outside any graph. */
enum gf_capture_kind { GF_CAP_SKIP, GF_CAP_GRAPH, GF_CAP_EAGER };

/* A range of steps [first, end) replayed as one graph; n: its GF_CAP_GRAPH steps. */
struct gf_capture_seg {
    size_t first, end, n;
};
/* The graphs of a plan of n steps: maximal ranges without a GF_CAP_EAGER step
 * (starting and ending at a GF_CAP_GRAPH step) holding at least min_steps
 * GF_CAP_GRAPH steps (fewer run node by node: a replay costs about a
 * launch).  Fills out (room for n / 2 + 1) and returns how many. */
size_t gf_capture_segments(const unsigned char *kind, size_t n, size_t min_steps,
                           struct gf_capture_seg *out);

/* ---- ops run outside a graph (optim.c) --------------------------------------------- */

/* One node of a small model of the caller's, run on a backend with views
 * the caller makes (no planning).  The kernel is looked up on first run;
 * a backend without one runs the CPU kernel on host copies (counted in
 * traffic).  Workspace is allocated on the backend and kept. */
struct gf_devop {
    struct gf_backend *be;
    struct gf_node *node;
    const struct gf_kernel *k;
    bool staged;           /* no kernel on be: the CPU's, through host copies */
    void *ws;
    size_t ws_size;
    struct gf_traffic *traffic; /* counters to add to (may be NULL) */
};
/* A node of op_type (domain graphfuse unless `domain`) in m, with n_in inputs
 * and n_out outputs (placeholder values); NULL when out of memory. */
struct gf_node *gf_devop_node(struct gf_model *m, const char *op_type, const char *domain,
                              size_t n_in, size_t n_out);
enum gf_status gf_devop_run(struct gf_devop *op, const struct gf_tview *in, size_t n_in,
                            struct gf_tview *out, size_t n_out, int n_threads);
void gf_devop_release(struct gf_devop *op);
/* A view of n fp32 elements at `data` (backend memory), shaped [n] or
 * [rows, cols] when rows > 0. */
void gf_devop_view(struct gf_tview *t, void *data, size_t n, int64_t rows);
/* n zeroed floats of backend memory (at least one); NULL when out of it.
 * The zeros a device needs count as traffic. */
void *gf_exec_zeroed(struct gf_backend *be, size_t n, struct gf_traffic *traffic);

/* ---- the optimizer on a backend (optim.c) ------------------------------------------ */

/* Optimizer state for one flat fp32 range of n elements, allocated on be
 * (zeroed): the trainer keeps every master parameter in one range. */
enum gf_status gf_optim_new_on(const struct gf_optim_opts *o, struct gf_backend *be, size_t n,
                               struct gf_traffic *traffic, struct gf_optim **out);
/* One update of the range: params (n floats, backend memory) from grads
 * multiplied by grad_scale (clipping; 1: none), at learning rate lr; counts
 * the step.  One kernel launch (SGDStep or AdamWStep). */
enum gf_status gf_optim_update(struct gf_optim *o, void *params, void *grads, double lr,
                               double grad_scale, int n_threads);
/* The in-graph form of gf_optim_update (a launch a CUDA graph may hold:
 * what changes per step is read from memory when the kernel runs).
 * gf_optim_stage writes the next step's hyper (learning rate lr, the step
 * count, grad_scale: 1, 1 / S with fp16 loss scaling, NaN to skip: the
 * update then changes nothing; clipping sees the norm times grad_scale)
 * into backend memory, before the launches; gf_optim_update_staged
 * launches the update reading it and norm (backend memory: GradNorm's
 * float64 output), clipping to max_norm (0: none) and changing nothing when
 * the norm is not finite; gf_optim_advance counts the step once it is
 * known to have been taken. */
enum gf_status gf_optim_stage(struct gf_optim *o, double lr, double grad_scale);
enum gf_status gf_optim_update_staged(struct gf_optim *o, void *params, void *grads, void *norm,
                                      double max_norm, int n_threads);
void gf_optim_advance(struct gf_optim *o);
/* State buffer k of the range (backend memory, n floats). */
void *gf_optim_state_mem(const struct gf_optim *o, size_t k);

#endif /* GF_EXEC_PRIV_H */
