/*
 * Sessions: plan (shapes, kernels, memory) once per set of input shapes,
 * then dispatch node by node.
 *
 * Memory: every intermediate value gets an offset in one activation block.
 * Values are placed in order of definition; a value's bytes return to a
 * free list after its last use, and later values take the best-fitting free
 * range (ggml-alloc and llm.c do the same).  An elementwise op whose input
 * dies at that op writes its output over the input (in place).
 *
 * Views: Reshape, Flatten, Squeeze, Unsqueeze and Identity of an
 * intermediate run no kernel: their output is the input's bytes (same
 * offset; on a device a sub-buffer of the same range), whatever the
 * backend.  Values sharing bytes form a group whose bytes stay taken until
 * the last use of any member, so a value's bytes outlive it while a view
 * of it is read, and an in-place writer may take them only where the
 * whole group dies (and reads them through one input only).  A view of a
 * graph input, initializer or constant, and a view bound to the caller's
 * memory (gf_session_bind_output), are copied as before.
 *
 * Backends: on a device backend (OpenCL) the block lives on the device and
 * each intermediate is a view of it (a sub-buffer); initializers, folded
 * constants and graph inputs are uploaded to device buffers of their own,
 * so a run never goes back to the host between nodes.  Constant folding
 * always runs on the CPU while planning.  A node the backend has no kernel
 * for runs on the CPU: its inputs are copied to a host staging area and its
 * outputs back; gf_session_print_fallbacks lists such nodes.
 *
 * Autotuning: after folding, each step left to run whose backend has a
 * choice for it (rival kernels or knob values; on a device also a single
 * kernel that CPU kernels may have beaten) is looked up in the cache with
 * the views step_views gives.  gf_session_tune_site hands `graphfuse
 * tune` the same steps with the same views, after the same planning, so
 * tuning and running key the cache identically.
 *
 * The trainer keeps parameters and gradients on the device: it binds each
 * parameter to its own memory (gf_session_bind_param: never uploaded) and
 * has the gradient outputs written where it wants them
 * (gf_session_bind_output: V_EXT values, outside the block, not copied
 * back), so a training run copies only the batch in and the loss out.
 *
 * CUDA Graphs (a backend with capture ops): the first run of a plan
 * launches node by node (so that whatever a kernel makes on first use
 * exists), the second captures the launches of each range of steps that
 * may be replayed (gf_capture_segments) and launches the graphs, later runs
 * replay them.  Every address a kernel sees is fixed per plan (the block,
 * the workspace, uploaded inputs, bound memory), so a replay only needs the
 * inputs copied in first (upload_inputs, outside any graph) and the outputs
 * read after.  Steps run outside the graphs, between them: CPU steps, and
 * steps whose kernel is handed a host copy of a value that changes between
 * runs (host_changes).  A capture that fails (a kernel synchronized or
 * copied host memory: the backend refuses it) ran nothing: its range runs
 * node by node, the failing step stays outside from then on, and the next
 * run captures again (at most MAX_CAPTURE_TRIES times per plan).
 *
 * Deferred checks (a backend with checks_begin: CUDA): each run is one
 * checks_begin ... checks_end, and the first bad index or label a kernel
 * found on the device is reported after the run's final synchronization
 * (checks_report).  A device step reading an input whose host copy changes
 * between runs is handed no host copy where its kernel supports the node
 * without one (find_hidden_hosts): it then checks on the device, nothing
 * waits, and the step is captured like any other.
 *
 * The epilogue (gf_session_set_epilogue: the trainer's optimizer) runs
 * after the last node of every run: captured into the plan's last graph
 * when that graph ends the plan, else launched after the last node.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_priv.h"
#include "gf_tune.h"

#define ALIGN 64
#define MAX_CAPTURE_TRIES 4 /* failed captures before a plan runs node by node */
#define MIN_GRAPH_STEPS 2   /* fewer steps between two outside a graph: launched directly */

/* V_CONST: computed while planning (a shape computation that inference
 * resolved, or a node whose inputs are all constant); data in s->consts.
 * V_EXT: a node's output written into memory the caller bound
 * (gf_session_bind_output), not into the block. */
enum vkind { V_NONE, V_INIT, V_INPUT, V_ACT, V_CONST, V_EXT };

struct vinfo {
    enum vkind kind;
    enum gf_dtype dtype;
    int rank;
    int64_t dims[GF_MAX_RANK];
    size_t nelem, bytes;
    int def, last;   /* step that writes it, last step that reads it */
    int end;         /* last, kept (the walk in assign_memory spoils last) */
    int64_t root;    /* the value whose bytes it shares (in place), else its own id */
    size_t offset;   /* V_ACT: into the block */
    void *data;      /* host bytes: V_INIT / V_INPUT / V_CONST */
    void *dev;       /* backend memory (the CPU: the same as data, or block + offset) */
    bool dev_owned;  /* dev came from be->alloc (else a view, or host memory) */
    bool on_device;  /* a device step reads it: uploaded (device backends) */
    bool ext;        /* dev is the caller's (a bound parameter or output): data, if
                        any, is no copy of it */
};

/* A parameter or graph output in memory of the caller's. */
struct binding {
    const struct gf_value *v; /* the parameter; NULL for an output */
    size_t out;               /* the output's index */
    void *dev;
    size_t bytes;             /* of dev */
};

struct step {
    struct gf_node *node;
    const struct gf_kernel *k;    /* the backend's kernel (the CPU's when on_cpu) */
    const struct gf_kernel *cpu;  /* the CPU kernel (folding, fallback) */
    const int *config;            /* knob values for k; NULL: defaults */
    bool folded; /* outputs computed while planning; not run */
    bool view;   /* its output aliases its input's bytes (find_views): not run */
    bool on_cpu; /* a device backend without a kernel for it: runs on the host */
    bool no_capture; /* its capture failed once: it runs outside the graphs */
    bool hide_host;  /* its kernel is not handed the host copies of inputs that change
                        from run to run (it checks them on the device, deferred) */
    const void *prepared; /* what k->prepare made of its fixed inputs (prepare_steps) */
    size_t cands; /* configurations of the backend's kernels for it (autotuning) */
    int tuned[GF_TUNE_MAX_KNOBS]; /* knob values the autotuner chose (config points here) */
};

/* A buffer holding a V_CONST value (a list, freed with the plan). */
struct cbuf {
    struct cbuf *next;
    int64_t value_id; /* value it holds, -1 while unassigned */
    size_t n;         /* known integer elements (shape values) */
    _Alignas(64) unsigned char data[];
};

struct gf_session {
    struct gf_model *m;
    struct gf_graph *g;
    struct gf_backend *be;
    struct gf_exec_opts o;
    size_t n_inputs;
    struct gf_value **inputs;
    struct binding *binds;
    size_t n_binds;
    /* plan */
    bool planned;
    int64_t *key; /* dtype, rank, dims of each input, and small int values */
    size_t key_len;
    struct vinfo *v;
    struct step *steps;
    size_t n_steps;
    uint8_t *block;
    size_t block_size, ws_size, intermediate_bytes;
    void *ws;
    /* device backends: host workspace and staging for CPU steps */
    bool device;
    size_t host_ws_size, stage_size;
    void *host_ws, *stage;
    size_t n_fallback;
    int peak_step; /* the step whose outputs set the block's size */
    struct cbuf *consts;
    size_t n_folded, const_bytes;
    size_t n_views; /* steps whose output aliases their input (step.view) */
    void *prepared;  /* the steps' prepared inputs (prepare_steps), one block */
    size_t prepared_bytes, n_prepared;
    /* outputs of the last run (reused by the next when they fit) */
    struct gf_model *outm;
    struct gf_tensor **outs;
    bool *out_bound;        /* outs[i] is a header over bound or own memory */
    /* host backends: the memory the plan's nodes write graph output i into
     * (own_outputs), NULL where the output is copied out after the run;
     * the last plan's until the run after it ends (its outputs may be this
     * run's inputs) */
    void **own, **own_old;
    size_t n_own, n_own_old;
    void **in_copy; /* inputs that lay in own memory, copied (n_inputs) */
    size_t own_bytes; /* counted in opts.max_memory with the block and workspace */
    /* profile of the last run */
    double op_ms[GF_OP_COUNT];
    int op_calls[GF_OP_COUNT];
    int op_views[GF_OP_COUNT]; /* view steps (no kernel) */
    double total_ms;
    struct gf_traffic traffic; /* host <-> device copies of the last run */
    /* autotuning (opts.tune_cache, opts.autotune): opened on the first node
     * with a choice; counts of the last plan */
    struct gf_tuner *tuner;
    bool tune_off;
    size_t n_choice;                    /* steps of the plan with a choice (step.choice) */
    size_t n_tuned_now, n_tuned_cached; /* nodes of the plan tuned now / from the cache */
    size_t n_tuned_run;                 /* entries tuned by every plan of the session */
    char tune_note[600];
    /* CUDA Graphs (the backend's capture ops) */
    const char *graph_off;   /* why runs never replay graphs (NULL: they may) */
    bool plan_off;           /* this plan's captures failed MAX_CAPTURE_TRIES times */
    int plan_runs;           /* runs of this plan so far */
    int capture_tries;       /* failed captures of this plan */
    char graph_why[600];     /* the last failed capture and why */
    bool segs_ready;         /* segs / graphs hold this plan's ranges */
    size_t n_segs;
    struct gf_capture_seg *segs;
    void **graphs;           /* per range: its executable graph, NULL until captured */
    size_t *graph_nodes;     /* per range: the backend's nodes in it */
    double graph_ms;         /* replays of the last run (timed with opts.profile) */
    int graph_calls;
    /* the epilogue (gf_session_set_epilogue) */
    enum gf_status (*epi_fn)(void *ctx);
    void *epi_ctx;
    bool epi_no_capture;     /* capturing it failed: it runs after the last node */
    bool epi_in_graph;       /* the plan's last graph holds it */
    double epi_ms;           /* its direct runs in the last run (timed with opts.profile) */
    int epi_calls;
};

/* ---- session ------------------------------------------------------------ */

enum gf_status gf_session_new(struct gf_model *m, const struct gf_exec_opts *o,
                              struct gf_session **out)
{
    *out = NULL;
    struct gf_backend *be = NULL;
    enum gf_status bst = gf_backend_open(o ? o->backend : NULL, o ? o->device : NULL, &be);
    if (bst != GF_OK)
        return bst;
    const struct gf_graph *g = m->graph;
    for (size_t i = 0; i < g->n_inputs + g->n_outputs; i++) {
        const struct gf_value *v = i < g->n_inputs ? g->inputs[i] : g->outputs[i - g->n_inputs];
        if (v->type.kind == GF_TYPE_OTHER)
            return gf_error(GF_ERR_UNSUPPORTED, "%s '%s' is a sequence, map or optional "
                            "value; only tensors are supported",
                            i < g->n_inputs ? "input" : "output", v->name);
    }
    struct gf_session *s = calloc(1, sizeof(*s));
    if (!s)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    s->m = m;
    s->g = m->graph;
    s->be = be;
    s->device = !be->host_memory;
    if (o)
        s->o = *o;
    if (s->o.n_threads <= 0)
        s->o.n_threads = be->n_threads;
    s->inputs = calloc(s->g->n_inputs + 1, sizeof(*s->inputs));
    if (!s->inputs) {
        free(s);
        return gf_error(GF_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < s->g->n_inputs; i++)
        if (!s->g->inputs[i]->init)
            s->inputs[s->n_inputs++] = s->g->inputs[i];
    s->graph_off = gf_capture_off_reason(&s->o, be->ops);
    *out = s;
    return GF_OK;
}

/* The plan's graphs and ranges (built again by the next run that replays). */
static void free_graphs(struct gf_session *s)
{
    for (size_t i = 0; s->graphs && i < s->n_segs; i++)
        if (s->graphs[i])
            s->be->ops->graph_free(s->be, s->graphs[i]);
    free(s->segs);
    free(s->graphs);
    free(s->graph_nodes);
    s->epi_in_graph = false;
    s->segs = NULL;
    s->graphs = NULL;
    s->graph_nodes = NULL;
    s->n_segs = 0;
    s->segs_ready = false;
}

static void free_own(void **own, size_t n)
{
    for (size_t i = 0; own && i < n; i++)
        free(own[i]);
    free(own);
}

static void drop_plan(struct gf_session *s)
{
    free_graphs(s);
    if (s->own) { /* kept until the next run ends: the outputs handed out may be its inputs */
        free_own(s->own_old, s->n_own_old);
        s->own_old = s->own, s->n_own_old = s->n_own;
        s->own = NULL, s->n_own = 0;
    }
    s->plan_off = s->epi_no_capture = false;
    s->plan_runs = s->capture_tries = 0;
    s->graph_why[0] = 0;
    for (size_t i = 0; s->device && s->v && i < s->g->n_values; i++) {
        struct vinfo *vi = &s->v[s->g->values[i]->id];
        if (vi->dev && vi->dev_owned)
            s->be->ops->release(s->be, vi->dev);
        else if (vi->dev && vi->kind == V_ACT && s->be->ops->view_release)
            s->be->ops->view_release(s->be, vi->dev);
    }
    if (s->block)
        s->be->ops->release(s->be, s->block);
    if (s->ws)
        s->be->ops->release(s->be, s->ws);
    free(s->host_ws);
    free(s->stage);
    free(s->prepared);
    s->prepared = NULL;
    s->prepared_bytes = s->n_prepared = 0;
    s->host_ws = s->stage = NULL;
    s->host_ws_size = s->stage_size = 0;
    s->n_fallback = 0;
    s->n_choice = s->n_tuned_now = s->n_tuned_cached = 0;
    while (s->consts) {
        struct cbuf *next = s->consts->next;
        free(s->consts);
        s->consts = next;
    }
    s->n_folded = s->const_bytes = s->n_views = 0;
    free(s->v);
    free(s->steps);
    free(s->key);
    s->block = NULL;
    s->ws = NULL;
    s->ws_size = 0;
    s->v = NULL;
    s->steps = NULL;
    s->key = NULL;
    s->planned = false;
}

void gf_session_free(struct gf_session *s)
{
    if (!s)
        return;
    drop_plan(s);
    if (s->be->ops->checks_release)
        s->be->ops->checks_release(s->be, s);
    gf_tuner_free(s->tuner);
    free_own(s->own_old, s->n_own_old);
    free_own(s->in_copy, s->n_inputs);
    gf_model_free(s->outm);
    free(s->binds);
    free(s->inputs);
    free(s);
}

struct gf_backend *gf_session_get_backend(const struct gf_session *s)
{
    return s->be;
}

static enum gf_status add_binding(struct gf_session *s, struct binding b)
{
    for (size_t i = 0; i < s->n_binds; i++)
        if (b.v ? s->binds[i].v == b.v : !s->binds[i].v && s->binds[i].out == b.out) {
            s->binds[i].dev = b.dev;
            s->planned = false; /* re-plan: the value moves */
            return GF_OK;
        }
    struct binding *nb = realloc(s->binds, (s->n_binds + 1) * sizeof(*nb));
    if (!nb)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    s->binds = nb;
    s->binds[s->n_binds++] = b;
    s->planned = false;
    return GF_OK;
}

enum gf_status gf_session_bind_param(struct gf_session *s, const struct gf_value *v, void *dev,
                                     size_t bytes)
{
    if (!v || !v->init || !v->is_input || v->graph != s->g || v->init->nbytes != bytes)
        return gf_error(GF_ERR_INTERNAL, "bind: '%s' is no parameter of %zu bytes of the "
                        "session's graph", v ? v->name : "?", bytes);
    return add_binding(s, (struct binding){v, 0, dev, bytes});
}

enum gf_status gf_session_bind_output(struct gf_session *s, size_t i, void *dev, size_t bytes)
{
    if (i >= s->g->n_outputs)
        return gf_error(GF_ERR_INTERNAL, "bind: no graph output %zu", i);
    return add_binding(s, (struct binding){NULL, i, dev, bytes});
}

void gf_session_last_run(const struct gf_session *s, struct gf_traffic *tr, double *kernel_ms,
                         double *total_ms)
{
    double k = s->graph_ms + s->epi_ms;
    for (int op = 0; op < GF_OP_COUNT; op++)
        k += s->op_ms[op];
    *tr = s->traffic;
    *kernel_ms = k;
    *total_ms = s->total_ms;
}

double gf_session_epilogue_ms(const struct gf_session *s)
{
    return s->epi_ms;
}

/* Host <-> device copies, counted for the profile. */
static enum gf_status to_device(struct gf_session *s, void *dst, const void *src, size_t n)
{
    s->traffic.h2d += s->device ? n : 0;
    return s->be->ops->copy_in(s->be, dst, src, n);
}

static enum gf_status to_host(struct gf_session *s, void *dst, const void *src, size_t n)
{
    s->traffic.d2h += s->device ? n : 0;
    return s->be->ops->copy_out(s->be, dst, src, n);
}

size_t gf_session_input_count(const struct gf_session *s)
{
    return s->n_inputs;
}

struct gf_value *gf_session_input(const struct gf_session *s, size_t i)
{
    return i < s->n_inputs ? s->inputs[i] : NULL;
}

void gf_session_get_stats(const struct gf_session *s, struct gf_session_stats *st)
{
    st->activation_bytes = s->block_size;
    st->intermediate_bytes = s->intermediate_bytes;
    st->workspace_bytes = s->ws_size;
    st->n_nodes = s->n_steps;
    st->n_choice = s->n_choice;
    st->n_tuned = s->n_tuned_now + s->n_tuned_cached;
    st->n_views = s->n_views;
}

/* ---- input checks ---------------------------------------------------------- */

/* An input nothing reads, or read only for its element type (CastLike's
 * `like`): its shape does not matter, so a shape that differs from the
 * declared one is let through (ONNX's own CastLike bfloat16 test data has
 * such inputs). */
static bool type_only(const struct gf_value *v)
{
    for (size_t u = 0; u < v->n_uses; u++)
        if (v->uses[u].node->op != GF_OP_CAST_LIKE || v->uses[u].slot != 1)
            return false;
    return true;
}

static enum gf_status check_input(const struct gf_value *v, const struct gf_tensor *t)
{
    const struct gf_type *ty = &v->type;
    /* bfloat16 data recorded as uint16 (as ONNX's own test data does) is
     * taken for what the model declares: same bits. */
    if (ty->dtype == GF_BFLOAT16 && t->dtype == GF_UINT16)
        ((struct gf_tensor *)t)->dtype = GF_BFLOAT16;
    if (ty->kind != GF_TYPE_TENSOR)
        return gf_error(GF_ERR_UNSUPPORTED, "input '%s' is not a tensor", v->name);
    if (ty->dtype != GF_UNDEFINED && ty->dtype != t->dtype)
        return gf_error(GF_ERR_INVALID, "input '%s' has type %s, the model expects %s",
                        v->name, gf_dtype_name(t->dtype), gf_dtype_name(ty->dtype));
    if (t->dtype == GF_STRING)
        return gf_error(GF_ERR_UNSUPPORTED, "input '%s': string tensors are not supported",
                        v->name);
    if (t->rank > GF_MAX_RANK)
        return gf_error(GF_ERR_UNSUPPORTED, "input '%s' has rank %d (limit %d)", v->name,
                        t->rank, GF_MAX_RANK);
    if (type_only(v))
        return GF_OK;
    if (ty->rank >= 0 && ty->rank != t->rank)
        return gf_error(GF_ERR_INVALID, "input '%s' has rank %d, the model expects %d",
                        v->name, t->rank, ty->rank);
    for (int i = 0; ty->rank >= 0 && i < ty->rank; i++)
        if (ty->dims[i].value >= 0 && ty->dims[i].value != t->dims[i])
            return gf_error(GF_ERR_INVALID, "input '%s' has size %lld on axis %d, the model "
                            "expects %lld", v->name, (long long)t->dims[i], i,
                            (long long)ty->dims[i].value);
    return GF_OK;
}

/* Symbolic dims with the same name must get the same size in every input. */
static enum gf_status check_symbols(struct gf_session *s, struct gf_tensor *const *in)
{
    for (size_t a = 0; a < s->n_inputs; a++) {
        const struct gf_type *ta = &s->inputs[a]->type;
        for (int i = 0; ta->rank > 0 && i < ta->rank; i++) {
            if (!ta->dims[i].param)
                continue;
            for (size_t b = 0; b <= a; b++) {
                const struct gf_type *tb = &s->inputs[b]->type;
                for (int j = 0; tb->rank > 0 && j < tb->rank; j++)
                    if (tb->dims[j].param && strcmp(tb->dims[j].param, ta->dims[i].param) == 0 &&
                        in[a]->dims[i] != in[b]->dims[j])
                        return gf_error(GF_ERR_INVALID, "inputs '%s' and '%s' give dimension "
                                        "'%s' two sizes (%lld and %lld)", s->inputs[b]->name,
                                        s->inputs[a]->name, ta->dims[i].param,
                                        (long long)in[b]->dims[j], (long long)in[a]->dims[i]);
            }
        }
    }
    return GF_OK;
}

/* ---- planning: shapes -------------------------------------------------------- */

/* Inputs whose values may decide shapes (small integer tensors). */
static bool is_shape_like(const struct gf_tensor *t)
{
    return (t->dtype == GF_INT64 || t->dtype == GF_INT32) && t->nelem <= 64;
}

static enum gf_status plan_key(struct gf_session *s, struct gf_tensor *const *in,
                               int64_t **key, size_t *len)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_inputs; i++)
        n += 2 + (size_t)in[i]->rank + (is_shape_like(in[i]) ? in[i]->nelem : 0);
    int64_t *k = malloc((n + 1) * sizeof(*k));
    if (!k)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    size_t p = 0;
    for (size_t i = 0; i < s->n_inputs; i++) {
        k[p++] = in[i]->dtype;
        k[p++] = in[i]->rank;
        for (int d = 0; d < in[i]->rank; d++)
            k[p++] = in[i]->dims[d];
        for (size_t e = 0; is_shape_like(in[i]) && e < in[i]->nelem; e++)
            k[p++] = gf_tensor_get_i64(in[i], e);
    }
    *key = k;
    *len = n;
    return GF_OK;
}

static struct cbuf *cbuf_new(struct gf_session *s, int64_t id, size_t bytes)
{
    /* struct cbuf is 64-byte aligned (its data): calloc only promises 16 */
    size_t size = (sizeof(struct cbuf) + bytes + ALIGN) & ~(size_t)(ALIGN - 1);
    struct cbuf *b = aligned_alloc(ALIGN, size);
    if (!b)
        return NULL;
    memset(b, 0, size);
    b->value_id = id;
    b->next = s->consts;
    s->consts = b;
    s->const_bytes += bytes;
    return b;
}

/* Shape inference found v's elements: keep them as int64 for now. */
static void record_known(void *ctx, const struct gf_value *v, size_t n, const int64_t *vals)
{
    struct gf_session *s = ctx;
    if (v->init) /* known already: a value evaluated while planning */
        return;
    struct cbuf *b = cbuf_new(s, v->id, n * sizeof(int64_t));
    if (!b)
        return; /* not fatal: the node then runs */
    b->n = n;
    memcpy(b->data, vals, n * sizeof(int64_t));
}

/* ---- planning: shape-deciding values evaluated while planning ----------------
 *
 * Shape inference follows small integer tensors of rank 0 and 1 (Shape ->
 * Gather -> Concat chains).  Exporters also build shape inputs through
 * other ops: Hugging Face's label shift computes Pad's pads as
 * ConstantOfShape -> Concat -> Reshape [-1, 2] -> Slice (step -1) ->
 * Transpose -> Reshape -> Cast.  When a value's shape stays unknown, the
 * session runs the CPU kernel of every small node whose inputs are all
 * known (constants, values inference found, values evaluated here), hands
 * the results to shape inference as initializers and infers again, until
 * every shape is known or nothing more can be evaluated. */

static enum gf_status host_workspace(struct gf_session *s, const struct gf_kernel *k,
                                     struct gf_kernel_args *a);

#define EVAL_LIMIT 65536 /* most elements of a node output evaluated this way */
#define EVAL_ROUNDS 16

struct known_set {
    struct gf_value **v; /* values given a temporary initializer */
    size_t n, cap;
};

/* A tensor header and its bytes in one session buffer (freed with the plan). */
static struct gf_tensor *temp_tensor(struct gf_session *s, const struct gf_value *v,
                                     const struct gf_type *ty, enum gf_dtype dt)
{
    size_t n = (size_t)gf_type_numel(ty), bytes = gf_dtype_bytes(dt, n);
    size_t head = (sizeof(struct gf_tensor) + GF_MAX_RANK * sizeof(int64_t) + ALIGN - 1) /
                  ALIGN * ALIGN;
    struct cbuf *b = cbuf_new(s, v->id, head + bytes);
    if (!b)
        return NULL;
    struct gf_tensor *t = (struct gf_tensor *)b->data;
    t->name = v->name;
    t->dtype = dt;
    t->rank = ty->rank;
    t->dims = (int64_t *)(b->data + sizeof(struct gf_tensor));
    for (int d = 0; d < ty->rank; d++)
        t->dims[d] = ty->dims[d].value;
    t->nelem = n;
    t->nbytes = bytes;
    t->data = b->data + head;
    return t;
}

static bool ks_add(struct known_set *k, struct gf_value *v, struct gf_tensor *t)
{
    if (k->n == k->cap) {
        size_t c = k->cap ? 2 * k->cap : 64;
        struct gf_value **p = realloc(k->v, c * sizeof(*p));
        if (!p)
            return false;
        k->v = p;
        k->cap = c;
    }
    k->v[k->n++] = v;
    v->init = t;
    return true;
}

/* Data the evaluator may read: a constant initializer, an input value the
 * plan is keyed on, or a value given one earlier. */
static bool has_data(const struct gf_session *s, const struct gf_value *v)
{
    if (!v->init || !v->init->data)
        return false;
    for (size_t i = 0; v->is_input && i < s->n_inputs; i++)
        if (s->inputs[i] == v)
            return true; /* fed, and small: the plan is keyed on its values */
    return !v->is_input; /* else a parameter: it changes between runs */
}

/* Values shape inference reported (record_known) become temporary
 * initializers too, in their own dtype. */
static enum gf_status adopt_reported(struct gf_session *s, struct known_set *k)
{
    for (struct cbuf *b = s->consts; b; b = b->next) {
        if (b->value_id < 0 || b->n == 0)
            continue;
        struct gf_value *v = s->g->values[b->value_id];
        if (v->init || v->type.kind != GF_TYPE_TENSOR || gf_type_numel(&v->type) != (int64_t)b->n)
            continue;
        enum gf_dtype dt = v->type.dtype == GF_INT32 ? GF_INT32 : GF_INT64;
        const int64_t *src = (const int64_t *)b->data;
        struct gf_tensor *t = temp_tensor(s, v, &v->type, dt);
        if (!t || !ks_add(k, v, t))
            return gf_error(GF_ERR_NOMEM, "out of memory planning");
        for (size_t i = 0; i < b->n; i++)
            if (dt == GF_INT32)
                ((int32_t *)t->data)[i] = (int32_t)src[i];
            else
                ((int64_t *)t->data)[i] = src[i];
    }
    return GF_OK;
}

static void view_tensor(const struct gf_tensor *t, struct gf_tview *v)
{
    memset(v, 0, sizeof(*v));
    v->dtype = t->dtype;
    v->rank = t->rank;
    if (t->rank > 0) /* a scalar's dims may be NULL */
        memcpy(v->dims, t->dims, (size_t)t->rank * sizeof(int64_t));
    v->nelem = t->nelem;
    v->data = t->data;
}

/* Whether node n can and should run now: every input known, some output
 * not, every output's type known and small. */
static bool evaluable(const struct gf_session *s, const struct gf_node *n)
{
    if (n->op == GF_OP_UNKNOWN || n->op == GF_OP_DROPOUT || n->n_inputs > 64 ||
        n->n_outputs > 64)
        return false;
    bool missing = false;
    for (size_t i = 0; i < n->n_inputs; i++)
        if (n->inputs[i] && !has_data(s, n->inputs[i]))
            return false;
    for (size_t o = 0; o < n->n_outputs; o++) {
        const struct gf_value *v = n->outputs[o];
        if (!v)
            continue;
        int64_t ne = gf_type_numel(&v->type);
        if (v->type.kind != GF_TYPE_TENSOR || ne < 0 || ne > EVAL_LIMIT ||
            v->type.dtype == GF_UNDEFINED || v->type.dtype == GF_STRING ||
            v->type.rank > GF_MAX_RANK)
            return false;
        missing |= !v->init;
    }
    return missing;
}

/* Some value computed by a node has a shape inference could not find. */
static bool shape_missing(const struct gf_graph *g)
{
    for (size_t i = 0; i < g->n_values; i++) {
        const struct gf_value *v = g->values[i];
        if (v->producer && (v->type.kind != GF_TYPE_TENSOR || gf_type_numel(&v->type) < 0 ||
                            v->type.dtype == GF_UNDEFINED))
            return true;
    }
    return false;
}

/* Runs every evaluable node once, in order; the number run. */
static enum gf_status eval_round(struct gf_session *s, struct known_set *k, size_t *done)
{
    struct gf_backend *cpu = gf_backend_get("cpu");
    struct gf_tview in[64], out[64];
    struct gf_tensor *tt[64];
    *done = 0;
    for (struct gf_node *n = s->g->first; n; n = n->next) {
        if (!evaluable(s, n))
            continue;
        for (size_t i = 0; i < n->n_inputs; i++)
            if (n->inputs[i])
                view_tensor(n->inputs[i]->init, &in[i]);
            else
                memset(&in[i], 0, sizeof(in[i]));
        const struct gf_kernel *kn = gf_kernel_find(cpu, n, in, n->n_inputs);
        if (!kn)
            continue; /* reported later, when kernels are chosen */
        for (size_t o = 0; o < n->n_outputs; o++) {
            struct gf_value *v = n->outputs[o];
            memset(&out[o], 0, sizeof(out[o]));
            if (!v)
                continue;
            if (!(tt[o] = temp_tensor(s, v, &v->type, v->type.dtype)))
                return gf_error(GF_ERR_NOMEM, "out of memory planning");
            view_tensor(tt[o], &out[o]);
        }
        struct gf_kernel_args a = {.node = n, .in = in, .n_in = n->n_inputs, .out = out,
                                   .n_out = n->n_outputs, .n_threads = 1, .backend = cpu};
        enum gf_status st = host_workspace(s, kn, &a);
        if (st == GF_OK)
            st = kn->run(&a);
        if (st != GF_OK)
            return st;
        for (size_t o = 0; o < n->n_outputs; o++)
            if (n->outputs[o] && !n->outputs[o]->init && !ks_add(k, n->outputs[o], tt[o]))
                return gf_error(GF_ERR_NOMEM, "out of memory planning");
        (*done)++;
    }
    return GF_OK;
}

/* Runs shape inference with the actual input shapes (and shape-like input
 * values visible as initializers), copies the concrete shapes into s->v,
 * and puts the model's own types back. */
static enum gf_status infer_concrete(struct gf_session *s, struct gf_tensor *const *in)
{
    struct gf_graph *g = s->g;
    struct gf_type *saved = malloc((g->n_values + 1) * sizeof(*saved));
    if (!saved)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < g->n_values; i++)
        saved[i] = g->values[i]->type;
    for (size_t i = 0; i < s->n_inputs; i++) {
        struct gf_dim dims[GF_MAX_RANK];
        for (int d = 0; d < in[i]->rank; d++)
            dims[d] = (struct gf_dim){in[i]->dims[d], NULL, NULL};
        gf_value_set_tensor_type(s->inputs[i], in[i]->dtype, in[i]->rank, dims);
        if (is_shape_like(in[i]))
            s->inputs[i]->init = in[i];
    }
    enum gf_status st = gf_graph_infer_shapes_values(g, record_known, s);
    struct known_set ks = {0};
    for (int round = 0; st == GF_OK && round < EVAL_ROUNDS && shape_missing(g); round++) {
        size_t done = 0;
        if ((st = adopt_reported(s, &ks)) == GF_OK)
            st = eval_round(s, &ks, &done);
        if (st != GF_OK || !done)
            break;
        st = gf_graph_infer_shapes_values(g, record_known, s);
    }
    for (size_t i = 0; i < ks.n; i++)
        ks.v[i]->init = NULL;
    free(ks.v);
    for (size_t i = 0; i < g->n_values && st == GF_OK; i++) {
        struct gf_value *v = g->values[i];
        struct vinfo *vi = &s->v[v->id];
        if (!v->producer && !v->init && !v->is_input)
            continue;
        int64_t n = gf_type_numel(&v->type);
        if (v->type.kind != GF_TYPE_TENSOR || n < 0 || v->type.dtype == GF_UNDEFINED) {
            if (v->producer)
                st = gf_error(GF_ERR_UNSUPPORTED, "cannot determine the shape of '%s' (output "
                              "of %s '%s') before running", v->name, v->producer->op_type,
                              v->producer->name ? v->producer->name : "");
            continue;
        }
        if (v->type.rank > GF_MAX_RANK) {
            st = gf_error(GF_ERR_UNSUPPORTED, "value '%s' has rank %d (limit %d)", v->name,
                          v->type.rank, GF_MAX_RANK);
            continue;
        }
        vi->dtype = v->type.dtype;
        vi->rank = v->type.rank;
        for (int d = 0; d < vi->rank; d++)
            vi->dims[d] = v->type.dims[d].value;
        vi->nelem = (size_t)n;
        vi->bytes = gf_dtype_bytes(vi->dtype, vi->nelem);
    }
    for (size_t i = 0; i < s->n_inputs; i++)
        s->inputs[i]->init = NULL;
    for (size_t i = 0; i < g->n_values; i++)
        g->values[i]->type = saved[i];
    free(saved);
    return st;
}

/* ---- planning: kernels and memory -------------------------------------------- */

static void view_of(const struct vinfo *vi, void *data, struct gf_tview *t)
{
    memset(t, 0, sizeof(*t));
    t->dtype = vi->dtype;
    t->rank = vi->rank;
    memcpy(t->dims, vi->dims, (size_t)vi->rank * sizeof(int64_t));
    t->nelem = vi->nelem;
    t->data = data;
}

/* Output o of op may be written over its input i when that input dies at
 * the node and has the output's shape and dtype: the kernel reads each
 * element (or each row) of that input before writing the same one. */
static bool elementwise_inplace(enum gf_op op, size_t o, size_t i)
{
    switch (op) {
    case GF_OP_ADD: case GF_OP_SUB: case GF_OP_MUL: case GF_OP_DIV:
    case GF_OP_SQRT: case GF_OP_RECIPROCAL: case GF_OP_NEG: case GF_OP_ABS: case GF_OP_EXP:
    case GF_OP_LOG: case GF_OP_SIN: case GF_OP_COS: case GF_OP_TANH: case GF_OP_SIGMOID:
    case GF_OP_RELU: case GF_OP_LEAKY_RELU: case GF_OP_ELU: case GF_OP_SELU:
    case GF_OP_SOFTPLUS: case GF_OP_SOFTSIGN: case GF_OP_HARD_SIGMOID: case GF_OP_HARD_SWISH:
    case GF_OP_ERF: case GF_OP_GELU: case GF_OP_FLOOR: case GF_OP_CEIL: case GF_OP_ROUND:
    case GF_OP_SIGN:
    /* fused ops */
    case GF_OP_SILU: case GF_OP_FUSED_GELU: case GF_OP_SWIGLU: case GF_OP_GEGLU:
    case GF_OP_RMS_NORM: case GF_OP_LAYER_NORM:
    /* fused backward ops: dX over dY (or over the forward value read) */
    case GF_OP_RMS_NORM_GRAD: case GF_OP_LAYER_NORM_GRAD: case GF_OP_MATMUL_EPILOGUE_GRAD:
    case GF_OP_CROSS_ENTROPY_GRAD:
        return o == 0;
    case GF_OP_SOFTMAX_CROSS_ENTROPY: /* the gradient G over the logits */
        return o == 2 && i == 0;
    default:
        return false;
    }
}

struct range {
    size_t off, size;
};

struct freelist {
    struct range *r;
    size_t n, cap;
    size_t end; /* high-water mark of the block */
};

/* Offsets in the block are multiples of the backend's alignment. */
static size_t round_up(const struct gf_session *s, size_t x)
{
    size_t a = s->be->align > ALIGN ? s->be->align : ALIGN;
    return (x + a - 1) / a * a;
}

static bool fl_put(struct freelist *f, size_t off, size_t size)
{
    /* merge with neighbours, keep sorted by offset */
    size_t i = 0;
    while (i < f->n && f->r[i].off < off)
        i++;
    if (i > 0 && f->r[i - 1].off + f->r[i - 1].size == off) {
        f->r[i - 1].size += size;
        if (i < f->n && f->r[i - 1].off + f->r[i - 1].size == f->r[i].off) {
            f->r[i - 1].size += f->r[i].size;
            memmove(&f->r[i], &f->r[i + 1], (f->n - i - 1) * sizeof(*f->r));
            f->n--;
        }
        return true;
    }
    if (i < f->n && off + size == f->r[i].off) {
        f->r[i].off = off;
        f->r[i].size += size;
        return true;
    }
    if (f->n == f->cap) {
        size_t c = f->cap ? f->cap * 2 : 16;
        struct range *r = realloc(f->r, c * sizeof(*r));
        if (!r)
            return false;
        f->r = r;
        f->cap = c;
    }
    memmove(&f->r[i + 1], &f->r[i], (f->n - i) * sizeof(*f->r));
    f->r[i] = (struct range){off, size};
    f->n++;
    return true;
}

static size_t fl_take(struct freelist *f, size_t size)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < f->n; i++)
        if (f->r[i].size >= size && (best == SIZE_MAX || f->r[i].size < f->r[best].size))
            best = i;
    if (best == SIZE_MAX) {
        /* grow the block; a free range touching the end is extended */
        if (f->n && f->r[f->n - 1].off + f->r[f->n - 1].size == f->end) {
            size_t off = f->r[f->n - 1].off;
            f->end = off + size;
            f->n--;
            return off;
        }
        size_t off = f->end;
        f->end += size;
        return off;
    }
    size_t off = f->r[best].off;
    f->r[best].off += size;
    f->r[best].size -= size;
    if (f->r[best].size == 0) {
        memmove(&f->r[best], &f->r[best + 1], (f->n - best - 1) * sizeof(*f->r));
        f->n--;
    }
    return off;
}

/* A set of values sharing bytes (a value and the outputs written over it
 * in place) and the steps during which those bytes are in use. */
struct group {
    size_t size, off;
    int first, last;
    int64_t root;
};

static int by_size_desc(const void *a, const void *b)
{
    const struct group *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->first - y->first;
}

/* The second placement: groups in decreasing size, each at the lowest
 * offset free throughout its lifetime (greedy by size, as TFLite's arena
 * planner does).  Kept when its block is smaller than the walk's, whose
 * best-fit free list can fragment.  Also finds the step where the most
 * bytes are live (s->peak_step).  false when out of memory. */
static bool place_by_size(struct gf_session *s)
{
    struct gf_graph *g = s->g;
    size_t n = 0;
    struct group *gr = malloc((g->n_values + 1) * sizeof(*gr));
    int64_t *slot = malloc((g->n_values + 1) * sizeof(*slot));
    size_t *live = calloc(s->n_steps + 1, sizeof(*live));
    if (!gr || !slot || !live) {
        free(gr), free(slot), free(live);
        return false;
    }
    for (size_t i = 0; i < g->n_values; i++)
        slot[g->values[i]->id] = -1;
    for (size_t i = 0; i < g->n_values; i++) {
        const struct vinfo *vi = &s->v[g->values[i]->id];
        if (vi->kind != V_ACT || vi->root != g->values[i]->id)
            continue;
        slot[vi->root] = (int64_t)n;
        gr[n++] = (struct group){round_up(s, vi->bytes), 0, vi->def, vi->end, vi->root};
    }
    for (size_t i = 0; i < g->n_values; i++) { /* members widen their group */
        const struct vinfo *vi = &s->v[g->values[i]->id];
        if (vi->kind != V_ACT || slot[vi->root] < 0)
            continue;
        struct group *r = &gr[slot[vi->root]];
        if (round_up(s, vi->bytes) > r->size)
            r->size = round_up(s, vi->bytes);
        if (vi->end > r->last)
            r->last = vi->end;
    }
    qsort(gr, n, sizeof(*gr), by_size_desc);
    size_t top = 0;
    for (size_t i = 0; i < n; i++) {
        /* lowest gap among the placed groups that overlap in time: retry
         * past every conflict until none is left (offsets only grow) */
        size_t off = 0;
        for (bool moved = true; moved;) {
            moved = false;
            for (size_t j = 0; j < i; j++)
                if (gr[j].first <= gr[i].last && gr[i].first <= gr[j].last &&
                    gr[j].off < off + gr[i].size && off < gr[j].off + gr[j].size) {
                    off = gr[j].off + gr[j].size;
                    moved = true;
                }
        }
        gr[i].off = off;
        if (off + gr[i].size > top)
            top = off + gr[i].size;
        for (int k = gr[i].first; k <= gr[i].last && k < (int)s->n_steps; k++)
            live[k] += gr[i].size;
    }
    size_t most = 0;
    for (size_t k = 0; k < s->n_steps; k++)
        if (live[k] > most) {
            most = live[k];
            s->peak_step = (int)k;
        }
    if (top < s->block_size) {
        for (size_t i = 0; i < n; i++)
            slot[gr[i].root] = (int64_t)i;
        for (size_t i = 0; i < g->n_values; i++) {
            struct vinfo *vi = &s->v[g->values[i]->id];
            if (vi->kind == V_ACT)
                vi->offset = gr[slot[vi->root]].off;
        }
        s->block_size = top;
    }
    free(gr), free(slot), free(live);
    return true;
}

/* Ops whose output is their input's bytes under another shape: with
 * row-major tensors the data of Reshape, Flatten, Squeeze, Unsqueeze and
 * Identity is the input's, byte for byte. */
static bool is_view_op(enum gf_op op)
{
    return op == GF_OP_RESHAPE || op == GF_OP_FLATTEN || op == GF_OP_SQUEEZE ||
           op == GF_OP_UNSQUEEZE || op == GF_OP_IDENTITY;
}

/* Views: a step of a view op whose input is an intermediate (in the block,
 * or itself a view of one) and whose output has its bytes and dtype and
 * is not bound to the caller's memory does not run: the output takes the
 * input's place in the block (vi->root: the same group, at the same
 * offset, on a device a sub-buffer of the same range).  assign_memory
 * keeps the group's bytes until its last member's last use. */
static void find_views(struct gf_session *s)
{
    for (size_t k = 0; k < s->n_steps; k++) {
        struct step *st = &s->steps[k];
        const struct gf_node *n = st->node;
        st->view = false;
        if (st->folded || !is_view_op(n->op) || n->n_inputs < 1 || n->n_outputs != 1 ||
            !n->inputs[0] || !n->outputs[0])
            continue;
        const struct vinfo *x = &s->v[n->inputs[0]->id];
        const struct vinfo *y = &s->v[n->outputs[0]->id];
        if (x->kind == V_ACT && y->kind == V_ACT && x->dtype == y->dtype &&
            x->bytes == y->bytes && x->nelem == y->nelem) {
            st->view = true;
            s->n_views++;
        }
    }
}

/* The first value of the group value id belongs to. */
static int64_t group_of(const struct gf_session *s, int64_t id)
{
    while (s->v[id].root != id)
        id = s->v[id].root;
    return id;
}

/* Whether node n reads x's bytes through another input too (x and a view
 * of it): then it must not write over them. */
static bool reads_twice(const struct gf_session *s, const struct gf_node *n,
                        const struct gf_value *x)
{
    int64_t r = group_of(s, x->id);
    for (size_t i = 0; i < n->n_inputs; i++)
        if (n->inputs[i] && n->inputs[i] != x && s->v[n->inputs[i]->id].kind == V_ACT &&
            group_of(s, n->inputs[i]->id) == r)
            return true;
    return false;
}

/* Lifetimes, in-place reuse and offsets for every intermediate value.
 * Values sharing bytes form a group (root: the first of them): a value and
 * the views of it, and an elementwise output written over an input whose
 * whole group dies at that node.  A group's bytes are taken when its root
 * is written and returned after the last use of any member. */
static enum gf_status assign_memory(struct gf_session *s)
{
    struct gf_graph *g = s->g;
    int end = (int)s->n_steps;
    int *gend = malloc((g->n_values + 1) * sizeof(*gend)); /* per root: last use, -1 freed */
    if (!gend)
        return gf_error(GF_ERR_NOMEM, "out of memory planning");
    /* every offset the placements give is at most the sum of the rounded
     * sizes: bounding the sum keeps them all from wrapping */
    size_t sum = 0;
    for (size_t i = 0; i < g->n_values; i++) {
        struct gf_value *v = g->values[i];
        struct vinfo *vi = &s->v[v->id];
        gend[v->id] = -1;
        if (vi->kind != V_ACT)
            continue;
        if (__builtin_add_overflow(sum, round_up(s, vi->bytes), &sum) || sum > SIZE_MAX / 4) {
            free(gend);
            return gf_error(GF_ERR_NOMEM, "the activations up to '%s' need more than %zu "
                            "bytes", v->name, SIZE_MAX / 4);
        }
        vi->last = vi->def;
        for (size_t u = 0; u < v->n_uses; u++) {
            int k = (int)(intptr_t)v->uses[u].node->aux;
            if (v->uses[u].node->graph == g && !s->steps[k].folded && k > vi->last)
                vi->last = k;
        }
        if (v->is_output)
            vi->last = end;
        vi->end = vi->last;
        vi->root = v->id;
        s->intermediate_bytes += vi->bytes;
    }
    /* views join their input's group (in schedule order: chains resolve) */
    for (size_t k = 0; k < s->n_steps; k++)
        if (s->steps[k].view) {
            const struct gf_node *n = s->steps[k].node;
            s->v[n->outputs[0]->id].root = s->v[n->inputs[0]->id].root;
        }
    for (size_t i = 0; i < g->n_values; i++) {
        const struct vinfo *vi = &s->v[g->values[i]->id];
        if (vi->kind == V_ACT && vi->end > gend[vi->root])
            gend[vi->root] = vi->end;
    }
    struct freelist f = {0};
    bool ok = true;
    for (int k = 0; k < end && ok; k++) {
        struct gf_node *n = s->steps[k].node;
        if (s->steps[k].folded)
            continue;
        for (size_t o = 0; o < n->n_outputs; o++) {
            struct gf_value *v = n->outputs[o];
            if (!v)
                continue;
            struct vinfo *vi = &s->v[v->id];
            struct vinfo *src = NULL;
            if (vi->kind == V_EXT) /* the caller's memory */
                continue;
            if (vi->root != v->id) { /* a view: its group's bytes */
                vi->offset = s->v[group_of(s, v->id)].offset;
                continue;
            }
            for (size_t i = 0; i < n->n_inputs; i++) {
                struct gf_value *x = n->inputs[i];
                struct vinfo *xi = x ? &s->v[x->id] : NULL;
                if (xi && elementwise_inplace(n->op, o, i) && xi->kind == V_ACT &&
                    gend[group_of(s, x->id)] == k && xi->bytes == vi->bytes &&
                    xi->rank == vi->rank && xi->dtype == vi->dtype &&
                    memcmp(xi->dims, vi->dims, (size_t)vi->rank * sizeof(int64_t)) == 0 &&
                    !reads_twice(s, n, x)) {
                    src = xi;
                    break;
                }
            }
            if (src) { /* the group's bytes now hold the output (and its views) too */
                int64_t r = group_of(s, (int64_t)(src - s->v));
                vi->offset = src->offset;
                vi->root = r;
                gend[r] = gend[v->id] > k ? gend[v->id] : k;
                gend[v->id] = -1;
            } else {
                vi->offset = fl_take(&f, round_up(s, vi->bytes));
            }
        }
        /* release the groups whose last use is here (outputs that nobody
         * reads die at once) */
        for (size_t i = 0; i < n->n_inputs + n->n_outputs && ok; i++) {
            struct gf_value *x = i < n->n_inputs ? n->inputs[i] : n->outputs[i - n->n_inputs];
            if (!x)
                continue;
            int64_t r = group_of(s, x->id);
            if (s->v[x->id].kind == V_ACT && gend[r] == k) {
                ok = fl_put(&f, s->v[r].offset, round_up(s, s->v[r].bytes));
                gend[r] = -1; /* freed once even if read twice */
            }
        }
    }
    s->block_size = f.end;
    free(f.r);
    free(gend);
    for (size_t i = 0; i < g->n_values; i++) /* every member names its group's first */
        if (s->v[g->values[i]->id].kind == V_ACT)
            s->v[g->values[i]->id].root = group_of(s, g->values[i]->id);
    if (ok)
        ok = place_by_size(s);
    return ok ? GF_OK : gf_error(GF_ERR_NOMEM, "out of memory planning");
}

static enum gf_status unsupported_op(const struct gf_session *s, const struct gf_node *n)
{
    return gf_error(GF_ERR_UNSUPPORTED, "%s: op '%s' (domain '%s', opset %lld) is not "
                    "supported", n->name && *n->name ? n->name : "unnamed node", n->op_type,
                    n->domain && *n->domain ? n->domain : "ai.onnx",
                    (long long)gf_model_opset(s->m, n->domain));
}

/* The CPU kernel of every step: constant folding runs them while planning,
 * and on a device backend they run the nodes the backend has no kernel for. */
static enum gf_status choose_cpu_kernels(struct gf_session *s)
{
    struct gf_backend *cpu = gf_backend_get("cpu");
    struct gf_tview in[64];
    for (size_t k = 0; k < s->n_steps; k++) {
        struct gf_node *n = s->steps[k].node;
        char lab[200];
        if (n->n_inputs > 64)
            return gf_error(GF_ERR_UNSUPPORTED, "node '%s' has too many inputs", n->name);
        for (size_t i = 0; i < n->n_inputs; i++)
            if (n->inputs[i])
                view_of(&s->v[n->inputs[i]->id], (void *)1, &in[i]);
            else
                memset(&in[i], 0, sizeof(in[i]));
        s->steps[k].cpu = s->steps[k].k = gf_kernel_find(cpu, n, in, n->n_inputs);
        if (!s->steps[k].k) {
            snprintf(lab, sizeof(lab), "%s", n->name && *n->name ? n->name : "unnamed node");
            return gf_error(GF_ERR_UNSUPPORTED, "%s: no kernel for %s (domain '%s', opset "
                            "%lld) with input type %s", lab, n->op_type,
                            n->domain && *n->domain ? n->domain : "ai.onnx",
                            (long long)gf_model_opset(s->m, n->domain),
                            n->n_inputs && n->inputs[0] ? gf_dtype_name(in[0].dtype) : "-");
        }
    }
    return GF_OK;
}

/* A view of value v as a kernel of the session's backend sees it: device
 * memory (or a placeholder while planning) plus the host copy if any. */
static void device_view(const struct gf_session *s, const struct gf_value *v, bool planning,
                        struct gf_tview *t)
{
    if (!v) {
        memset(t, 0, sizeof(*t));
        return;
    }
    const struct vinfo *vi = &s->v[v->id];
    view_of(vi, planning ? (vi->bytes ? (void *)1 : NULL) : vi->dev, t);
    /* a bound parameter's host copy is stale on a device */
    t->host = vi->kind == V_ACT || vi->kind == V_EXT || (vi->ext && s->device) ? NULL : vi->data;
}

/* The views step k is planned with: its kernel is found, and its entry in
 * the autotune cache keyed, with these (graphfuse tune keys through them
 * too: gf_session_tune_site). */
static void step_views(const struct gf_session *s, size_t k, struct gf_tview *in,
                       struct gf_tview *out)
{
    const struct gf_node *n = s->steps[k].node;
    for (size_t i = 0; i < n->n_inputs; i++)
        device_view(s, n->inputs[i], true, &in[i]);
    for (size_t o = 0; o < n->n_outputs; o++)
        device_view(s, n->outputs[o], true, &out[o]);
}

/* The views step k is tuned with (and keyed with: step_views' shapes):
 * a graph input's values change from run to run, so the tuner makes up
 * its own unless the plan is keyed on them (small integer tensors). */
static void tune_views(const struct gf_session *s, size_t k, struct gf_tview *in,
                       struct gf_tview *out)
{
    const struct gf_node *n = s->steps[k].node;
    step_views(s, k, in, out);
    for (size_t i = 0; i < n->n_inputs; i++) {
        const struct vinfo *xi = n->inputs[i] ? &s->v[n->inputs[i]->id] : NULL;
        if (xi && xi->kind == V_INPUT &&
            !((xi->dtype == GF_INT64 || xi->dtype == GF_INT32) && xi->nelem <= 64))
            in[i].host = NULL;
    }
}

/* Whether the plan consults the autotune cache for step st (run by the
 * backend's kernel dk): the backend has rival kernels or knob values for
 * it (st->cands > 1), or, on a device, CPU kernels may have competed
 * (graphfuse tune --with-cpu). */
static bool consults_cache(struct gf_session *s, struct step *st, const struct gf_tview *in,
                           const struct gf_kernel *dk)
{
    const struct gf_node *n = st->node;
    st->cands = dk && n->n_outputs <= 64 && !st->folded
              ? gf_tune_count_candidates(s->be, n, in, n->n_inputs) : 0;
    return st->cands > 1 || (st->cands == 1 && s->device);
}

/* Autotuning: the kernel and knob values cached for step k (whose default
 * kernel is dk), or tuned now with opts.autotune; dk when the node has no
 * choice or nothing is cached.  Tuning problems are noted for
 * gf_session_print_tuning, never fatal. */
static const struct gf_kernel *tune_step(struct gf_session *s, size_t k, const struct gf_tview *in,
                                         const struct gf_kernel *dk)
{
    struct step *st = &s->steps[k];
    struct gf_node *n = st->node;
    struct gf_tview tin[64], out[64];
    struct gf_tune_choice c;
    struct gf_tune_result r;
    if (!consults_cache(s, st, in, dk))
        return dk;
    s->n_choice += st->cands > 1;
    if (s->tune_off || (s->o.tune_cache && !*s->o.tune_cache))
        return dk;
    if (!s->tuner && gf_tuner_open(s->o.tune_cache, &s->tuner) != GF_OK) {
        s->tune_off = true;
        return dk;
    }
    tune_views(s, k, tin, out);
    in = tin;
    if (gf_tuner_lookup(s->tuner, s->be, n, in, n->n_inputs, out, n->n_outputs, &c, NULL)) {
        s->n_tuned_cached++;
        s->n_choice += st->cands == 1; /* the cache has a CPU kernel for it */
    } else if (!s->o.autotune || st->cands < 2) {
        return dk;
    } else if (gf_tuner_tune(s->tuner, s->be, n, in, n->n_inputs, out, n->n_outputs, NULL,
                             &r) == GF_OK) {
        c = r.choice;
        s->n_tuned_now++;
        s->n_tuned_run++;
    } else {
        snprintf(s->tune_note, sizeof(s->tune_note), "autotune: %s", gf_last_error());
        return dk;
    }
    memcpy(st->tuned, c.config, sizeof(st->tuned));
    st->config = c.kernel->n_knobs ? st->tuned : NULL;
    return c.kernel;
}

/* The kernel of each step still to run: on the CPU its CPU kernel, or
 * the one the autotune cache names; on a device backend the backend's
 * (cached or not), or the CPU's (on_cpu) when it has none, and the values
 * device steps read or write are marked (they need device memory). */
static void choose_kernels(struct gf_session *s)
{
    struct gf_tview in[64], out[64];
    for (size_t k = 0; k < s->n_steps; k++) {
        struct step *st = &s->steps[k];
        if (st->folded || st->view)
            continue;
        struct gf_node *n = st->node;
        step_views(s, k, in, out);
        if (!s->device) {
            st->k = tune_step(s, k, in, st->cpu);
            continue;
        }
        const struct gf_kernel *dk = gf_kernel_find(s->be, n, in, n->n_inputs);
        if (dk && (dk = tune_step(s, k, in, dk)) && strcmp(dk->backend, s->be->ops->name)) {
            st->cpu = dk; /* tuned with CPU kernels competing: the host was faster */
            dk = NULL;
        }
        st->on_cpu = dk == NULL;
        st->k = dk ? dk : st->cpu;
        if (st->on_cpu) {
            s->n_fallback++;
            continue;
        }
        for (size_t i = 0; i < n->n_inputs; i++)
            if (n->inputs[i])
                s->v[n->inputs[i]->id].on_device = true;
    }
}

/* Values whose elements shape inference found become constants. */
static void adopt_known(struct gf_session *s)
{
    for (struct cbuf *b = s->consts; b; b = b->next) {
        struct vinfo *vi = &s->v[b->value_id];
        if (vi->kind != V_ACT || vi->nelem != b->n)
            continue;
        if (vi->dtype == GF_INT32) { /* narrow in place, front to back */
            const int64_t *src = (const int64_t *)b->data;
            int32_t *dst = (int32_t *)b->data;
            for (size_t i = 0; i < b->n; i++)
                dst[i] = (int32_t)src[i];
        }
        vi->kind = V_CONST;
        vi->data = b->data;
    }
}

#define FOLD_LIMIT (16u << 20) /* largest node output computed while planning */
/* A node that only moves or converts constant bytes (a weight's Transpose,
 * Reshape or Cast) is folded up to this size, and up to MOVE_FACTOR times
 * its constant inputs' bytes: its output replaces a computation of the
 * same size on every run, and the factor bounds what planning allocates
 * by what the model already holds (a Cast to a 4x wider type at most). */
#define MOVE_FOLD_LIMIT ((size_t)1 << 30)
#define MOVE_FACTOR 4

/* Host scratch for a CPU kernel run by a session (folding; on the CPU
 * backend the planned workspace, elsewhere a host buffer grown on demand):
 * sets a->workspace. */
static enum gf_status host_workspace(struct gf_session *s, const struct gf_kernel *k,
                                     struct gf_kernel_args *a)
{
    if (!s->device && s->ws) {
        a->workspace = s->ws;
        if (!k->workspace || k->workspace(a) <= s->ws_size)
            return GF_OK;
    }
    size_t need = k->workspace ? k->workspace(a) : 0;
    if (need > s->host_ws_size) {
        free(s->host_ws);
        s->host_ws_size = 0;
        if (!(s->host_ws = aligned_alloc(ALIGN, (need + ALIGN - 1) / ALIGN * ALIGN)))
            return gf_error(GF_ERR_NOMEM, "out of memory for %zu bytes of workspace", need);
        s->host_ws_size = need;
    }
    a->workspace = s->host_ws;
    return GF_OK;
}

static bool outputs_const(const struct gf_session *s, const struct gf_node *n)
{
    for (size_t o = 0; o < n->n_outputs; o++)
        if (n->outputs[o] && s->v[n->outputs[o]->id].kind != V_CONST)
            return false;
    return true;
}

/* Ops whose output is their inputs' elements rearranged or converted,
 * never more of them than the inputs hold. */
static bool moves_data(enum gf_op op)
{
    return op == GF_OP_TRANSPOSE || op == GF_OP_RESHAPE || op == GF_OP_FLATTEN ||
           op == GF_OP_SQUEEZE || op == GF_OP_UNSQUEEZE || op == GF_OP_IDENTITY ||
           op == GF_OP_CAST || op == GF_OP_CONCAT || op == GF_OP_SLICE;
}

static bool foldable(const struct gf_session *s, const struct gf_node *n)
{
    if (n->op == GF_OP_DROPOUT) /* random in training mode */
        return false;
    size_t in_bytes = 0;
    for (size_t i = 0; i < n->n_inputs; i++) {
        const struct gf_value *x = n->inputs[i];
        /* an initializer that is also a graph input (a trained parameter)
         * may change between runs: not a constant */
        if (x && !(s->v[x->id].kind == V_INIT && !x->is_input) &&
            s->v[x->id].kind != V_CONST)
            return false;
        if (x && __builtin_add_overflow(in_bytes, s->v[x->id].bytes, &in_bytes))
            in_bytes = SIZE_MAX;
    }
    size_t bytes = 0;
    for (size_t o = 0; o < n->n_outputs; o++)
        if (n->outputs[o] && __builtin_add_overflow(bytes, s->v[n->outputs[o]->id].bytes, &bytes))
            return false;
    if (bytes <= FOLD_LIMIT)
        return true;
    /* past 16 MiB only data movement: a computing node (Expand, Tile, a
     * MatMul of two constants) could make far more than the model holds */
    return moves_data(n->op) && bytes <= MOVE_FOLD_LIMIT &&
           bytes / MOVE_FACTOR <= in_bytes;
}

/* Constant folding at plan time: nodes whose outputs shape inference
 * resolved (Shape -> Gather -> Unsqueeze -> Concat chains) are dropped
 * from the schedule, and nodes whose inputs are all constant (Constant,
 * the RoPE tables for this sequence length, ...) run once, here. */
static enum gf_status fold_constants(struct gf_session *s)
{
    struct gf_tview in[64], out[64];
    for (size_t k = 0; k < s->n_steps; k++) {
        struct gf_node *n = s->steps[k].node;
        if (outputs_const(s, n)) {
            s->steps[k].folded = true;
            s->n_folded++;
            continue;
        }
        if (n->n_inputs > 64 || n->n_outputs > 64 || !foldable(s, n))
            continue;
        for (size_t o = 0; o < n->n_outputs; o++) {
            if (!n->outputs[o]) {
                memset(&out[o], 0, sizeof(out[o]));
                continue;
            }
            struct vinfo *vi = &s->v[n->outputs[o]->id];
            struct cbuf *b = cbuf_new(s, n->outputs[o]->id, vi->bytes);
            if (!b)
                return gf_error(GF_ERR_NOMEM, "out of memory planning");
            vi->data = b->data;
            view_of(vi, vi->data, &out[o]);
        }
        for (size_t i = 0; i < n->n_inputs; i++)
            if (n->inputs[i])
                view_of(&s->v[n->inputs[i]->id], s->v[n->inputs[i]->id].data, &in[i]);
            else
                memset(&in[i], 0, sizeof(in[i]));
        struct gf_kernel_args a = {.node = n, .in = in, .n_in = n->n_inputs, .out = out,
                                   .n_out = n->n_outputs, .n_threads = s->o.n_threads,
                                   .backend = gf_backend_get("cpu")};
        enum gf_status st = host_workspace(s, s->steps[k].cpu, &a);
        if (st == GF_OK)
            st = s->steps[k].cpu->run(&a);
        if (st != GF_OK)
            return st;
        for (size_t o = 0; o < n->n_outputs; o++)
            if (n->outputs[o]) {
                s->v[n->outputs[o]->id].kind = V_CONST;
                s->v[n->outputs[o]->id].dev = s->v[n->outputs[o]->id].data;
            }
        s->steps[k].folded = true;
        s->n_folded++;
    }
    return GF_OK;
}

/* Raises the planned workspace to what step k's kernel asks for. */
static void grow_workspace(struct gf_session *s, size_t k)
{
    const struct gf_kernel *kn = s->steps[k].k;
    if (!kn->workspace)
        return;
    struct gf_node *n = s->steps[k].node;
    struct gf_tview vin[64], vout[64];
    for (size_t i = 0; i < n->n_inputs; i++)
        device_view(s, n->inputs[i], true, &vin[i]);
    for (size_t i = 0; i < n->n_outputs && i < 64; i++)
        device_view(s, n->outputs[i], true, &vout[i]);
    struct gf_kernel_args a = {.node = n, .in = vin, .n_in = n->n_inputs, .out = vout,
                               .n_out = n->n_outputs, .n_threads = s->o.n_threads,
                               .backend = s->be, .config = s->steps[k].config};
    size_t w = kn->workspace(&a);
    if (w > s->ws_size)
        s->ws_size = w;
}

/* Where each value lives for the backend's kernels: the CPU reads host
 * memory where it lies; a device backend gets a view of the block for
 * each intermediate and an uploaded copy of every other value a device
 * step reads. */
static enum gf_status bind_memory(struct gf_session *s)
{
    struct gf_backend *be = s->be;
    for (size_t i = 0; i < s->g->n_values; i++) {
        struct vinfo *vi = &s->v[s->g->values[i]->id];
        if (vi->kind == V_ACT && vi->bytes) {
            vi->dev = s->device ? be->ops->view(be, s->block, vi->offset, vi->bytes)
                                : s->block + vi->offset;
            if (!vi->dev)
                return GF_ERR_NOMEM;
        } else if (vi->kind == V_INIT || vi->kind == V_CONST || vi->kind == V_INPUT) {
            if (vi->ext) /* a bound parameter: the caller's memory */
                continue;
            vi->dev = vi->data;
            if (!s->device || !vi->on_device || !vi->bytes)
                continue;
            if (!(vi->dev = be->ops->alloc(be, vi->bytes)))
                return GF_ERR_NOMEM;
            vi->dev_owned = true;
            enum gf_status st = vi->kind == V_INPUT ? GF_OK
                              : to_device(s, vi->dev, vi->data, vi->bytes);
            if (st != GF_OK)
                return st;
        }
    }
    return GF_OK;
}

/* Whether v keeps its bytes for the plan's life: a constant folded while
 * planning, or an initializer that is neither a graph input (the caller
 * may change it between runs, as foldable says) nor a parameter bound to
 * the caller's memory (the trainer's: its optimizer writes it every step). */
static bool fixed_value(const struct gf_session *s, const struct gf_value *v)
{
    const struct vinfo *vi = &s->v[v->id];
    return vi->kind == V_CONST || (vi->kind == V_INIT && !v->is_input && !vi->ext);
}

/* Kernels with a `prepare` hook get their fixed inputs made over once a
 * plan, into one block the plan owns: the CPU's GEMMs pack a weight into
 * the panels their tiles read (kernels/cpu/sgemm.c) instead of copying it
 * there on every run.  Host-memory backends only; the block holds a
 * second copy of each such weight (the originals stay for their other
 * readers), listed by gf_session_print_profile. */
static enum gf_status prepare_steps(struct gf_session *s)
{
    if (s->device)
        return GF_OK;
    struct gf_tview in[64], out[64];
    size_t *size = calloc(s->n_steps + 1, sizeof(*size)), total = 0;
    if (!size)
        return gf_error(GF_ERR_NOMEM, "out of memory planning");
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
        for (size_t k = 0; k < s->n_steps; k++) {
            struct step *st = &s->steps[k];
            const struct gf_node *n = st->node;
            if (st->folded || st->view || !st->k->prepare || !st->k->prepared_size ||
                n->n_inputs > 64 || n->n_outputs > 64 || (pass && !size[k]))
                continue;
            uint64_t fixed = 0;
            for (size_t i = 0; i < n->n_inputs && i < 64; i++)
                if (n->inputs[i] && fixed_value(s, n->inputs[i]))
                    fixed |= (uint64_t)1 << i;
            if (!fixed)
                continue;
            for (size_t i = 0; i < n->n_inputs; i++)
                device_view(s, n->inputs[i], false, &in[i]);
            for (size_t o = 0; o < n->n_outputs; o++)
                device_view(s, n->outputs[o], false, &out[o]);
            struct gf_kernel_args a = {.node = n, .in = in, .n_in = n->n_inputs, .out = out,
                                       .n_out = n->n_outputs, .config = st->config,
                                       .n_threads = s->o.n_threads, .backend = s->be,
                                       .fixed_in = fixed};
            if (!pass) {
                size[k] = st->k->prepared_size(&a);
                total += round_up(s, size[k]);
                continue;
            }
            st->prepared = (char *)s->prepared + off;
            st->k->prepare(&a, (void *)st->prepared);
            off += round_up(s, size[k]);
            s->n_prepared++;
        }
        if (!pass && total && !(s->prepared = aligned_alloc(ALIGN, total))) {
            free(size);
            return gf_error(GF_ERR_NOMEM, "out of memory: %zu bytes of prepared weights",
                            total);
        }
        if (!total)
            break;
    }
    s->prepared_bytes = total;
    free(size);
    return GF_OK;
}

static void *bound_output(const struct gf_session *s, size_t i);

/* On a host backend, a graph output that a node computes is written by the
 * node straight into memory of its own (V_EXT, outside the block), which
 * the run then hands out as the output tensor's data instead of copying
 * the value out of the block (262 MB of logits at 4 x 512 tokens, 24 ms on
 * the 2-core VM, and as many bytes more in use).  The memory lives until
 * the plan is dropped and the run after that has ended; an input that lies
 * in it (an output fed back) is copied first (keep_apart).  Its bytes count
 * towards opts.max_memory. */
static enum gf_status own_outputs(struct gf_session *s)
{
    const struct gf_graph *g = s->g;
    s->own_bytes = 0;
    if (s->device || !g->n_outputs)
        return GF_OK;
    if (!(s->own = calloc(g->n_outputs, sizeof(*s->own))))
        return gf_error(GF_ERR_NOMEM, "out of memory planning");
    s->n_own = g->n_outputs;
    for (size_t i = 0; i < g->n_outputs; i++) {
        struct vinfo *vi = &s->v[g->outputs[i]->id];
        if (vi->kind != V_ACT || !vi->bytes || bound_output(s, i))
            continue;
        if (__builtin_add_overflow(s->own_bytes, round_up(s, vi->bytes), &s->own_bytes) ||
            s->own_bytes > SIZE_MAX / 4)
            return gf_error(GF_ERR_NOMEM, "the activations up to '%s' need more than %zu "
                            "bytes", g->outputs[i]->name, SIZE_MAX / 4);
        vi->kind = V_EXT; /* its memory: alloc_own_outputs, once the limit is checked */
        vi->ext = true;
    }
    return GF_OK;
}

static enum gf_status alloc_own_outputs(struct gf_session *s)
{
    for (size_t i = 0; i < s->n_own; i++) {
        struct vinfo *vi = &s->v[s->g->outputs[i]->id];
        if (vi->kind != V_EXT || vi->dev || bound_output(s, i))
            continue; /* not own, or an output listed twice */
        if (!(s->own[i] = aligned_alloc(ALIGN, round_up(s, vi->bytes))))
            return gf_error(GF_ERR_NOMEM, "out of memory: %zu bytes for output '%s'",
                            vi->bytes, s->g->outputs[i]->name);
        vi->dev = vi->data = s->own[i];
    }
    return GF_OK;
}

/* Bound graph outputs that a node computes go to the caller's memory
 * (V_EXT); one that is a constant, an input or a parameter is copied
 * there after each run (run_steps). */
static enum gf_status bind_outputs(struct gf_session *s)
{
    for (size_t b = 0; b < s->n_binds; b++) {
        if (s->binds[b].v)
            continue;
        const struct gf_value *v = s->g->outputs[s->binds[b].out];
        struct vinfo *vi = &s->v[v->id];
        if (vi->bytes != s->binds[b].bytes)
            return gf_error(GF_ERR_INTERNAL, "output '%s' has %zu bytes (%s), its buffer %zu",
                            v->name, vi->bytes, gf_dtype_name(vi->dtype), s->binds[b].bytes);
        if (vi->kind == V_EXT && vi->dev != s->binds[b].dev)
            return gf_error(GF_ERR_UNSUPPORTED, "output '%s' is bound to two buffers",
                            v->name);
        if (vi->kind != V_ACT)
            continue;
        vi->kind = V_EXT;
        vi->ext = true;
        vi->dev = s->binds[b].dev;
    }
    return own_outputs(s);
}

static void find_hidden_hosts(struct gf_session *s);

static enum gf_status plan(struct gf_session *s, struct gf_tensor *const *in)
{
    drop_plan(s);
    struct gf_graph *g = s->g;
    s->intermediate_bytes = 0;
    s->v = calloc(g->n_values + 1, sizeof(*s->v));
    s->steps = calloc(g->n_nodes + 1, sizeof(*s->steps));
    if (!s->v || !s->steps)
        return gf_error(GF_ERR_NOMEM, "out of memory planning");
    s->n_steps = 0;
    for (struct gf_node *n = g->first; n; n = n->next) {
        for (size_t a = 0; a < n->n_attrs; a++)
            if (n->attrs[a].type == GF_ATTR_GRAPH || n->attrs[a].type == GF_ATTR_GRAPHS) {
                /* an invalid one (a Scan with more scan inputs than inputs) is
                 * refused as such, not as unsupported: shape inference checks it */
                enum gf_status st = gf_graph_infer_shapes(g);
                if (st != GF_OK && st != GF_ERR_UNSUPPORTED)
                    return st;
                return gf_error(GF_ERR_UNSUPPORTED, "node '%s' (%s): control flow with "
                                "subgraphs is not supported", n->name ? n->name : "",
                                n->op_type);
            }
        if (n->op == GF_OP_UNKNOWN) /* before shape inference, which skips it */
            return unsupported_op(s, n);
        n->aux = (void *)(intptr_t)s->n_steps;
        s->steps[s->n_steps++].node = n;
    }
    enum gf_status st = infer_concrete(s, in);
    if (st == GF_OK)
        st = choose_cpu_kernels(s);
    if (st != GF_OK)
        return st;
    for (size_t i = 0; i < g->n_values; i++) {
        struct gf_value *v = g->values[i];
        struct vinfo *vi = &s->v[v->id];
        if (v->init) {
            vi->kind = V_INIT;
            vi->data = v->init->data;
        } else if (v->producer) {
            vi->kind = V_ACT;
            vi->def = (int)(intptr_t)v->producer->aux;
        }
    }
    for (size_t i = 0; i < s->n_inputs; i++) {
        s->v[s->inputs[i]->id].kind = V_INPUT;
        s->v[s->inputs[i]->id].data = in[i]->data;
    }
    for (size_t b = 0; b < s->n_binds; b++)
        if (s->binds[b].v) {
            s->v[s->binds[b].v->id].ext = true;
            s->v[s->binds[b].v->id].dev = s->binds[b].dev;
        }
    adopt_known(s);
    if ((st = fold_constants(s)) != GF_OK || (st = bind_outputs(s)) != GF_OK)
        return st;
    find_views(s);
    /* kernels (the autotune cache's too) for the steps left to run, and one
     * workspace, the largest any of their backend kernels asks for */
    choose_kernels(s);
    find_hidden_hosts(s);
    s->ws_size = 0;
    for (size_t k = 0; k < s->n_steps; k++)
        if (!s->steps[k].folded && !s->steps[k].view && !s->steps[k].on_cpu)
            grow_workspace(s, k);
    if ((st = assign_memory(s)) != GF_OK)
        return st;
    /* the limit is checked before anything this large is allocated */
    size_t total, all;
    if (__builtin_add_overflow(s->block_size, s->ws_size, &total))
        total = SIZE_MAX;
    if (__builtin_add_overflow(total, s->own_bytes, &all))
        all = SIZE_MAX;
    if (s->o.max_memory && all > s->o.max_memory) {
        char outs[48] = "";
        if (s->own_bytes)
            snprintf(outs, sizeof(outs), " and %zu of outputs", s->own_bytes);
        return gf_error(GF_ERR_NOMEM, "the run needs %zu bytes of activations and workspace%s, "
                        "over the memory limit of %zu bytes", total, outs, s->o.max_memory);
    }
    if (s->ws_size && !(s->ws = s->be->ops->alloc(s->be, s->ws_size)))
        return GF_ERR_NOMEM;
    if (s->block_size && !(s->block = s->be->ops->alloc(s->be, s->block_size)))
        return GF_ERR_NOMEM;
    if ((st = alloc_own_outputs(s)) != GF_OK)
        return st;
    if ((st = bind_memory(s)) != GF_OK || (st = prepare_steps(s)) != GF_OK)
        return st;
    if (s->n_tuned_now && gf_tuner_save(s->tuner) != GF_OK)
        snprintf(s->tune_note, sizeof(s->tune_note), "autotune: %s", gf_last_error());
    s->planned = true;
    return GF_OK;
}

/* ---- running -------------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Device backends, before each run: graph inputs, and initializers that
 * are graph inputs (parameters the trainer updates on the host between
 * runs), are uploaded where device steps read them. */
static enum gf_status upload_inputs(struct gf_session *s)
{
    for (size_t i = 0; s->device && i < s->g->n_values; i++) {
        const struct gf_value *v = s->g->values[i];
        struct vinfo *vi = &s->v[v->id];
        if (!vi->dev_owned || !(vi->kind == V_INPUT || (vi->kind == V_INIT && v->is_input)))
            continue;
        enum gf_status st = to_device(s, vi->dev, vi->data, vi->bytes);
        if (st != GF_OK)
            return st;
    }
    return GF_OK;
}

/* Bound outputs no node of the plan writes (a folded constant, an input, a
 * parameter): copied into the caller's memory after the run. */
static enum gf_status fill_bound_outputs(struct gf_session *s)
{
    enum gf_status st = GF_OK;
    for (size_t b = 0; b < s->n_binds && st == GF_OK; b++) {
        if (s->binds[b].v)
            continue;
        const struct vinfo *vi = &s->v[s->g->outputs[s->binds[b].out]->id];
        if (vi->kind == V_EXT || !vi->bytes)
            continue;
        st = vi->ext || (vi->dev_owned && vi->kind != V_INPUT)
           ? s->be->ops->copy(s->be, s->binds[b].dev, vi->dev, vi->bytes)
           : to_device(s, s->binds[b].dev, vi->data, vi->bytes);
    }
    return st;
}

/* Copies value v into host memory at dst. */
static enum gf_status read_value(struct gf_session *s, const struct gf_value *v, void *dst)
{
    const struct vinfo *vi = &s->v[v->id];
    if (!vi->bytes)
        return GF_OK;
    if (vi->kind == V_ACT || vi->ext)
        return to_host(s, dst, vi->dev, vi->bytes);
    memcpy(dst, vi->data, vi->bytes);
    return GF_OK;
}

/* opts.check_finite: a NaN or Inf in a float or double output of node n
 * is an error naming the node, its op and the output. */
static enum gf_status check_finite(struct gf_session *s, const struct gf_node *n,
                                   const struct gf_tview *out)
{
    for (size_t o = 0; o < n->n_outputs; o++) {
        const struct gf_tview *t = &out[o];
        if (!t->data || (t->dtype != GF_FLOAT && t->dtype != GF_DOUBLE) || !t->nelem)
            continue;
        size_t bytes = gf_tview_bytes(t), bad = SIZE_MAX;
        void *h = malloc(bytes);
        if (!h)
            return gf_error(GF_ERR_NOMEM, "out of memory checking '%s'", n->outputs[o]->name);
        enum gf_status st = to_host(s, h, t->data, bytes);
        for (size_t i = 0; st == GF_OK && i < t->nelem && bad == SIZE_MAX; i++)
            if (!isfinite(t->dtype == GF_FLOAT ? ((const float *)h)[i] : ((const double *)h)[i]))
                bad = i;
        double x = bad == SIZE_MAX ? 0
                 : t->dtype == GF_FLOAT ? ((const float *)h)[bad] : ((const double *)h)[bad];
        free(h);
        if (st != GF_OK)
            return st;
        if (bad != SIZE_MAX)
            return gf_error(GF_ERR_INVALID, "node '%s' (%s) produced %s in output '%s' "
                            "(element %zu)", n->name && *n->name ? n->name : "unnamed",
                            n->op_type, isnan(x) ? "NaN" : x > 0 ? "+Inf" : "-Inf",
                            n->outputs[o]->name, bad);
    }
    return GF_OK;
}

/* A node of a device plan run by its CPU kernel: intermediates go through
 * a host staging area (inputs copied out, outputs copied back in). */
static enum gf_status run_on_host(struct gf_session *s, const struct step *st,
                                  struct gf_tview *in, struct gf_tview *out)
{
    const struct gf_node *n = st->node;
    size_t need = 0;
    for (size_t i = 0; i < n->n_inputs + n->n_outputs; i++) {
        const struct gf_value *x = i < n->n_inputs ? n->inputs[i] : n->outputs[i - n->n_inputs];
        if (x && (i >= n->n_inputs || s->v[x->id].kind == V_ACT || s->v[x->id].ext))
            need += (s->v[x->id].bytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    if (need > s->stage_size) {
        free(s->stage);
        s->stage_size = 0;
        if (!(s->stage = aligned_alloc(ALIGN, need)))
            return gf_error(GF_ERR_NOMEM, "out of memory staging node '%s'", n->name);
        s->stage_size = need;
    }
    unsigned char *p = s->stage;
    enum gf_status rc = GF_OK;
    for (size_t i = 0; i < n->n_inputs + n->n_outputs && rc == GF_OK; i++) {
        bool is_in = i < n->n_inputs;
        const struct gf_value *x = is_in ? n->inputs[i] : n->outputs[i - n->n_inputs];
        struct gf_tview *t = is_in ? &in[i] : &out[i - n->n_inputs];
        if (!x) {
            memset(t, 0, sizeof(*t));
            continue;
        }
        const struct vinfo *xi = &s->v[x->id];
        if (is_in && xi->kind != V_ACT && !xi->ext) {
            view_of(xi, xi->data, t);
        } else {
            view_of(xi, p, t);
            p += (xi->bytes + ALIGN - 1) / ALIGN * ALIGN;
            if (is_in)
                rc = read_value(s, x, t->data);
        }
        t->host = t->data;
    }
    struct gf_kernel_args a = {.node = n, .in = in, .n_in = n->n_inputs, .out = out,
                               .n_out = n->n_outputs, .n_threads = s->o.n_threads,
                               .backend = gf_backend_get("cpu"), .config = st->config};
    if (rc == GF_OK)
        rc = host_workspace(s, st->cpu, &a);
    if (rc == GF_OK)
        rc = st->cpu->run(&a);
    for (size_t o = 0; o < n->n_outputs && rc == GF_OK; o++)
        if (n->outputs[o] && s->v[n->outputs[o]->id].bytes)
            rc = to_device(s, s->v[n->outputs[o]->id].dev, out[o].data,
                           out[o].nelem ? gf_tview_bytes(&out[o]) : 0);
    return rc;
}

/* Whether a kernel reading v gets a host copy of it that may differ from
 * run to run: a graph input the plan is not keyed on (plan_key keeps the
 * values of small integer inputs), or an initializer that is a graph input
 * and not the caller's device memory (a parameter the caller may change). */
static bool host_changes(const struct gf_session *s, const struct gf_value *v)
{
    const struct vinfo *vi = &s->v[v->id];
    struct gf_tview t;
    device_view(s, v, false, &t);
    if (!t.host)
        return false;
    if (vi->kind == V_INPUT)
        return !((vi->dtype == GF_INT64 || vi->dtype == GF_INT32) && vi->nelem <= 64);
    return vi->kind == V_INIT && v->is_input;
}

/* Deferred checks (a backend with checks_begin): a device step reading an
 * input whose host copy changes from run to run is handed no host copy of
 * it where its kernel supports the node without one (the kernel then
 * checks the values on the device, deferred: nothing waits, and a CUDA
 * graph may hold it).  Decided once per plan, so that every run, graphs
 * or not, launches the same kernels. */
static void find_hidden_hosts(struct gf_session *s)
{
    struct gf_tview in[64], out[64];
    for (size_t k = 0; s->be->ops->checks_begin && k < s->n_steps; k++) {
        struct step *st = &s->steps[k];
        const struct gf_node *n = st->node;
        bool changes = false;
        if (st->folded || st->view || st->on_cpu || n->n_inputs > 64 || n->n_outputs > 64)
            continue;
        step_views(s, k, in, out);
        for (size_t i = 0; i < n->n_inputs; i++)
            if (n->inputs[i] && host_changes(s, n->inputs[i])) {
                in[i].host = NULL;
                changes = true;
            }
        /* (no supports(): the kernel reads no host copy, as gf_tview says) */
        st->hide_host = changes && (!st->k->supports || st->k->supports(n, in, n->n_inputs));
    }
}

static enum gf_status run_step(struct gf_session *s, const struct step *st,
                               struct gf_tview *in, struct gf_tview *out)
{
    const struct gf_node *n = st->node;
    if (s->device && st->on_cpu)
        return run_on_host(s, st, in, out);
    for (size_t i = 0; i < n->n_inputs; i++) {
        device_view(s, n->inputs[i], false, &in[i]);
        if (st->hide_host && n->inputs[i] && host_changes(s, n->inputs[i]))
            in[i].host = NULL;
    }
    for (size_t i = 0; i < n->n_outputs; i++)
        device_view(s, n->outputs[i], false, &out[i]);
    struct gf_kernel_args a = {.node = n, .in = in, .n_in = n->n_inputs, .out = out,
                               .n_out = n->n_outputs, .workspace = s->ws,
                               .config = st->config, .n_threads = s->o.n_threads,
                               .backend = s->be, .prepared = st->prepared};
    return st->k->run(&a);
}

/* Steps [a, b) launched one by one (timed per op type with opts.profile). */
static enum gf_status run_range(struct gf_session *s, size_t a, size_t b, struct gf_tview *in,
                                struct gf_tview *out)
{
    enum gf_status st = GF_OK;
    for (size_t k = a; k < b && st == GF_OK; k++) {
        struct gf_node *n = s->steps[k].node;
        if (s->steps[k].folded || s->steps[k].view) /* a view: its input's bytes */
            continue;
        if (n->n_outputs > 64)
            return gf_error(GF_ERR_UNSUPPORTED, "node '%s' has too many outputs", n->name);
        double t0 = s->o.profile ? now_ms() : 0;
        st = run_step(s, &s->steps[k], in, out);
        if (st == GF_OK && s->o.check_finite)
            st = check_finite(s, n, out);
        if (st == GF_OK && s->o.profile) {
            if (s->device)
                st = s->be->ops->sync(s->be);
            s->op_ms[n->op] += now_ms() - t0;
            s->op_calls[n->op]++;
        }
    }
    return st;
}

/* The epilogue launched directly (timed with opts.profile). */
static enum gf_status run_epilogue(struct gf_session *s)
{
    if (!s->epi_fn)
        return GF_OK;
    double t0 = s->o.profile ? now_ms() : 0;
    enum gf_status st = s->epi_fn(s->epi_ctx);
    if (st == GF_OK && s->o.profile) {
        if (s->device)
            st = s->be->ops->sync(s->be);
        s->epi_ms += now_ms() - t0;
    }
    s->epi_calls++;
    return st;
}

void gf_session_set_epilogue(struct gf_session *s, enum gf_status (*fn)(void *ctx), void *ctx)
{
    free_graphs(s); /* a graph holding the old one is stale */
    s->epi_fn = fn;
    s->epi_ctx = ctx;
    s->epi_no_capture = false;
}

/* ---- CUDA Graphs ---------------------------------------------------------------- */

const char *gf_capture_off_reason(const struct gf_exec_opts *o, const struct gf_backend_ops *ops)
{
    const char *env = getenv("GRAPHFUSE_NO_CUDA_GRAPH");
    if (!ops || !ops->capture_begin || !ops->capture_end || !ops->graph_launch ||
        !ops->graph_free)
        return "the backend cannot capture";
    if (o && o->no_cuda_graph)
        return "--no-cuda-graph";
    if (env && *env && strcmp(env, "0") != 0)
        return "GRAPHFUSE_NO_CUDA_GRAPH is set";
    if (o && o->check_finite)
        return "check_finite reads every node's outputs back";
    return NULL;
}

size_t gf_capture_segments(const unsigned char *kind, size_t n, size_t min_steps,
                           struct gf_capture_seg *out)
{
    size_t m = 0;
    struct gf_capture_seg cur = {0, 0, 0};
    for (size_t k = 0; k <= n; k++) {
        if (k == n || kind[k] == GF_CAP_EAGER) {
            if (cur.n && cur.n >= min_steps)
                out[m++] = cur;
            cur.n = 0;
        } else if (kind[k] == GF_CAP_GRAPH) {
            if (!cur.n)
                cur.first = k;
            cur.end = k + 1;
            cur.n++;
        }
    }
    return m;
}

static enum gf_capture_kind step_kind(const struct gf_session *s, size_t k)
{
    const struct step *st = &s->steps[k];
    if (st->folded || st->view)
        return GF_CAP_SKIP;
    if (st->on_cpu || st->no_capture)
        return GF_CAP_EAGER;
    for (size_t i = 0; i < st->node->n_inputs && !st->hide_host; i++)
        if (st->node->inputs[i] && host_changes(s, st->node->inputs[i]))
            return GF_CAP_EAGER;
    return GF_CAP_GRAPH;
}

static enum gf_status build_segments(struct gf_session *s)
{
    size_t n = s->n_steps;
    unsigned char *kind = malloc(n + 1);
    s->segs = malloc((n / 2 + 1) * sizeof(*s->segs));
    s->graphs = calloc(n / 2 + 1, sizeof(*s->graphs));
    s->graph_nodes = calloc(n / 2 + 1, sizeof(*s->graph_nodes));
    if (!kind || !s->segs || !s->graphs || !s->graph_nodes) {
        free(kind);
        free_graphs(s);
        return gf_error(GF_ERR_NOMEM, "out of memory");
    }
    for (size_t k = 0; k < n; k++)
        kind[k] = (unsigned char)step_kind(s, k);
    s->n_segs = gf_capture_segments(kind, n, MIN_GRAPH_STEPS, s->segs);
    free(kind);
    s->segs_ready = true;
    return GF_OK;
}

static const char *node_label(const struct gf_node *n)
{
    return n->name && *n->name ? n->name : "unnamed";
}

/* One replay of range i's graph (with opts.profile waited for and timed). */
static enum gf_status launch_graph(struct gf_session *s, size_t i)
{
    double t0 = s->o.profile ? now_ms() : 0;
    enum gf_status st = s->be->ops->graph_launch(s->be, s->graphs[i]);
    if (st == GF_OK && s->o.profile) {
        st = s->be->ops->sync(s->be);
        s->graph_ms += now_ms() - t0;
    }
    s->graph_calls++;
    return st;
}

/* Whether range i's graph is to hold the epilogue: the plan's last range,
 * with nothing to launch after it. */
static bool epilogue_joins(const struct gf_session *s, size_t i)
{
    if (!s->epi_fn || s->epi_no_capture || i + 1 != s->n_segs)
        return false;
    for (size_t k = s->segs[i].end; k < s->n_steps; k++)
        if (!s->steps[k].folded && !s->steps[k].view)
            return false;
    return true;
}

/* Captures range i (and the epilogue where it joins) and launches it.  A
 * capture that fails ran nothing: the range runs node by node now, the step
 * that failed (else the whole range; the epilogue when it failed) stays
 * outside the graphs from then on, and *failed asks the caller to capture
 * again on the next run. */
static enum gf_status capture_range(struct gf_session *s, size_t i, struct gf_tview *in,
                                    struct gf_tview *out, bool *failed)
{
    const struct gf_capture_seg *g = &s->segs[i];
    struct gf_backend *be = s->be;
    size_t bad = SIZE_MAX;
    enum gf_status st = be->ops->capture_begin(be);
    if (st != GF_OK) {
        snprintf(s->graph_why, sizeof(s->graph_why), "a capture could not begin: %s",
                 gf_last_error());
        s->plan_off = true;
        *failed = true;
        return run_range(s, g->first, g->end, in, out);
    }
    for (size_t k = g->first; k < g->end && st == GF_OK; k++) {
        const struct step *sp = &s->steps[k];
        if (sp->folded || sp->view)
            continue;
        st = sp->node->n_outputs > 64 ? GF_ERR_UNSUPPORTED : run_step(s, sp, in, out);
        if (st != GF_OK)
            bad = k;
    }
    bool epi = epilogue_joins(s, i), epi_bad = false;
    if (st == GF_OK && epi && (st = s->epi_fn(s->epi_ctx)) != GF_OK)
        epi_bad = true;
    char why[400];
    snprintf(why, sizeof(why), "%s", st != GF_OK ? gf_last_error() : "");
    void *graph = NULL;
    size_t nodes = 0;
    enum gf_status end = be->ops->capture_end(be, &graph, &nodes);
    if (st == GF_OK && end == GF_OK && graph) {
        s->graphs[i] = graph;
        s->graph_nodes[i] = nodes;
        s->epi_in_graph = epi;
        return launch_graph(s, i);
    }
    if (graph)
        be->ops->graph_free(be, graph);
    if (st == GF_OK)
        snprintf(why, sizeof(why), "%s", gf_last_error());
    if (epi_bad) {
        s->epi_no_capture = true;
        snprintf(s->graph_why, sizeof(s->graph_why), "capturing the epilogue (the trainer's "
                 "launches) failed, it runs after the last node: %s", why);
    } else if (bad != SIZE_MAX) {
        const struct gf_node *n = s->steps[bad].node;
        s->steps[bad].no_capture = true;
        snprintf(s->graph_why, sizeof(s->graph_why), "capturing node '%s' (%s) failed, it "
                 "runs outside the graphs: %s", node_label(n), n->op_type, why);
    } else {
        for (size_t k = g->first; k < g->end; k++)
            s->steps[k].no_capture = true;
        snprintf(s->graph_why, sizeof(s->graph_why), "capturing nodes '%s' to '%s' failed, "
                 "they run outside the graphs: %s", node_label(s->steps[g->first].node),
                 node_label(s->steps[g->end - 1].node), why);
    }
    if (++s->capture_tries >= MAX_CAPTURE_TRIES)
        s->plan_off = true;
    *failed = true;
    return run_range(s, g->first, g->end, in, out);
}

/* A run through the plan's graphs: each range replayed (captured first if
 * it has no graph yet), the steps outside them launched in between. */
static enum gf_status run_graphed(struct gf_session *s, struct gf_tview *in,
                                  struct gf_tview *out)
{
    enum gf_status st = s->segs_ready ? GF_OK : build_segments(s);
    size_t k = 0;
    bool failed = false;
    for (size_t i = 0; i < s->n_segs && st == GF_OK; i++) {
        const struct gf_capture_seg *g = &s->segs[i];
        if ((st = run_range(s, k, g->first, in, out)) != GF_OK)
            break;
        if (failed) /* capture again on the next run, all ranges at once */
            st = run_range(s, g->first, g->end, in, out);
        else if (s->graphs[i])
            st = launch_graph(s, i);
        else
            st = capture_range(s, i, in, out, &failed);
        k = g->end;
    }
    if (st == GF_OK)
        st = run_range(s, k, s->n_steps, in, out);
    if (st == GF_OK && !(s->epi_in_graph && !failed))
        st = run_epilogue(s);
    if (failed)
        free_graphs(s);
    return st;
}

static enum gf_status run_steps(struct gf_session *s)
{
    struct gf_tview in[64], out[64];
    memset(s->op_ms, 0, sizeof(s->op_ms));
    memset(s->op_calls, 0, sizeof(s->op_calls));
    memset(s->op_views, 0, sizeof(s->op_views));
    s->graph_ms = s->epi_ms = 0;
    s->graph_calls = s->epi_calls = 0;
    for (size_t k = 0; k < s->n_steps; k++)
        if (s->steps[k].view && !s->steps[k].folded)
            s->op_views[s->steps[k].node->op]++;
    double t_start = now_ms();
    const struct gf_backend_ops *ops = s->be->ops;
    bool checks = ops->checks_begin && ops->checks_begin(s->be, s) == GF_OK;
    enum gf_status st = upload_inputs(s);
    /* bound outputs no node writes: before the nodes, so that the epilogue
     * (in the last graph, or after it) reads them too */
    if (st == GF_OK)
        st = fill_bound_outputs(s);
    /* the first run of a plan makes what kernels make on first use */
    bool graphs = !s->graph_off && !s->plan_off && s->plan_runs > 0;
    if (st == GF_OK && graphs)
        st = run_graphed(s, in, out);
    else if (st == GF_OK && (st = run_range(s, 0, s->n_steps, in, out)) == GF_OK)
        st = run_epilogue(s);
    s->plan_runs++;
    enum gf_status end = checks ? ops->checks_end(s->be) : GF_OK;
    if (st == GF_OK)
        st = end;
    if (st == GF_OK)
        st = s->be->ops->sync(s->be);
    if (checks && end == GF_OK && (st == GF_OK || s->be->ops->sync(s->be) == GF_OK)) {
        /* a bad index or label found on the device: the first one, named (a
         * failure later in the run may be its consequence) */
        enum gf_status bad = ops->checks_report(s->be);
        if (bad != GF_OK && bad != GF_ERR_NOMEM) {
            /* the value the report read back may have been overwritten
             * since (device-made labels, indices): the run again node by
             * node, checked on the spot, names the first bad one as the
             * CPU does (the epilogue is not run again) */
            char why[1024];
            snprintf(why, sizeof(why), "%s", gf_last_error());
            enum gf_status again = run_range(s, 0, s->n_steps, in, out);
            if (again == GF_OK && (again = s->be->ops->sync(s->be)) == GF_OK)
                gf_error(bad, "%s", why); /* not found again: the first report */
            bad = again != GF_OK ? again : bad;
        }
        st = bad != GF_OK ? bad : st;
    }
    s->total_ms = now_ms() - t_start;
    return st;
}

/* A tensor header in the outputs' arena for data that lies elsewhere. */
static struct gf_tensor *bound_tensor(struct gf_session *s, const char *name,
                                      const struct vinfo *vi, void *data)
{
    struct gf_tensor *t = gf_model_alloc(s->outm, sizeof(*t));
    int64_t *dims = gf_model_alloc(s->outm, (size_t)(vi->rank + 1) * sizeof(*dims));
    if (!t || !dims)
        return NULL;
    memset(t, 0, sizeof(*t));
    memcpy(dims, vi->dims, (size_t)vi->rank * sizeof(*dims));
    t->name = name;
    t->dtype = vi->dtype;
    t->rank = vi->rank;
    t->dims = dims;
    t->nelem = vi->nelem;
    t->nbytes = data ? vi->bytes : 0;
    t->data = data;
    return t;
}

/* The memory graph output i is bound to (gf_session_bind_output), or NULL. */
static void *bound_output(const struct gf_session *s, size_t i)
{
    for (size_t b = 0; b < s->n_binds; b++)
        if (!s->binds[b].v && s->binds[b].out == i)
            return s->binds[b].dev;
    return NULL;
}

/* The memory output i's tensor covers: bound or own (own_outputs), or NULL
 * (the value is copied out). */
static void *output_memory(const struct gf_session *s, size_t i)
{
    void *b = bound_output(s, i);
    if (!b && s->own && i < s->n_own && s->own[i] &&
        s->v[s->g->outputs[i]->id].dev == s->own[i])
        b = s->own[i];
    return b;
}

/* Whether the last run's output tensor i fits this run's output: the same
 * type and shape, over the same bound memory or none. */
static bool output_fits(const struct gf_session *s, size_t i)
{
    const struct gf_tensor *t = s->outs[i];
    const struct vinfo *vi = &s->v[s->g->outputs[i]->id];
    void *bound = output_memory(s, i);
    if (!t || t->dtype != vi->dtype || t->rank != vi->rank || t->nelem != vi->nelem ||
        (t->rank && memcmp(t->dims, vi->dims, (size_t)t->rank * sizeof(*t->dims))) ||
        s->out_bound[i] != (bound != NULL))
        return false;
    return !bound || t->data == (s->device ? NULL : bound);
}

/* The outputs belong to the session until the next run (gf_exec.h), so a
 * run whose outputs all fit the last run's tensors reads into them: no
 * allocation, and no page faults, per output per run (the 16 MB logits of
 * issue 18's Llama at 1 x 128; whole forwards measured within the noise of
 * the build before, docs/benchmarks.md). */
static enum gf_status collect_outputs(struct gf_session *s, struct gf_tensor ***outputs,
                                      size_t *n_outputs)
{
    struct gf_graph *g = s->g;
    bool reuse = s->outm && s->outs;
    for (size_t i = 0; reuse && i < g->n_outputs; i++)
        reuse = output_fits(s, i);
    if (!reuse) {
        gf_model_free(s->outm);
        s->outm = gf_model_new(8, "outputs");
        if (!s->outm || !(s->outs = gf_model_alloc(s->outm, (g->n_outputs + 1) * sizeof(void *))) ||
            !(s->out_bound = gf_model_alloc(s->outm, g->n_outputs + 1)))
            return gf_error(GF_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        struct gf_value *v = g->outputs[i];
        const struct vinfo *vi = &s->v[v->id];
        void *bound = output_memory(s, i);
        if (bound) { /* in the caller's or its own memory: a header only */
            if (!reuse && !(s->outs[i] = bound_tensor(s, v->name, vi, s->device ? NULL : bound)))
                return gf_error(GF_ERR_NOMEM, "out of memory");
            s->out_bound[i] = true;
            continue;
        }
        if (!reuse &&
            !(s->outs[i] = gf_tensor_new(s->outm, v->name, vi->dtype, vi->rank, vi->dims, NULL)))
            return GF_ERR_NOMEM;
        enum gf_status st = read_value(s, v, s->outs[i]->data);
        if (st != GF_OK)
            return st;
    }
    *outputs = s->outs;
    *n_outputs = g->n_outputs;
    return GF_OK;
}

/* Input i (vi) read from where this plan's nodes write an output (the last
 * run's output fed back, KV-cache style): copied aside first, so that the
 * node writing the output cannot overwrite it while others still read it.
 * (A new plan's own memory is new: nothing the caller holds lies in it.) */
static enum gf_status keep_apart(struct gf_session *s, size_t i, struct vinfo *vi)
{
    const char *p = vi->data;
    for (size_t o = 0; p && vi->bytes && o < s->n_own; o++) {
        const char *m = s->own[o];
        if (!m || p >= m + s->v[s->g->outputs[o]->id].bytes || p + vi->bytes <= m)
            continue;
        if (!s->in_copy && !(s->in_copy = calloc(s->n_inputs, sizeof(*s->in_copy))))
            return gf_error(GF_ERR_NOMEM, "out of memory");
        void *c = realloc(s->in_copy[i], vi->bytes);
        if (!c)
            return gf_error(GF_ERR_NOMEM, "out of memory copying input '%s'",
                            s->inputs[i]->name);
        s->in_copy[i] = c;
        memcpy(c, p, vi->bytes);
        vi->data = c;
        break;
    }
    return GF_OK;
}

enum gf_status gf_session_plan(struct gf_session *s, size_t n_inputs,
                               struct gf_tensor *const *inputs)
{
    if (n_inputs != s->n_inputs)
        return gf_error(GF_ERR_INVALID, "the model takes %zu inputs, %zu given%s%s%s",
                        s->n_inputs, n_inputs, n_inputs < s->n_inputs ? ": missing '" : "",
                        n_inputs < s->n_inputs ? s->inputs[n_inputs]->name : "",
                        n_inputs < s->n_inputs ? "'" : "");
    for (size_t i = 0; i < n_inputs; i++) {
        if (!inputs[i])
            return gf_error(GF_ERR_INVALID, "input '%s' is missing", s->inputs[i]->name);
        enum gf_status st = check_input(s->inputs[i], inputs[i]);
        if (st != GF_OK)
            return st;
    }
    enum gf_status st = check_symbols(s, inputs);
    if (st != GF_OK)
        return st;
    int64_t *key = NULL;
    size_t key_len = 0;
    if ((st = plan_key(s, inputs, &key, &key_len)) != GF_OK)
        return st;
    if (!s->planned || key_len != s->key_len || memcmp(key, s->key, key_len * 8) != 0) {
        st = plan(s, inputs);
        if (st != GF_OK) {
            free(key);
            drop_plan(s);
            return st;
        }
        s->key = key;
        s->key_len = key_len;
        return GF_OK;
    }
    free(key);
    for (size_t i = 0; i < s->n_inputs; i++) {
        struct vinfo *vi = &s->v[s->inputs[i]->id];
        vi->data = inputs[i]->data;
        if ((st = keep_apart(s, i, vi)) != GF_OK)
            return st;
        if (!vi->dev_owned)
            vi->dev = vi->data;
    }
    return GF_OK;
}

enum gf_status gf_session_run(struct gf_session *s, size_t n_inputs,
                              struct gf_tensor *const *inputs, struct gf_tensor ***outputs,
                              size_t *n_outputs)
{
    *outputs = NULL;
    *n_outputs = 0;
    memset(&s->traffic, 0, sizeof(s->traffic));
    enum gf_status st = gf_session_plan(s, n_inputs, inputs);
    if (st == GF_OK)
        st = run_steps(s);
    if (st == GF_OK)
        st = collect_outputs(s, outputs, n_outputs);
    free_own(s->own_old, s->n_own_old); /* the last plan's outputs: read by now */
    s->own_old = NULL, s->n_own_old = 0;
    return st;
}

/* ---- tuning through the plan (graphfuse tune) ---------------------------------------- */

/* The step of the i-th node whose kernel the plan looks up in the cache. */
static const struct step *tune_site_step(const struct gf_session *s, size_t i)
{
    for (size_t k = 0; s->planned && k < s->n_steps; k++) {
        const struct step *st = &s->steps[k];
        if ((st->cands > 1 || (st->cands == 1 && s->device)) && i-- == 0)
            return st;
    }
    return NULL;
}

size_t gf_session_tune_count(const struct gf_session *s)
{
    size_t n = 0;
    while (tune_site_step(s, n))
        n++;
    return n;
}

bool gf_session_tune_site(const struct gf_session *s, size_t i, struct gf_tune_site *site)
{
    const struct step *st = tune_site_step(s, i);
    memset(site, 0, sizeof(*site));
    if (!st)
        return false;
    site->be = s->be;
    site->node = st->node;
    site->n_in = st->node->n_inputs;
    site->n_out = st->node->n_outputs;
    site->n_candidates = st->cands;
    tune_views(s, (size_t)(st - s->steps), site->in, site->out);
    return true;
}

/* ---- profile ----------------------------------------------------------------------- */

/* One line (two with a failed capture) on what the last run replayed. */
static void print_graphs(const struct gf_session *s, FILE *f)
{
    if (s->graph_off) {
        if (strcmp(s->graph_off, "the backend cannot capture") != 0)
            fprintf(f, "cuda graph: off (%s): every node launched one by one\n", s->graph_off);
        return;
    }
    size_t inside = 0, nodes = 0, outside = 0, run = 0;
    int count[GF_OP_COUNT] = {0};
    for (size_t i = 0; s->segs_ready && i < s->n_segs; i++) {
        inside += s->segs[i].n;
        nodes += s->graph_nodes[i];
    }
    for (size_t k = 0; s->planned && k < s->n_steps; k++)
        if (!s->steps[k].folded && !s->steps[k].view)
            run++;
    if (s->plan_off)
        fprintf(f, "cuda graph: off for this plan (%d failed captures): every node launched "
                "one by one\n", s->capture_tries);
    else if (s->plan_runs <= 1)
        fprintf(f, "cuda graph: none yet: the first run of a plan launches node by node, the "
                "second captures, later runs replay\n");
    else if (!s->segs_ready)
        fprintf(f, "cuda graph: a capture failed in this run, which launched the rest node "
                "by node; the next run captures again\n");
    else if (!s->n_segs)
        fprintf(f, "cuda graph: none: no %d or more nodes in a row can be captured\n",
                MIN_GRAPH_STEPS);
    else {
        for (size_t k = 0, i = 0; k < s->n_steps; k++) {
            while (i < s->n_segs && s->segs[i].end <= k)
                i++;
            bool in_seg = i < s->n_segs && k >= s->segs[i].first;
            if (!in_seg && !s->steps[k].folded && !s->steps[k].view) {
                outside++;
                count[s->steps[k].node->op]++;
            }
        }
        fprintf(f, "cuda graph: %zu of %zu nodes replayed as %zu graph%s (%zu CUDA nodes), "
                "%zu launched outside them", inside, run, s->n_segs, s->n_segs == 1 ? "" : "s",
                nodes, outside);
        const char *sep = ": ";
        for (int op = 0; op < GF_OP_COUNT; op++)
            if (count[op]) {
                fprintf(f, "%s%s x%d", sep, gf_op_get_info(op)->name, count[op]);
                sep = ", ";
            }
        if (s->epi_fn)
            fprintf(f, "; the epilogue (optimizer) %s", s->epi_in_graph ? "in the last graph"
                                                                         : "launched after it");
        fputc('\n', f);
        if (s->epi_fn && s->epi_in_graph && s->n_segs == 1 && !outside)
            fprintf(f, "cuda graph: the whole step is one graph: forward, backward and the "
                    "optimizer replay in one launch\n");
    }
    if (s->graph_why[0])
        fprintf(f, "cuda graph: %s\n", s->graph_why);
}

void gf_session_print_profile(const struct gf_session *s, FILE *f)
{
    fprintf(f, "profile: %zu nodes (%zu folded into constants while planning, %zu bytes; "
            "%zu views), %.3f ms\n", s->n_steps, s->n_folded, s->const_bytes, s->n_views,
            s->total_ms);
    fprintf(f, "  %-28s %6s %10s %6s\n", "op", "calls", "ms", "%");
    for (int op = 0; op < GF_OP_COUNT; op++) {
        if (s->op_calls[op])
            fprintf(f, "  %-28s %6d %10.3f %5.1f%%\n", gf_op_get_info(op)->name,
                    s->op_calls[op], s->op_ms[op],
                    s->total_ms > 0 ? 100.0 * s->op_ms[op] / s->total_ms : 0.0);
        if (s->op_views[op]) /* no kernel, nothing copied */
            fprintf(f, "  %-28s %6d %10s %6s\n", gf_op_get_info(op)->name, s->op_views[op],
                    "view", "-");
    }
    if (s->graph_calls)
        fprintf(f, "  %-28s %6d %10.3f %5.1f%%\n", "CUDA graph (replay)", s->graph_calls,
                s->graph_ms, s->total_ms > 0 ? 100.0 * s->graph_ms / s->total_ms : 0.0);
    if (s->epi_calls)
        fprintf(f, "  %-28s %6d %10.3f %5.1f%%\n", "epilogue (optimizer)", s->epi_calls,
                s->epi_ms, s->total_ms > 0 ? 100.0 * s->epi_ms / s->total_ms : 0.0);
    print_graphs(s, f);
    fprintf(f, "memory: peak activations %zu bytes (planned block), workspace %zu bytes\n",
            s->block_size, s->ws_size);
    if (s->planned && s->block_size) {
        const struct gf_node *pk = s->steps[s->peak_step].node;
        fprintf(f, "        the most bytes are live at node '%s' (%s)\n",
                pk->name && *pk->name ? pk->name : "unnamed", pk->op_type);
    }
    fprintf(f, "        sum of all intermediate tensors %zu bytes; block / sum = %.2f\n",
            s->intermediate_bytes,
            s->intermediate_bytes ? (double)s->block_size / (double)s->intermediate_bytes : 0.0);
    if (s->n_prepared) /* kernels/cpu/sgemm.c: GF_CPU_SGEMM_PACK=0 turns it off */
        fprintf(f, "        prepared inputs %zu bytes: %zu node%s read%s a weight packed once "
                "a plan\n", s->prepared_bytes, s->n_prepared, s->n_prepared == 1 ? "" : "s",
                s->n_prepared == 1 ? "s" : "");
    if (s->be && s->be->ops->memory) { /* hf_bench.py reads this line */
        uint64_t now, peak;
        s->be->ops->memory(s->be, &now, &peak);
        fprintf(f, "device memory: peak %llu bytes (%.2f GiB) held by the backend at once, "
                "%llu now\n", (unsigned long long)peak, (double)peak / (1 << 30),
                (unsigned long long)now);
    }
    if (s->n_views) {
        fprintf(f, "views: %zu node%s alias their input's bytes, no kernel, 0 bytes copied:",
                s->n_views, s->n_views == 1 ? "" : "s");
        const char *sep = " ";
        for (int op = 0; op < GF_OP_COUNT; op++)
            if (s->op_views[op]) {
                fprintf(f, "%s%s x%d", sep, gf_op_get_info(op)->name, s->op_views[op]);
                sep = ", ";
            }
        fputc('\n', f);
    }
    size_t tuned = s->n_tuned_now + s->n_tuned_cached;
    if (s->n_choice)
        fprintf(f, "autotune: %zu of %zu node%s with a choice of kernels run%s a tuned one "
                "(%zu from the cache%s%s, %zu tuned now)\n", tuned, s->n_choice,
                s->n_choice == 1 ? "" : "s", s->n_choice == 1 ? "s" : "", s->n_tuned_cached,
                s->tuner ? " " : "", s->tuner ? gf_tuner_path(s->tuner) : "", s->n_tuned_now);
}

size_t gf_session_print_fallbacks(const struct gf_session *s, FILE *f)
{
    if (!s->planned || !s->n_fallback)
        return 0;
    int count[GF_OP_COUNT] = {0};
    for (size_t k = 0; k < s->n_steps; k++)
        if (s->steps[k].on_cpu && !s->steps[k].folded)
            count[s->steps[k].node->op]++;
    fprintf(f, "note: %zu node%s ran on the CPU (no %s kernel):", s->n_fallback,
            s->n_fallback == 1 ? "" : "s", s->be->ops->name);
    const char *sep = " ";
    for (int op = 0; op < GF_OP_COUNT; op++)
        if (count[op]) {
            fprintf(f, "%s%s x%d", sep, gf_op_get_info(op)->name, count[op]);
            sep = ", ";
        }
    fputc('\n', f);
    return s->n_fallback;
}

size_t gf_session_print_tuning(const struct gf_session *s, FILE *f)
{
    size_t lines = 0;
    for (size_t i = 0; s->tuner && i < gf_tuner_warning_count(s->tuner); i++, lines++)
        fprintf(f, "warning: %s\n", gf_tuner_warning(s->tuner, i));
    if (s->tune_note[0] && ++lines)
        fprintf(f, "warning: %s\n", s->tune_note);
    size_t used = s->n_tuned_now + s->n_tuned_cached;
    if (used && ++lines)
        fprintf(f, "note: %zu node%s use%s tuned kernels from %s (%zu tuned during this run)\n",
                used, used == 1 ? "" : "s", used == 1 ? "s" : "", gf_tuner_path(s->tuner),
                s->n_tuned_run);
    return lines;
}

const char *gf_session_backend(const struct gf_session *s)
{
    return s->be->ops->name;
}

const char *gf_session_device(const struct gf_session *s)
{
    return s->be->ops->device_name(s->be);
}

/* ---- comparison ------------------------------------------------------------------------ */

bool gf_tensor_allclose(const struct gf_tensor *got, const struct gf_tensor *want,
                        double rtol, double atol, double *worst)
{
    *worst = 0;
    if (got->dtype != want->dtype || got->rank != want->rank) {
        *worst = INFINITY;
        return false;
    }
    for (int i = 0; i < got->rank; i++)
        if (got->dims[i] != want->dims[i]) {
            *worst = INFINITY;
            return false;
        }
    bool ok = true;
    if (want->dtype == GF_STRING) {
        for (size_t i = 0; i < want->nelem; i++)
            if (got->strings[i].len != want->strings[i].len ||
                (want->strings[i].len && /* empty strings may have no data */
                 memcmp(got->strings[i].data, want->strings[i].data, want->strings[i].len)))
                ok = false;
        return ok;
    }
    for (size_t i = 0; i < want->nelem; i++) {
        double g = gf_tensor_get_f64(got, i), w = gf_tensor_get_f64(want, i);
        if ((isnan(w) && isnan(g)) || (isinf(w) && g == w))
            continue;
        double err = fabs(g - w);
        if (!(err <= atol + rtol * fabs(w)))
            ok = false;
        if (!(err <= *worst))
            *worst = err;
    }
    return ok;
}
