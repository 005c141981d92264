/*
 * gf_flat.h — a flat C API for foreign callers (the Python package's ctypes
 * binding, python/graphfuse): opaque handles, C strings, plain numbers and
 * arrays, so that a caller never mirrors a graphfuse struct.
 *
 *     void *s;
 *     if (gf_flat_session_open("model.onnx", "cpu", "fp32", 0, 0, &s) != 0)
 *         fprintf(stderr, "%s\n", gf_flat_error());
 *     const char *names[] = {"x"};
 *     int dtypes[] = {1};                      // ONNX TensorProto.DataType
 *     int ranks[] = {2};
 *     const int64_t dims[] = {4, 8};           // every input's dims, one after another
 *     const void *data[] = {x};                // row-major, little-endian
 *     if (gf_flat_session_run(s, 1, names, dtypes, ranks, dims, data) != 0) ...
 *     void *outs = gf_flat_session_outputs(s); // a tensor list owned by s
 *     for (size_t i = 0; i < gf_flat_list_count(outs); i++)
 *         use(gf_flat_list_name(outs, i), gf_flat_list_data(outs, i), ...);
 *     gf_flat_session_close(s);
 *
 * Every function returning int returns 0 on success, else a gf_status
 * (gf_graph.h) with gf_flat_error() naming the file, input or option.
 * Strings returned as char ** are malloc'ed: release them with gf_flat_free.
 */
#ifndef GF_FLAT_H
#define GF_FLAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The message of the last failure on this thread (gf_last_error). */
const char *gf_flat_error(void);
/* GF_VERSION ("0.1.0"). */
const char *gf_flat_version(void);
/* Releases a string this API malloc'ed (reports, dumps). */
void gf_flat_free(void *p);

/* ---- tensor lists: named tensors, read through accessors ---------------- */

size_t gf_flat_list_count(const void *list);
const char *gf_flat_list_name(const void *list, size_t i);
int gf_flat_list_dtype(const void *list, size_t i);     /* ONNX data type number */
int gf_flat_list_rank(const void *list, size_t i);
const int64_t *gf_flat_list_dims(const void *list, size_t i);
const void *gf_flat_list_data(const void *list, size_t i); /* row-major */
size_t gf_flat_list_nbytes(const void *list, size_t i);
/* Frees a list the caller owns (gf_flat_tensor_load, gf_flat_trainer_weights);
 * never a session's outputs. */
void gf_flat_list_free(void *list);

/* A TensorProto file (.pb, the ONNX test data layout) as a one-entry list. */
int gf_flat_tensor_load(const char *path, void **list);

/* ---- sessions: run a model ------------------------------------------------ */

/* Loads `path` and opens a session on it.  backend: "cpu", "opencl", "cuda",
 * "auto" or NULL ($GRAPHFUSE_BACKEND, else auto); precision: "fp32", "tf32",
 * "bf16", "fp16" or NULL (the autocast pass, docs/precision.md); fuse: cleanup
 * and fusion first, as `graphfuse run --fuse`; n_threads 0: every core. */
int gf_flat_session_open(const char *path, const char *backend, const char *precision,
                         int fuse, int n_threads, void **session);
void gf_flat_session_close(void *session);
/* Inputs that need a tensor at run time, in graph order; a symbolic or
 * unknown dimension is -1 (dims valid while the session lives). */
size_t gf_flat_session_input_count(const void *session);
const char *gf_flat_session_input_name(const void *session, size_t i);
int gf_flat_session_input_dtype(const void *session, size_t i);
int gf_flat_session_input_rank(const void *session, size_t i);
int64_t gf_flat_session_input_dim(const void *session, size_t i, int d);
/* Runs the model on n inputs given by name (each input once, all of them);
 * dims holds ranks[0] dims of the first, then those of the second, ...;
 * the data is read during the call only. */
int gf_flat_session_run(void *session, size_t n, const char *const *names, const int *dtypes,
                        const int *ranks, const int64_t *dims, const void *const *data);
/* The outputs of the last run, in graph order: owned by the session, valid
 * until its next run or close. */
const void *gf_flat_session_outputs(const void *session);
/* The backend it runs on ("cpu", ...), after "auto" was resolved. */
const char *gf_flat_session_backend(const void *session);

/* ---- optimize and dump ---------------------------------------------------- */

/* `graphfuse optimize SRC -o DST`: cleanup and fusion for target
 * ("graphfuse", "ort", "onnx"; NULL: graphfuse), after the precision pass
 * (NULL: fp32); disable: comma-separated patterns left out (NULL: none).
 * *report (when not NULL) receives the optimize report, JSON when json != 0,
 * else text; free it with gf_flat_free. */
int gf_flat_optimize(const char *src, const char *dst, const char *target,
                     const char *precision, const char *disable, int json, char **report);
/* `graphfuse dump PATH --format FORMAT` ("text", "dot", "json") into *text. */
int gf_flat_dump(const char *path, const char *format, char **text);

/* ---- training ----------------------------------------------------------------- */

/* `graphfuse train PATH`'s options as n (key, value) strings, keys spelled as
 * the CLI's without the dashes, '-' or '_' alike: data or tokens (+ batch,
 * seq, seed, token_bytes), optimizer, lr, momentum, dampening, nesterov,
 * beta1, beta2, eps, weight_decay, schedule, warmup, min_lr, steps,
 * clip_grad_norm, accumulate, loss, trainable, freeze, untie, fuse (1/0),
 * no_tie, disable, precision, loss_scale, loss_scale_window, backend,
 * device, threads, max_memory (bytes), resume (a checkpoint).  The CLI's
 * defaults (100 steps, fused).  An unknown key or a bad value is GF_ERR_ARG
 * naming it. */
int gf_flat_trainer_open(const char *path, size_t n, const char *const *keys,
                         const char *const *values, void **trainer);
void gf_flat_trainer_close(void *trainer);
/* Steps taken so far, and the total asked for (steps). */
int64_t gf_flat_trainer_step_count(const void *trainer);
int64_t gf_flat_trainer_total_steps(const void *trainer);

/* The numbers of one step, by index into the array gf_flat_trainer_step fills. */
enum gf_flat_stat {
    GF_FLAT_STAT_STEP,       /* 0-based index of the step */
    GF_FLAT_STAT_LOSS,       /* mean loss of its micro-batches, before the update */
    GF_FLAT_STAT_GRAD_NORM,  /* global gradient norm, before clipping */
    GF_FLAT_STAT_LR,
    GF_FLAT_STAT_MS,         /* wall time of the step */
    GF_FLAT_STAT_TOKENS,
    GF_FLAT_STAT_DIVERGED,   /* 1: NaN/Inf, nothing updated (the call fails too) */
    GF_FLAT_STAT_LOSS_SCALE, /* fp16 loss scaling; 0: none */
    GF_FLAT_STAT_SKIPPED,    /* fp16: 1 when the step was skipped */
    GF_FLAT_STAT_N_SKIPPED,
    GF_FLAT_STAT_COUNT
};
/* One optimizer step; stats[GF_FLAT_STAT_COUNT] receives its numbers. */
int gf_flat_trainer_step(void *trainer, double *stats);
/* The trained model's float initializers as a new list: torch_names != 0,
 * the parameters under their PyTorch names in PyTorch's layout (as
 * `graphfuse export-weights` writes them); else every initializer the
 * trainer updates, under its ONNX name and as stored. */
int gf_flat_trainer_weights(const void *trainer, int torch_names, void **list);
/* The model with the trained weights (train -o), and the parameters as a
 * safetensors file by PyTorch name (train --save-safetensors). */
int gf_flat_trainer_save(const void *trainer, const char *path);
int gf_flat_trainer_save_safetensors(const void *trainer, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* GF_FLAT_H */
