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
#include "gf_passes.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gf_exec_opts {
    const char *backend; /* "cpu", "opencl", "auto"; NULL: $GRAPHFUSE_BACKEND, else "auto" */
    const char *device;  /* device name (a substring of it); NULL: the backend's default */
    int n_threads;       /* 0: every core */
    bool profile;        /* time each op type */
    size_t max_memory;   /* bytes of activations, workspace (CPU: outputs) allowed; 0: none */
    bool check_finite;   /* after each node, a NaN or Inf in a float output fails the
                            run naming node, op and output (slow: for diagnosis) */
    const char *tune_cache; /* autotune cache (gf_tune.h) for nodes with a choice of
                               kernels or knob values; NULL: the default file; "": none */
    bool autotune;       /* tune nodes the cache lacks while planning, and save them */
    bool no_cuda_graph;  /* never capture runs as CUDA Graphs (also
                            GRAPHFUSE_NO_CUDA_GRAPH=1): every node launched one by one,
                            for debugging; see "CUDA Graphs" below */
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
 * graph output, in order) belong to the session until the next run ends;
 * an output may be given back as an input of the next run.  (On the CPU
 * the nodes write them in place: the tensors of one plan are the same run
 * after run.)
 *
 * CUDA Graphs: on a backend that can capture (CUDA), the first run of a
 * plan launches node by node, the second captures the kernel launches
 * (nothing may allocate or wait then; lazily made resources exist by then)
 * and replays them, later runs with the same plan only copy the inputs in,
 * replay and copy the outputs out.  Nodes that must run on the host each
 * time stay outside the graphs, between them: nodes run on the CPU, and
 * nodes whose kernel is handed a host copy of a value that changes between
 * runs (a graph input the plan is not keyed on, e.g. token ids read for an
 * index check).  A node whose capture fails (its kernel synchronizes or
 * copies host memory) runs outside from then on, and the next run captures
 * again.  Off with opts.no_cuda_graph, GRAPHFUSE_NO_CUDA_GRAPH=1 or
 * opts.check_finite; gf_session_print_profile says what was replayed. */
enum gf_status gf_session_run(struct gf_session *s, size_t n_inputs,
                              struct gf_tensor *const *inputs, struct gf_tensor ***outputs,
                              size_t *n_outputs);

/* Plans the graph for these inputs (checked as gf_session_run checks
 * them) without running it; gf_session_run plans the same way, again only
 * when the input shapes (or shape-deciding input values) change. */
enum gf_status gf_session_plan(struct gf_session *s, size_t n_inputs,
                               struct gf_tensor *const *inputs);

/* Memory figures of the last plan. */
struct gf_session_stats {
    size_t activation_bytes;   /* the planned block */
    size_t intermediate_bytes; /* sum of every intermediate tensor's size */
    size_t workspace_bytes;
    size_t n_nodes;
    size_t n_choice;           /* nodes the autotuner has a choice for (kernels or knob
                                  values of the backend, or a CPU kernel it cached) */
    size_t n_tuned;            /* of those, run with the cache's or the autotuner's pick */
    size_t n_views;            /* Reshape, Flatten, Squeeze, Unsqueeze, Identity nodes whose
                                  output aliases their input's bytes (no kernel runs) */
};
void gf_session_get_stats(const struct gf_session *s, struct gf_session_stats *st);
/* Time per op type and memory of the last run (with opts.profile); the
 * captured part of a run is one entry per graph replayed ("CUDA graph"),
 * timed as a whole, and one line says what ran inside and outside graphs. */
void gf_session_print_profile(const struct gf_session *s, FILE *f);
/* On a device backend, the nodes of the plan that run on the CPU because
 * the backend has no kernel for them: one line per op type with a count,
 * nothing when there are none.  Returns how many nodes. */
size_t gf_session_print_fallbacks(const struct gf_session *s, FILE *f);
/* Autotuning of the last plan: the cache's warnings, a failure to tune or
 * save, and how many nodes use tuned kernels; one line each, nothing when
 * no node had a choice.  Returns the number of lines. */
size_t gf_session_print_tuning(const struct gf_session *s, FILE *f);
/* The backend the session runs on (after "auto" was resolved). */
const char *gf_session_backend(const struct gf_session *s);
/* The name of the device it runs on ("host" for the CPU). */
const char *gf_session_device(const struct gf_session *s);

/* Evaluates node n on constant inputs with CPU kernels (a gf_eval_fn: see gf_passes.h). */
enum gf_status gf_exec_eval_node(struct gf_model *m, const struct gf_node *n,
                                 struct gf_tensor *const *in, struct gf_tensor **out);

/* Compares a tensor with an expected one: same dtype and shape, and
 * |got - want| <= atol + rtol * |want| everywhere (NaN matches NaN).
 * *worst receives the largest absolute error. */
bool gf_tensor_allclose(const struct gf_tensor *got, const struct gf_tensor *want,
                        double rtol, double atol, double *worst);

/* ---- training -----------------------------------------------------------------
 *
 *     struct gf_trainer_opts to;
 *     gf_trainer_opts_init(&to, GF_OPTIM_ADAMW);
 *     to.steps = 100;
 *     struct gf_trainer *t;
 *     struct gf_data *d;
 *     if (gf_trainer_new(model, &to, &t) != GF_OK ||
 *         gf_data_open_dir(t, "train_data", &d) != GF_OK) ...
 *     for (int64_t i = gf_trainer_get_step(t); i < to.steps; i++) {
 *         struct gf_train_stats st;
 *         if (gf_trainer_step(t, d, &st) != GF_OK) ...   // st.diverged: NaN/Inf
 *         printf("%lld %.6f\n", (long long)st.step, st.loss);
 *     }
 *     gf_trainer_save(t, "trained.onnx");
 *     gf_data_free(d);
 *     gf_trainer_free(t);
 *
 * The trainer differentiates a copy of the model (gf_pass_autodiff), runs
 * forward and backward in one session, and updates the parameters in
 * place (initializers that are graph inputs: variables of the session).
 * Parameters, gradients and optimizer state stay on the session's backend
 * for the whole run; the optimizer, clipping and the NaN/Inf check are
 * kernels there (the optimizer ops of graph/ops.def), and a step copies
 * only the batch in and the loss and gradient norm out.  On CUDA, with one
 * micro-batch, the whole step (forward, backward, the optimizer) is one
 * CUDA graph replayed per step (executor/train.c).  The host copies
 * of the weights are brought up to date when read (gf_trainer_get_param,
 * exports, checkpoints).  Optimizer formulas are torch.optim's, in fp32
 * with fp32 state; see README.md, "Training". */

enum gf_optim_kind {
    GF_OPTIM_SGD,   /* torch.optim.SGD: momentum, dampening, nesterov, L2 weight decay */
    GF_OPTIM_ADAMW, /* torch.optim.AdamW: decoupled weight decay, bias correction */
};

struct gf_optim_opts {
    enum gf_optim_kind kind;
    double lr;                /* peak learning rate (the schedule scales it) */
    double weight_decay;      /* SGD: g += wd * p; AdamW: p *= 1 - lr * wd */
    double momentum;          /* SGD; 0: none */
    double dampening;         /* SGD */
    bool nesterov;            /* SGD; needs momentum > 0 and dampening 0 */
    double beta1, beta2, eps; /* AdamW */
};

/* torch's defaults for `kind` (SGD: lr 1e-3, no momentum, no decay; AdamW:
 * lr 1e-3, betas 0.9 / 0.999, eps 1e-8, weight decay 0.01). */
void gf_optim_opts_init(struct gf_optim_opts *o, enum gf_optim_kind kind);

/* Optimizer state for n fp32 tensors of sizes[i] elements, allocated once
 * (zeroed).  GF_ERR_ARG names a bad hyper-parameter. */
struct gf_optim;
enum gf_status gf_optim_new(const struct gf_optim_opts *o, size_t n, const size_t *sizes,
                            struct gf_optim **out);
void gf_optim_free(struct gf_optim *o);
/* One update of every tensor: params[i] (sizes[i] floats) from grads[i],
 * at learning rate lr; counts the step. */
void gf_optim_step(struct gf_optim *o, float *const *params, const float *const *grads,
                   double lr);
/* Steps taken (AdamW's t; SGD's momentum buffer exists once it is > 0). */
int64_t gf_optim_get_step(const struct gf_optim *o);
void gf_optim_set_step(struct gf_optim *o, int64_t step);
/* State buffers per tensor, with torch's names: SGD with momentum
 * "momentum_buffer"; AdamW "exp_avg", "exp_avg_sq"; plain SGD none. */
size_t gf_optim_state_count(const struct gf_optim *o);
const char *gf_optim_state_name(const struct gf_optim *o, size_t k);
/* State buffer k of tensor i (sizes[i] floats, writable). */
float *gf_optim_get_state(struct gf_optim *o, size_t i, size_t k);
/* "sgd" / "adamw" and back (false: unknown name). */
const char *gf_optim_name(enum gf_optim_kind kind);
bool gf_optim_parse(const char *name, enum gf_optim_kind *kind);

/* torch.nn.utils.clip_grad_norm_'s coefficient for a global gradient norm
 * (the GradNorm op's): min(1, max_norm / (norm + 1e-6)) in float; 1 when
 * max_norm <= 0 (no clipping).  The trainer passes it to the update as its
 * grad_scale, so the gradients are never rescaled on their own. */
float gf_clip_coef(double max_norm, double norm);

enum gf_lr_schedule {
    GF_LR_CONSTANT, /* lr after the warmup */
    GF_LR_COSINE,   /* cosine from lr down to min_lr over the steps after the warmup */
};
/* Learning rate of 0-based step s of `total`: s < warmup: lr * (s+1) / warmup;
 * then constant lr, or min_lr + (lr - min_lr) * (1 + cos(pi * (s - warmup) /
 * (total - warmup))) / 2. */
double gf_lr_at(enum gf_lr_schedule kind, double lr, double min_lr, int64_t warmup,
                int64_t total, int64_t s);

struct gf_trainer_opts {
    struct gf_exec_opts exec;    /* backend, threads, memory limit */
    struct gf_optim_opts optim;
    enum gf_lr_schedule schedule;
    int64_t warmup;              /* steps of linear warmup; 0: none */
    int64_t steps;               /* total steps (the cosine reaches min_lr there) */
    double min_lr;               /* cosine floor */
    double clip_grad_norm;       /* 0: no clipping (the norm is still reported) */
    int accumulate;              /* micro-batches per step (0: 1); gradient = their mean */
    const char *loss;            /* output to minimize; NULL: "loss", else the only
                                    scalar float output */
    const char *trainable;       /* POSIX extended regex: only initializers it matches;
                                    NULL: every float initializer of 2+ elements */
    const char *freeze;          /* regex: initializers kept fixed (after trainable) */
    bool fuse;                   /* cleanup + gf_pass_fuse before autodiff (left out,
                                    see gf_trainer_fuse_note, when autodiff lacks a
                                    rule for a fused op) */
    bool no_tie;                 /* keep copies of one tensor (tied weights) apart */
    const char *disable;         /* comma-separated fusion patterns left out (with fuse) */
    const char *untie;           /* "all": give every use of a parameter the exporter
                                    may have merged its own copy (gf_params_untie);
                                    else a comma-separated list of initializer names */
    bool differentiated;         /* the model already outputs "<param>_grad" for its
                                    parameters (graph inputs with an initializer) */
    enum gf_precision precision; /* gf_pass_precision on the trainer's copy of the model,
                                    before fusion and autodiff; exports and checkpoints
                                    keep the caller's graph (docs/precision.md) */
    double loss_scale;           /* fp16: GradScaler's initial scale S (0: 65536); the
                                    loss is multiplied by S before the backward, the
                                    gradient divided by it; a step whose gradient is not
                                    finite is skipped and S halved */
    int64_t loss_scale_window;   /* fp16: good steps after which S doubles (0: 2000) */
};
/* Defaults: torch's optimizer defaults for `kind`, constant schedule, 1
 * step, no clipping, one micro-batch, no fusion. */
void gf_trainer_opts_init(struct gf_trainer_opts *o, enum gf_optim_kind kind);

struct gf_trainer;
struct gf_data;

/* A trainer for model m (copied: m is not changed and may be freed).
 * GF_ERR_ARG: bad options (regex, hyper-parameters); GF_ERR_INVALID: no
 * loss output, no trainable parameter; GF_ERR_UNSUPPORTED: an op without a
 * gradient rule or kernel, named. */
enum gf_status gf_trainer_new(const struct gf_model *m, const struct gf_trainer_opts *o,
                              struct gf_trainer **out);
void gf_trainer_free(struct gf_trainer *t);

/* Inputs one micro-batch feeds, in order (graph inputs without initializer). */
size_t gf_trainer_input_count(const struct gf_trainer *t);
const struct gf_value *gf_trainer_input(const struct gf_trainer *t, size_t i);

/* Trained initializers.  A tied copy (same values as another, or their
 * transpose) gets no state of its own: its gradient is added to its
 * master's and it is rewritten from the master after each update. */
struct gf_param_info {
    const char *name;
    size_t nelem;
    const char *tied_to;  /* master's name, or NULL */
    bool transposed;      /* the copy holds the master's transpose */
    float *data;          /* current values (on a device backend downloaded by this call
                             when the device's are newer) */
};
size_t gf_trainer_param_count(const struct gf_trainer *t);
/* Every float initializer of the training model's forward graph as
 * gf_params_classify sees it (after --untie), file order; whether it is
 * trained (the classification, or --trainable, then --freeze). */
size_t gf_trainer_class_count(const struct gf_trainer *t);
const struct gf_param_class *gf_trainer_class(const struct gf_trainer *t, size_t i);
enum gf_param_kind gf_trainer_param_kind(const struct gf_trainer *t, const char *name);
bool gf_trainer_is_trained(const struct gf_trainer *t, const char *name);
void gf_trainer_get_param(const struct gf_trainer *t, size_t i, struct gf_param_info *p);
/* Name of the loss output the trainer minimizes. */
const char *gf_trainer_loss_name(const struct gf_trainer *t);
/* With opts.fuse: NULL when the training graph is fused; else why fusion
 * was left out (a fused op without a gradient rule): training is unfused. */
const char *gf_trainer_fuse_note(const struct gf_trainer *t);

struct gf_train_stats {
    int64_t step;      /* 0-based index of the step just taken */
    double loss;       /* mean loss of its micro-batches, before the update */
    double grad_norm;  /* global L2 norm of the gradient, before clipping */
    double lr;         /* learning rate of the update */
    double ms;         /* wall time of the step */
    size_t tokens;     /* tokens (or samples) in the step: gf_data_tokens * accumulate */
    bool diverged;     /* NaN or Inf in the loss or a gradient: nothing was updated and
                          the error names the first node that produced one */
    double loss_scale; /* fp16: the loss scale S of this step (0: no scaling) */
    bool skipped;      /* fp16: the scaled gradient was not finite: nothing was updated
                          (grad_norm is that gradient's), S halved for the next step */
    int64_t n_skipped; /* fp16: steps skipped so far, this one included */
};
/* One optimizer step on the next `accumulate` micro-batches of d. */
enum gf_status gf_trainer_step(struct gf_trainer *t, struct gf_data *d,
                               struct gf_train_stats *st);
/* Steps taken so far (restored by a checkpoint). */
int64_t gf_trainer_get_step(const struct gf_trainer *t);
/* The session profile of the last micro-batch (exec.profile) and its memory:
 * the planned activation block holds forward and backward values; then one
 * line on the last step: "train profile: step S: T ms, kernels K ms (graph
 * G, optimizer O), outside kernels X ms (P%); copied host->device B bytes
 * (batch N), device->host D bytes" (kernels: each node and optimizer
 * kernel, synchronized after it; outside: the host's time around them). */
void gf_trainer_print_profile(const struct gf_trainer *t, FILE *f);
/* The backend the trainer runs on, the nodes that ran on the CPU because it
 * has no kernel for them (gf_session_print_fallbacks) and the autotuning
 * notes (gf_session_print_tuning), as lines of f; nothing before the first
 * step. */
void gf_trainer_print_backend(const struct gf_trainer *t, FILE *f);
/* The training graph as the trainer's session runs it: the forward (fused
 * when asked, in the trainer's precision) and the backward, the gradients
 * among its outputs.  Owned by the trainer. */
const struct gf_model *gf_trainer_model(const struct gf_trainer *t);

/* Writes the original model (forward graph) with the trained weights,
 * atomically. */
enum gf_status gf_trainer_save(const struct gf_trainer *t, const char *path);
/* The same model in memory (the caller frees it with gf_model_free). */
enum gf_status gf_trainer_export(const struct gf_trainer *t, struct gf_model **out);
/* Checkpoint: the same model plus initializers holding the optimizer
 * state ("graphfuse.optim.<state>.<param>") and an int64 tensor
 * "graphfuse.train.state" (format version, step, optimizer, data cursor,
 * random state); written atomically.  Loading it into a trainer built
 * with the same options continues bit for bit. */
enum gf_status gf_trainer_save_checkpoint(const struct gf_trainer *t, const struct gf_data *d,
                                          const char *path);
enum gf_status gf_trainer_load_checkpoint(struct gf_trainer *t, struct gf_data *d,
                                          const char *path);

/* Batches from a folder in the ONNX test layout: input_*.pb (one batch) or
 * test_data_set_*\/input_*.pb (one batch per folder, cycled in numeric
 * order).  Tensors feed t's inputs by name, else by position. */
enum gf_status gf_data_open_dir(const struct gf_trainer *t, const char *dir,
                                struct gf_data **out);

struct gf_token_opts {
    int token_bytes;   /* 2 (uint16) or 4 (uint32); 0: 2 if the vocabulary fits */
    int64_t vocab;     /* 0: from the model (embedding rows or logits width) */
    int64_t batch, seq;
    uint64_t seed;
};
/* Random windows of a flat token file: each micro-batch is `batch` rows
 * of `seq` consecutive tokens starting at random offsets; every input
 * (input_ids and labels: the model shifts labels itself) gets the rows. */
enum gf_status gf_data_open_tokens(const struct gf_trainer *t, const char *path,
                                   const struct gf_token_opts *o, struct gf_data **out);
void gf_data_free(struct gf_data *d);
/* The next micro-batch: (*in)[i] feeds gf_trainer_input(t, i); owned by d
 * until the next call. */
enum gf_status gf_data_next(struct gf_data *d, struct gf_tensor *const **in);
/* Tokens per micro-batch (batch * seq; for folders the elements of the
 * first integer input, else the first input's leading dim). */
size_t gf_data_tokens(const struct gf_data *d);
/* One line saying what was loaded ("4 batches from DIR", "N tokens ..."). */
const char *gf_data_describe(const struct gf_data *d);

/* ---- weights back to PyTorch ---------------------------------------------------
 *
 *     struct gf_weights *w;
 *     if (gf_weights_map(model, &w) != GF_OK) ...   // torch names and layouts
 *     size_t bytes;
 *     if (gf_weights_save_safetensors(w, "model.safetensors", &bytes) != GF_OK) ...
 *     gf_weights_free(w);
 *
 * Exporters rename and fold parameters ("onnx::MatMul_599", "val_129": a
 * Linear weight stored transposed).  The map finds each parameter's torch
 * name from the graph: the initializer's own name when it is a parameter
 * path, else the module of the nodes reading it (legacy node names,
 * dynamo's node metadata_props and graph signature) with the op's role
 * (MatMul's B: a Linear weight, written back as [out, in]).  The file then
 * loads with safetensors.torch.load_file + model.load_state_dict. */

struct gf_weights;

struct gf_weight_info {
    const char *torch_name;    /* "model.layers.0.self_attn.q_proj.weight" */
    const char *onnx_name;     /* the initializer holding it */
    const struct gf_tensor *t; /* its data (borrowed from the model) */
    bool transposed;           /* t is the parameter transposed (2-D): written [out, in] */
};

/* Maps the float initializers of m's main graph (borrowed: keep m alive) to
 * torch parameters.  One initializer may stand for several (merged equal
 * values, tied weights); checkpoint state (graphfuse.optim.*,
 * graphfuse.train.*) is left out.  GF_ERR_INVALID when none is found. */
enum gf_status gf_weights_map(const struct gf_model *m, struct gf_weights **out);
void gf_weights_free(struct gf_weights *w);
/* The parameters found, sorted by torch name. */
size_t gf_weights_count(const struct gf_weights *w);
void gf_weights_get(const struct gf_weights *w, size_t i, struct gf_weight_info *out);
/* Float initializers that stand for no parameter (folded masks, RoPE tables,
 * buffers, scalars), in file order. */
size_t gf_weights_skipped_count(const struct gf_weights *w);
const char *gf_weights_get_skipped(const struct gf_weights *w, size_t i);
/* Parameters of the exported program (dynamo's graph signature) that no
 * initializer holds, so none is written: folded into a constant (a position
 * table sliced for a static shape, Gemma's 1 + weight), dropped (a zero
 * bias), or a tied name the graph reads under another. */
size_t gf_weights_unread_count(const struct gf_weights *w);
const char *gf_weights_get_unread(const struct gf_weights *w, size_t i);
/* Initializers holding parameters that are written from another one (a tied
 * or folded copy of a parameter that has its own initializer). */
size_t gf_weights_copy_count(const struct gf_weights *w);
/* Checkpoint state initializers left out. */
size_t gf_weights_state_count(const struct gf_weights *w);
/* Writes every parameter of w, by torch name, in torch layout, to a
 * safetensors file (atomically); *bytes (if not NULL) gets its size. */
enum gf_status gf_weights_save_safetensors(const struct gf_weights *w, const char *path,
                                           size_t *bytes);

/* One tensor for gf_safetensors_write. */
struct gf_safetensor {
    const char *name;
    enum gf_dtype dtype;   /* F32, F16, BF16, F64, I/U 8..64, BOOL, F8 E4M3 / E5M2 */
    int rank;
    const int64_t *dims;   /* of data as it is */
    const void *data;      /* little-endian, row-major */
    bool transpose;        /* 2-D: write the transpose, shape [dims[1], dims[0]] */
};
/* Writes a safetensors file atomically (temp file in the same folder, fsync,
 * rename): the 8-byte little-endian header length, the JSON header
 * (meta[] as "__metadata__"; padded with spaces to a multiple of 8), the
 * data (largest elements first, so each tensor is aligned).  *bytes (if not
 * NULL) gets the file size.  GF_ERR_ARG: a duplicate or empty name;
 * GF_ERR_UNSUPPORTED: a type safetensors lacks. */
enum gf_status gf_safetensors_write(const char *path, size_t n, const struct gf_safetensor *t,
                                    size_t n_meta, const struct gf_kv *meta, size_t *bytes);

#ifdef __cplusplus
}
#endif
#endif /* GF_EXEC_H */
