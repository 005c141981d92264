/*
 * The trainer: parameter selection, tied copies, the training graph
 * (autodiff on a copy of the model), one session, and the step loop
 * (micro-batches, NaN/Inf checks, clipping, the optimizer, in place).
 * Checkpoints are the forward model with extra initializers holding the
 * optimizer state.  Data loading (folders of TensorProto files, token
 * files) closes the file.
 *
 * Training stays on the session's backend: parameters, gradients and the
 * optimizer state are flat fp32 buffers of backend memory, allocated once;
 * the session reads each parameter from, and writes each gradient into, a
 * view of them; the accumulation, the gradient norm (which is also the
 * NaN/Inf check), clipping, the update and the tied copies are kernels
 * (the optimizer ops of graph/ops.def), a few launches for all parameters.
 * Per step only the batch goes in and the loss and the norm come out.  The
 * parameters' host copies (p->t->data) are refreshed from the device when
 * someone reads them: exports, checkpoints, gf_trainer_get_param, and the
 * diagnosis of a NaN.  On the CPU the buffers are host memory and the host
 * copies are views of P: nothing is copied at all.
 *
 * CUDA Graphs: the session captures forward + backward on its second run
 * and replays it from the third (gf_session_run; P and G are bound, so
 * their addresses are fixed).  With one micro-batch on a backend that
 * captures, the trainer's launches are the session's epilogue
 * (gf_session_set_epilogue; step_in_graph), captured into the same last
 * graph: the tied copies' gradients, GradNorm, the update and the tied
 * copies' values.  Nothing in them changes per launch: the update reads
 * the step's learning rate and step count from a small buffer the trainer
 * writes before the run (gf_optim_stage), and GradNorm's output from
 * memory, computing torch's clipping coefficient itself and changing
 * nothing when the norm is not finite.  So a step is: the batch and the
 * scalars in, one replay, the loss and the norm out; the host then checks
 * the loss and the norm as before (a norm not finite: the micro-batch runs
 * again, the update staged to skip, to find the gradient: find_bad_gradient).
 * A loss that is not finite makes the norm NaN (the guard element after
 * the masters holds 0 x the loss: layout()), so nothing is updated then
 * either, as on the host path.  With several micro-batches the trainer's launches run between
 * the session's runs, as before: GradNorm read by the host, the update's
 * scalars passed as arguments.  GRAPHFUSE_TRAIN_IN_GRAPH=1 takes the
 * epilogue path on any backend (tests/run_train_in_graph.sh: the same
 * losses on the CPU and OpenCL), =0 never.
 *
 * Precision (o.precision, docs/precision.md): gf_pass_precision rewrites
 * the training model only (training_graph); exports start from the
 * caller's serialized model, so they keep its fp32 graph.  fp16 adds
 * GradScaler's dynamic loss scaling: the backward differentiates
 * Mul(loss, S), S an initializer bound to one float of backend memory that
 * the trainer writes before each step (write_scale; a replayed CUDA graph
 * reads it there, and changing S replans nothing); the gradients in G are
 * S times the loss's.  update() divides GradNorm's norm by S (exact, S a
 * power of 2) for clipping and the report, and hands the optimizer
 * grad_scale = clipping coefficient / S.  A norm that is not finite is an
 * overflow of the fp16 backward, expected: the step is skipped (nothing
 * updated, the optimizer's step count kept), S halved, and no diagnosis
 * runs; 2000 (o.loss_scale_window) good steps in a row double S.  A loss
 * that is not finite is the forward's, which no scale fixes: diagnosed
 * and stopped as in fp32.  In the session's epilogue (step_in_graph) the
 * staged hyper's grad_scale is 1 / S: the captured update clips on the
 * norm in memory times 1 / S and scales the gradient by it, the same
 * floats the host path hands it, and skips itself on an overflow.
 *
 * Buffers (n_m: elements of the masters, n_all: of every parameter, each
 * parameter at an offset aligned for a view; the gaps stay zero):
 *   P        [n_all]  the parameters: masters in group order, then copies
 *   G        [n_all]  the gradient outputs of one micro-batch; with one
 *                     micro-batch also the accumulator (tied copies' added
 *                     into their master's, transposed back)
 *   A        [n_m]    with several micro-batches: the mean of their
 *                     gradients (else G)
 *   optimizer [n_m] x 0..2  fp32 state (optim.c)
 *   PL       [lo, hi) bf16 / fp16 training: the low copies of the masters the
 *                     forward reads (low_copies), P's range cast after each
 *                     update; offsets aligned for 2-byte views then
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "exec_priv.h"
#include "gf_passes.h"

#define STATE_NAME "graphfuse.train.state"
#define STATE_VERSION 1
#define STATE_LEN 8
#define SCALE_NAME "graphfuse.train.loss_scale" /* checkpoints: [S, good, skipped] */

struct param {
    const char *name;    /* in the training model's arena */
    struct gf_value *v;  /* training model value */
    struct gf_tensor *t; /* its writable tensor (arena) */
    size_t nelem;
    int master;          /* index of the param it is a copy of, or -1 */
    bool transposed;     /* holds the master's transpose (both 2-D) */
    size_t group;        /* optimizer tensor it belongs to */
    size_t grad_out;     /* graph output holding its gradient */
    size_t off;          /* elements into P and G (and A, for a master) */
    void *pv, *gv;       /* views of P and G (backend memory) */
    struct gf_value *low_v; /* its low copy (a master's; low_copies), or NULL */
    void *lv;            /* the copy's view of PL */
};

/* Where a step's time and bytes went (train --profile). */
struct step_prof {
    double ms, graph_ms, optim_ms; /* wall; nodes; trainer kernels (synchronized) */
    struct gf_traffic traffic;    /* every copy of the step */
    size_t batch_bytes;           /* of which the batches' tensors */
    int micro;
};

struct gf_trainer {
    struct gf_trainer_opts o;
    char *loss_name;
    uint8_t *orig;        /* the caller's model, serialized: exports start from it */
    size_t orig_len;
    char *dir;            /* its folder, for external data */
    struct gf_model *m;   /* training model: forward + backward */
    struct gf_session *s;
    size_t loss_out;
    size_t n_params;
    struct param *p;
    size_t n_groups;
    struct gf_backend *be;  /* the session's */
    bool device;            /* be is no host memory: P, G, A live on the device */
    size_t n_m, n_all;      /* elements of the masters, of every parameter */
    void *P, *G, *A;        /* the flat buffers (A NULL: G accumulates) */
    void *norm;             /* one double of backend memory: GradNorm's output */
    bool in_graph;          /* the optimizer's launches are the session's epilogue */
    void *loss_dev;         /* in_graph: the loss output, bound (one float) */
    size_t guard_off;       /* in_graph: G's element after the masters: 0 x the loss */
    void *guard;            /* its view */
    struct gf_model *ops;   /* the nodes of the trainer's kernels */
    struct gf_devop acc, acc_t, gnorm, transpose, zero_times; /* zero_times: in_graph */
    struct gf_traffic traffic; /* copies of the trainer's own (and its kernels') */
    bool host_stale;        /* P moved on since the host copies were refreshed */
    float *host_tmp;        /* staging of one tensor's state (checkpoints) */
    struct step_prof prof;  /* the last step */
    struct gf_optim *opt;
    int64_t step;
    bool diverged;        /* the last step met a NaN or Inf */
    char fuse_note[512];  /* why fusion was left out, or "" */
    struct gf_param_class *cls; /* every float initializer of the forward graph */
    size_t n_cls;
    char **untied;        /* initializers given a copy per use (--untie), in order */
    size_t n_untied;
    /* fp16 loss scaling (GradScaler): the backward starts from S x loss */
    bool scaling;
    double S;             /* the scale of the next step (a power of 2) */
    int64_t good;         /* consecutive good steps since S last changed */
    int64_t n_skipped;    /* steps skipped */
    struct gf_value *scale_v; /* "graphfuse.loss_scale": an initializer bound to scale_dev */
    void *scale_dev;      /* one float of backend memory: S, written before each step */
    const char *seed;     /* the value autodiff differentiates: the loss, or S x loss */
    /* the masters' 16-bit copies the forward reads (low_copies) */
    size_t n_low;         /* parameters with one */
    enum gf_dtype low;    /* their type */
    size_t low_lo, low_hi; /* the elements of P cast into PL after each update */
    void *PL;             /* [low_hi - low_lo] 16-bit: P's elements from low_lo on */
    void *low_in, *low_out; /* views of P and PL over them */
    struct gf_devop cast; /* Cast(P[lo, hi)) -> PL[lo, hi) */
};

struct gf_data {
    struct gf_model *arena; /* owns the tensors */
    size_t n_inputs;
    bool is_tokens;
    size_t n_batches;         /* folder: batches[b * n_inputs + i] */
    struct gf_tensor **batches;
    size_t *batch_tokens;
    uint64_t cursor;          /* micro-batches handed out */
    uint8_t *tok;             /* token file */
    size_t n_tok;
    int width;
    int64_t rows, seq;
    uint64_t rng;
    struct gf_tensor **cur;   /* tokens: one tensor per input */
    size_t last_tokens;
    char desc[512];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void gf_trainer_opts_init(struct gf_trainer_opts *o, enum gf_optim_kind kind)
{
    memset(o, 0, sizeof(*o));
    gf_optim_opts_init(&o->optim, kind);
    o->schedule = GF_LR_CONSTANT;
    o->steps = 1;
    o->accumulate = 1;
}

/* ---- parameters ------------------------------------------------------------- */

struct selector {
    regex_t trainable, freeze;
    bool have_trainable, have_freeze;
};

static enum gf_status compile(const char *pat, const char *what, regex_t *re, bool *have)
{
    *have = false;
    if (!pat)
        return GF_OK;
    int rc = regcomp(re, pat, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char msg[256];
        regerror(rc, re, msg, sizeof(msg));
        return gf_error(GF_ERR_ARG, "bad %s regular expression '%s': %s", what, pat, msg);
    }
    *have = true;
    return GF_OK;
}

static void selector_free(struct selector *s)
{
    if (s->have_trainable)
        regfree(&s->trainable);
    if (s->have_freeze)
        regfree(&s->freeze);
}

/* Float initializers: with --trainable those it matches, else those
 * gf_params_classify calls parameters (not eps and scales, masks, RoPE
 * tables, inv_freq) or, differentiated, those of 2+ elements with a
 * "_grad" output; --freeze then takes some out. */
static bool selected(const struct gf_trainer *t, const struct selector *s,
                     const struct gf_value *v)
{
    if (!v->init || v->init->dtype != GF_FLOAT)
        return false;
    if (s->have_trainable ? regexec(&s->trainable, v->name, 0, NULL, 0) != 0
        : t->o.differentiated ? v->init->nelem < 2 /* the file names its parameters */
                              : gf_trainer_param_kind(t, v->name) != GF_PARAM_TRAINED)
        return false;
    return !(s->have_freeze && regexec(&s->freeze, v->name, 0, NULL, 0) == 0);
}

/* True when every element has the same bits (zeros, ones): such copies are
 * not taken for tied weights. */
static bool uniform(const struct gf_tensor *t)
{
    const uint32_t *x = t->data;
    for (size_t i = 1; i < t->nelem; i++)
        if (x[i] != x[0])
            return false;
    return true;
}

/* b holds the same values as a (same shape), or a's transpose (2-D). */
static bool is_copy(const struct gf_tensor *a, const struct gf_tensor *b, bool *transposed)
{
    if (a->nelem != b->nelem || a->nelem < 2 || a->rank != b->rank)
        return false;
    *transposed = false;
    if (memcmp(a->dims, b->dims, (size_t)a->rank * sizeof(int64_t)) == 0 &&
        memcmp(a->data, b->data, a->nbytes) == 0)
        return !uniform(a);
    if (a->rank != 2 || a->dims[0] != b->dims[1] || a->dims[1] != b->dims[0])
        return false;
    const uint32_t *x = a->data, *y = b->data;
    size_t r = (size_t)a->dims[0], c = (size_t)a->dims[1];
    for (size_t i = 0; i < r; i++)
        for (size_t j = 0; j < c; j++)
            if (x[i * c + j] != y[j * r + i])
                return false;
    *transposed = true;
    return !uniform(a);
}

/* Masters get groups in order; each copy joins the first earlier param it
 * copies. */
static void find_ties(struct gf_trainer *t)
{
    t->n_groups = 0;
    for (size_t i = 0; i < t->n_params; i++) {
        struct param *p = &t->p[i];
        p->master = -1;
        for (size_t j = 0; j < i && !t->o.no_tie; j++) {
            bool tr;
            if (t->p[j].master < 0 && is_copy(t->p[j].v->init, p->v->init, &tr)) {
                p->master = (int)j;
                p->transposed = tr;
                p->group = t->p[j].group;
                break;
            }
        }
        if (p->master < 0)
            p->group = t->n_groups++;
    }
}

static enum gf_status add_param(struct gf_trainer *t, struct gf_value *v)
{
    struct param *p = realloc(t->p, (t->n_params + 1) * sizeof(*p));
    if (!p)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    t->p = p;
    t->p[t->n_params++] = (struct param){.name = v->name, .v = v, .nelem = v->init->nelem,
                                         .master = -1};
    return GF_OK;
}

/* In differentiated mode only initializers that are graph inputs with a
 * "<name>_grad" output qualify. */
static bool has_grad_output(const struct gf_graph *g, const struct gf_value *v)
{
    size_t n = strlen(v->name);
    for (size_t i = 0; i < g->n_outputs; i++) {
        const char *o = g->outputs[i]->name;
        if (strncmp(o, v->name, n) == 0 && strcmp(o + n, "_grad") == 0)
            return true;
    }
    return false;
}

static enum gf_status classify(struct gf_trainer *t)
{
    free(t->cls);
    t->cls = NULL;
    return gf_params_classify(t->m->graph, &t->cls, &t->n_cls);
}

enum gf_param_kind gf_trainer_param_kind(const struct gf_trainer *t, const char *name)
{
    for (size_t i = 0; i < t->n_cls; i++)
        if (strcmp(t->cls[i].name, name) == 0)
            return t->cls[i].kind;
    return GF_PARAM_UNUSED;
}

static bool in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

static enum gf_status remember_untied(struct gf_trainer *t, const char *name)
{
    char **u = realloc(t->untied, (t->n_untied + 1) * sizeof(*u));
    if (!u)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    t->untied = u;
    if (!(u[t->n_untied] = strdup(name)))
        return gf_error(GF_ERR_NOMEM, "out of memory");
    t->n_untied++;
    return GF_OK;
}

/* --untie, on the first build: every merged parameter for "all", else
 * the named initializers, remembered in order. */
static enum gf_status pick_untie(struct gf_trainer *t, const struct gf_graph *g)
{
    if (!t->o.untie || t->untied)
        return GF_OK;
    bool all = strcmp(t->o.untie, "all") == 0;
    struct gf_param_class *c;
    size_t n;
    enum gf_status st = gf_params_classify(g, &c, &n);
    for (size_t i = 0; st == GF_OK && i < n; i++)
        if (all ? c[i].merged : in_list(t->o.untie, c[i].v->name))
            st = remember_untied(t, c[i].v->name);
    free(c);
    for (const char *p = all ? NULL : t->o.untie; st == GF_OK && p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        bool found = false;
        for (size_t i = 0; i < t->n_untied; i++)
            found |= strlen(t->untied[i]) == len && strncmp(t->untied[i], p, len) == 0;
        if (!found)
            st = gf_error(GF_ERR_ARG, "--untie: no float initializer named '%.*s'", (int)len, p);
        p = e ? e + 1 : NULL;
    }
    return st;
}

/* Unties the remembered initializers of g, in order: every build (and
 * every export) gives the copies the same names. */
static enum gf_status apply_untie(const struct gf_trainer *t, struct gf_graph *g)
{
    enum gf_status st = GF_OK;
    for (size_t i = 0; st == GF_OK && i < t->n_untied; i++) {
        struct gf_value *v = gf_graph_find(g, t->untied[i]);
        st = v ? gf_params_untie(g, v, NULL)
               : gf_error(GF_ERR_INTERNAL, "--untie: '%s' went missing", t->untied[i]);
    }
    return st;
}

static enum gf_status untie(struct gf_trainer *t, struct gf_graph *g)
{
    enum gf_status st = pick_untie(t, g);
    return st == GF_OK ? apply_untie(t, g) : st;
}

size_t gf_trainer_class_count(const struct gf_trainer *t)
{
    return t->n_cls;
}

const struct gf_param_class *gf_trainer_class(const struct gf_trainer *t, size_t i)
{
    return i < t->n_cls ? &t->cls[i] : NULL;
}

bool gf_trainer_is_trained(const struct gf_trainer *t, const char *name)
{
    for (size_t i = 0; i < t->n_params; i++)
        if (strcmp(t->p[i].name, name) == 0)
            return true;
    return false;
}

static enum gf_status select_params(struct gf_trainer *t)
{
    struct selector s;
    struct gf_graph *g = t->m->graph;
    enum gf_status st = compile(t->o.trainable, "--trainable", &s.trainable, &s.have_trainable);
    if (st == GF_OK)
        st = compile(t->o.freeze, "--freeze", &s.freeze, &s.have_freeze);
    for (size_t i = 0; st == GF_OK && i < g->n_inits; i++) {
        struct gf_value *v = g->inits[i];
        if (t->o.differentiated && !(v->is_input && has_grad_output(g, v)))
            continue;
        if (selected(t, &s, v))
            st = add_param(t, v);
    }
    selector_free(&s);
    if (st == GF_OK && t->n_params == 0)
        st = gf_error(GF_ERR_INVALID, "no trainable parameter: no float initializer%s%s%s%s",
                      t->o.trainable ? " matches --trainable" : "",
                      t->o.freeze ? " (after --freeze)" : "",
                      t->o.differentiated ? " with a '_grad' output" : "",
                      t->o.trainable ? "" : " meets activations (see --list-params)");
    if (st == GF_OK)
        find_ties(t);
    return st;
}

/* ---- the training graph ---------------------------------------------------------- */

static bool scalar_float(const struct gf_value *v)
{
    return v->type.kind == GF_TYPE_TENSOR && v->type.dtype == GF_FLOAT &&
           v->type.rank >= 0 && gf_type_numel(&v->type) == 1;
}

/* The loss: the named output, else "loss", else the only scalar float output. */
static enum gf_status find_loss(struct gf_trainer *t, const struct gf_graph *g)
{
    const struct gf_value *found = NULL;
    size_t n_scalar = 0;
    for (size_t i = 0; i < g->n_outputs; i++) {
        const struct gf_value *v = g->outputs[i];
        if (t->o.loss ? strcmp(v->name, t->o.loss) == 0 : strcmp(v->name, "loss") == 0) {
            found = v;
            break;
        }
        if (!t->o.loss && scalar_float(v) && n_scalar++ == 0)
            found = v;
    }
    if (t->o.loss && !found)
        return gf_error(GF_ERR_ARG, "the model has no output named '%s'", t->o.loss);
    if (!found || (!t->o.loss && strcmp(found->name, "loss") != 0 && n_scalar != 1))
        return gf_error(GF_ERR_INVALID, "cannot tell the loss: no output named 'loss' and %s "
                        "scalar float outputs (give --loss NAME)", n_scalar ? "several" : "no");
    if (found->type.dtype != GF_FLOAT)
        return gf_error(GF_ERR_UNSUPPORTED, "loss '%s' is %s; only float losses are trained",
                        found->name, gf_dtype_name(found->type.dtype));
    t->loss_name = strdup(found->name);
    return t->loss_name ? GF_OK : gf_error(GF_ERR_NOMEM, "out of memory");
}

/* Keeps the loss (and, differentiated, the gradients) as the only outputs:
 * logits need not outlive the step. */
static enum gf_status keep_outputs(struct gf_trainer *t)
{
    struct gf_graph *g = t->m->graph;
    for (size_t i = g->n_outputs; i-- > 0;) {
        const char *name = g->outputs[i]->name;
        bool keep = strcmp(name, t->loss_name) == 0;
        for (size_t k = 0; !keep && t->o.differentiated && k < t->n_params; k++)
            keep = has_grad_output(g, t->p[k].v) &&
                   strncmp(name, t->p[k].name, strlen(t->p[k].name)) == 0 &&
                   strcmp(name + strlen(t->p[k].name), "_grad") == 0;
        if (!keep) {
            enum gf_status st = gf_pass_drop_output(g, name);
            if (st != GF_OK)
                return st;
        }
    }
    return GF_OK;
}

/* Cleanup and fusion before autodiff.  Parameters become graph inputs
 * first, so that no pass folds them or merges two equal ones. */
static enum gf_status fuse(struct gf_trainer *t)
{
    struct gf_graph *g = t->m->graph;
    enum gf_status st = GF_OK;
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++)
        if (!t->p[i].v->is_input)
            st = gf_graph_add_input(g, t->p[i].v);
    struct gf_cleanup_opts co = {.eval = gf_exec_eval_node, .keep_dropout = true};
    if (st == GF_OK)
        st = gf_graph_infer_shapes(g);
    if (st == GF_OK)
        st = gf_pass_cleanup(g, &co, NULL);
    /* attention too: the backward then keeps no [Sq, Sk] probabilities */
    static const char *const attention[] = {"attention"};
    const char *off[64];
    char names[1024];
    size_t n_off = 0;
    snprintf(names, sizeof(names), "%s", t->o.disable ? t->o.disable : "");
    for (char *p = strtok(names, ","); p && n_off < 64; p = strtok(NULL, ","))
        off[n_off++] = p;
    struct gf_fuse_opts fo = {.enabled = attention, .n_enabled = 1, .disabled = off,
                              .n_disabled = n_off};
    if (st == GF_OK)
        st = gf_pass_fuse(t->m, &fo, NULL);
    /* bf16 / fp16: Transposes, Reshapes, GQA's Expand (and their gradients)
     * in the low type, once the patterns no longer need the fp32 forms */
    if (st == GF_OK)
        st = gf_pass_precision_move_casts(t->m, NULL);
    return st;
}

static enum gf_status output_index(const struct gf_graph *g, const char *name, size_t *idx)
{
    for (size_t i = 0; i < g->n_outputs; i++)
        if (strcmp(g->outputs[i]->name, name) == 0) {
            *idx = i;
            return GF_OK;
        }
    return gf_error(GF_ERR_INTERNAL, "the training graph has no output '%s'", name);
}

/* gf_pass_autodiff for the selected parameters; the gradients become
 * graph outputs "<param>_grad" (made unique). */
static enum gf_status autodiff(struct gf_trainer *t)
{
    const char **names = calloc(t->n_params + 1, sizeof(*names));
    if (!names)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < t->n_params; i++)
        names[i] = t->p[i].name;
    struct gf_autodiff_opts ao = {.loss = t->seed ? t->seed : t->loss_name,
                                  .n_params = t->n_params,
                                  .params = names};
    struct gf_autodiff_result r;
    enum gf_status st = gf_pass_autodiff(t->m, &ao, &r);
    free(names);
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++) {
        if (i >= r.n_params || r.params[i] != t->p[i].v)
            return gf_error(GF_ERR_INTERNAL, "autodiff returned the parameters in another "
                            "order ('%s')", t->p[i].name);
        st = output_index(t->m->graph, r.grads[i]->name, &t->p[i].grad_out);
    }
    return st;
}

/* The backward graph: gf_pass_autodiff (or, differentiated, the model's
 * own "<param>_grad" outputs); records where each gradient comes out. */
static enum gf_status differentiate(struct gf_trainer *t)
{
    struct gf_graph *g = t->m->graph;
    char name[1024];
    enum gf_status st = GF_OK;
    if (!t->o.differentiated)
        st = autodiff(t);
    for (size_t i = 0; st == GF_OK && t->o.differentiated && i < t->n_params; i++) {
        snprintf(name, sizeof(name), "%s_grad", t->p[i].name);
        st = output_index(g, name, &t->p[i].grad_out);
    }
    if (st == GF_OK)
        st = output_index(g, t->loss_name, &t->loss_out);
    return st;
}

/* ---- parameters, gradients and state on the backend ------------------------------ */

/* n elements rounded up to the backend's view alignment. */
static size_t aligned(const struct gf_trainer *t, size_t n)
{
    /* with low copies, PL's view at the same offset (2 bytes an element) too */
    size_t a = t->be->align / (t->n_low ? sizeof(uint16_t) : sizeof(float));
    return a > 1 ? (n + a - 1) / a * a : n;
}

/* Offsets into P and G: masters first, in group order, then the copies.
 * In the epilogue path (t->in_graph) one more element after the masters,
 * the guard, which the epilogue sets to 0 x the loss: 0, or NaN for a loss
 * that is not finite, so that the gradient norm over the masters' range
 * (which it leaves as it is otherwise: + 0) is not finite either and the
 * update skips itself, as the host path skips it for such a loss. */
static void layout(struct gf_trainer *t)
{
    size_t off = 0;
    for (int copies = 0; copies < 2; copies++) {
        for (size_t i = 0; i < t->n_params; i++)
            if ((t->p[i].master >= 0) == copies) {
                t->p[i].off = off;
                off += aligned(t, t->p[i].nelem);
            }
        if (!copies && t->in_graph) { /* the guard: G's copy of 0 x the loss */
            t->guard_off = off;
            off += aligned(t, 1);
        }
        if (!copies)
            t->n_m = off;
    }
    t->n_all = off;
}

static float *at(void *base, size_t off)
{
    return (float *)base + off;
}

/* A view of n floats at element `off` of backend buffer `base`. */
static void *view_at(struct gf_trainer *t, void *base, size_t off, size_t n)
{
    if (!n)
        return NULL;
    void *v = t->be->ops->view(t->be, base, off * sizeof(float), n * sizeof(float));
    if (!v && !t->device)
        v = at(base, off);
    return v;
}

/* A view of PL's n 16-bit elements from P's element `off` on. */
static void *view_low(struct gf_trainer *t, size_t off, size_t n)
{
    if (!n)
        return NULL;
    size_t at = (off - t->low_lo) * sizeof(uint16_t);
    void *v = t->be->ops->view(t->be, t->PL, at, n * sizeof(uint16_t));
    if (!v && !t->device)
        v = (char *)t->PL + at;
    return v;
}

static void release_view(struct gf_trainer *t, void *v)
{
    if (v && t->device && t->be->ops->view_release)
        t->be->ops->view_release(t->be, v);
}

/* Host <-> backend copies of n floats at element `off` of buffer `base`
 * (outside the step: not counted). */
static enum gf_status read_slice(struct gf_trainer *t, float *host, void *base, size_t off,
                                 size_t n)
{
    if (!t->device) {
        memcpy(host, at(base, off), n * sizeof(float));
        return GF_OK;
    }
    void *v = view_at(t, base, off, n);
    enum gf_status st = !n ? GF_OK : v ? t->be->ops->copy_out(t->be, host, v, n * sizeof(float))
                                       : GF_ERR_NOMEM;
    release_view(t, v);
    return st;
}

static enum gf_status write_slice(struct gf_trainer *t, void *base, size_t off,
                                  const float *host, size_t n)
{
    if (!t->device) {
        memmove(at(base, off), host, n * sizeof(float));
        return GF_OK;
    }
    void *v = view_at(t, base, off, n);
    enum gf_status st = !n ? GF_OK : v ? t->be->ops->copy_in(t->be, v, host, n * sizeof(float))
                                       : GF_ERR_NOMEM;
    release_view(t, v);
    return st;
}

/* The parameter's host tensor: on a device a writable copy in the training
 * model's arena (loaded data may be mapped read-only or unaligned), which
 * refresh_host brings up to date; on the CPU a header over its bytes in P,
 * which the session and the optimizer share. */
static enum gf_status own_param(struct gf_trainer *t, struct param *p)
{
    const struct gf_tensor *src = p->v->init;
    struct gf_tensor *c;
    if (t->device) {
        c = gf_tensor_new(t->m, p->name, GF_FLOAT, src->rank, src->dims, src->data);
    } else {
        c = gf_model_alloc(t->m, sizeof(*c));
        int64_t *dims = gf_model_alloc(t->m, (size_t)(src->rank + 1) * sizeof(*dims));
        if (c && dims) {
            memset(c, 0, sizeof(*c));
            if (src->rank > 0) /* a scalar's dims may be NULL */
                memcpy(dims, src->dims, (size_t)src->rank * sizeof(*dims));
            *c = (struct gf_tensor){.name = p->name, .dtype = GF_FLOAT, .rank = src->rank,
                                    .dims = dims, .nelem = src->nelem, .nbytes = src->nbytes,
                                    .data = at(t->P, p->off)};
            memcpy(c->data, src->data, src->nbytes);
        } else {
            c = NULL;
        }
    }
    if (!c)
        return gf_error(GF_ERR_NOMEM, "out of memory copying '%s'", p->name);
    enum gf_status st = gf_value_set_initializer(p->v, c);
    if (st != GF_OK)
        return st;
    p->t = c;
    return t->device ? write_slice(t, t->P, p->off, c->data, p->nelem) : GF_OK;
}

/* The nodes of the trainer's own kernels. */
static enum gf_status make_ops(struct gf_trainer *t)
{
    float scale = t->o.accumulate > 1 ? (float)(1.0 / t->o.accumulate) : 1.0f;
    struct gf_devop *ops[] = {&t->acc, &t->acc_t, &t->gnorm, &t->transpose, &t->zero_times};
    static const char *const types[] = {"GradAccumulate", "GradAccumulate", "GradNorm",
                                        "Transpose", "GradAccumulate"};
    static const int64_t perm[2] = {1, 0};
    if (!(t->ops = gf_model_new(8, "trainer")))
        return gf_error(GF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < 5; i++) {
        ops[i]->be = t->be;
        ops[i]->traffic = &t->traffic;
        ops[i]->node = gf_devop_node(t->ops, types[i], i == 3 ? "" : NULL,
                                     i < 2 || i == 4 ? 2 : 1, 1);
        if (!ops[i]->node)
            return gf_error(GF_ERR_NOMEM, "out of memory");
    }
    if (gf_node_set_attr_float(t->zero_times.node, "scale", 0.0f) != GF_OK ||
        gf_node_set_attr_float(t->acc.node, "scale", scale) != GF_OK ||
        gf_node_set_attr_float(t->acc_t.node, "scale", scale) != GF_OK ||
        gf_node_set_attr_int(t->acc_t.node, "transpose", 1) != GF_OK ||
        gf_node_set_attr_ints(t->transpose.node, "perm", 2, perm) != GF_OK)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    return GF_OK;
}

static enum gf_status epilogue(void *ctx);

/* Whether the step's optimizer launches run as the session's epilogue
 * (captured into its last CUDA graph): one micro-batch on a backend that
 * captures; GRAPHFUSE_TRAIN_IN_GRAPH=1 asks for it on any backend (the
 * epilogue then runs after the last node: tests of the path on the CPU),
 * =0 never. */
static bool in_graph_wanted(const struct gf_trainer *t)
{
    const char *env = getenv("GRAPHFUSE_TRAIN_IN_GRAPH");
    if (t->o.accumulate != 1 || (env && strcmp(env, "0") == 0))
        return false;
    return (env && strcmp(env, "1") == 0) || t->be->ops->capture_begin != NULL;
}

static enum gf_status devop(struct gf_trainer *t, struct gf_devop *op, const struct gf_tview *in,
                            size_t n_in, struct gf_tview *out);

/* The low copies take their masters' values: one Cast of P's range. */
static enum gf_status sync_low(struct gf_trainer *t)
{
    if (!t->n_low)
        return GF_OK;
    struct gf_tview in, out;
    gf_devop_view(&in, t->low_in, t->low_hi - t->low_lo, 0);
    gf_devop_view(&out, t->low_out, t->low_hi - t->low_lo, 0);
    out.dtype = t->low;
    return devop(t, &t->cast, &in, 1, &out);
}

/* PL, each low copy bound to its view, the Cast over the range of P they
 * cover (with the model's opset: Cast-19 rounds to bf16, as the graph's
 * Casts did), and PL filled. */
static enum gf_status setup_low(struct gf_trainer *t)
{
    t->low_lo = SIZE_MAX;
    t->low_hi = 0;
    for (size_t i = 0; i < t->n_params; i++) {
        const struct param *p = &t->p[i];
        if (p->low_v && p->nelem) {
            t->low_lo = p->off < t->low_lo ? p->off : t->low_lo;
            t->low_hi = p->off + p->nelem > t->low_hi ? p->off + p->nelem : t->low_hi;
        }
    }
    if (t->low_hi <= t->low_lo) {
        t->n_low = 0;
        return GF_OK;
    }
    if (!(t->PL = gf_exec_zeroed(t->be, (t->low_hi - t->low_lo + 1) / 2, NULL)))
        return gf_error(GF_ERR_NOMEM, "out of %s memory for the parameters' low copies",
                        t->be->ops->name);
    enum gf_status st = GF_OK;
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++) {
        struct param *p = &t->p[i];
        if (!p->low_v || !p->nelem)
            continue;
        if (!(p->lv = view_low(t, p->off, p->nelem)))
            return gf_error(GF_ERR_NOMEM, "no view of the low copy of '%s': %s", p->name,
                            gf_last_error());
        st = gf_session_bind_param(t->s, p->low_v, p->lv, p->nelem * sizeof(uint16_t));
    }
    t->low_in = view_at(t, t->P, t->low_lo, t->low_hi - t->low_lo);
    t->low_out = view_low(t, t->low_lo, t->low_hi - t->low_lo);
    if (st == GF_OK && (!t->low_in || !t->low_out))
        return gf_error(GF_ERR_NOMEM, "no view of the parameters for their low copies: %s",
                        gf_last_error());
    t->cast.be = t->be;
    t->cast.traffic = &t->traffic;
    if (st == GF_OK &&
        ((st = gf_model_set_opset(t->ops, "", gf_model_opset(t->m, ""))) != GF_OK ||
         !(t->cast.node = gf_devop_node(t->ops, "Cast", "", 1, 1)) ||
         gf_node_set_attr_int(t->cast.node, "to", t->low) != GF_OK))
        return st != GF_OK ? st : gf_error(GF_ERR_NOMEM, "out of memory");
    return st == GF_OK ? sync_low(t) : st;
}

/* P, G (and A) on the session's backend; every parameter and gradient
 * output bound to its view; the optimizer state beside them. */
static enum gf_status setup_device(struct gf_trainer *t)
{
    t->be = gf_session_get_backend(t->s);
    t->device = !t->be->host_memory;
    t->in_graph = in_graph_wanted(t);
    layout(t);
    size_t big = 0;
    for (size_t i = 0; i < t->n_params; i++)
        big = t->p[i].nelem > big ? t->p[i].nelem : big;
    if (!(t->P = gf_exec_zeroed(t->be, t->n_all, NULL)) ||
        !(t->G = gf_exec_zeroed(t->be, t->n_all, NULL)) ||
        (t->o.accumulate > 1 && !(t->A = gf_exec_zeroed(t->be, t->n_m, NULL))) ||
        !(t->norm = t->be->ops->alloc(t->be, sizeof(double))) ||
        (t->in_graph && !(t->loss_dev = gf_exec_zeroed(t->be, 1, NULL))) ||
        (t->in_graph && !(t->guard = view_at(t, t->G, t->guard_off, 1))) ||
        !(t->host_tmp = malloc((big + 1) * sizeof(float))))
        return gf_error(GF_ERR_NOMEM, "out of %s memory for %zu parameters and their "
                        "gradients", t->be->ops->name, t->n_all);
    enum gf_status st = make_ops(t);
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++) {
        struct param *p = &t->p[i];
        size_t bytes = p->nelem * sizeof(float);
        p->pv = view_at(t, t->P, p->off, p->nelem);
        p->gv = view_at(t, t->G, p->off, p->nelem);
        if ((!p->pv || !p->gv) && p->nelem)
            return gf_error(GF_ERR_NOMEM, "no view of '%s' in the parameters' buffers: %s",
                            p->name, gf_last_error());
        if ((st = own_param(t, p)) == GF_OK &&
            (st = gf_session_bind_param(t->s, p->v, p->pv, bytes)) == GF_OK)
            st = gf_session_bind_output(t->s, p->grad_out, p->gv, bytes);
    }
    if (st == GF_OK && t->scaling) {
        t->scale_dev = t->device ? gf_exec_zeroed(t->be, 1, NULL) : t->scale_v->init->data;
        st = t->scale_dev ? gf_session_bind_param(t->s, t->scale_v, t->scale_dev, sizeof(float))
                          : gf_error(GF_ERR_NOMEM, "out of memory");
    }
    if (st == GF_OK && t->n_low)
        st = setup_low(t);
    if (st == GF_OK)
        st = gf_optim_new_on(&t->o.optim, t->be, t->n_m, &t->traffic, &t->opt);
    if (st == GF_OK && t->in_graph &&
        (st = gf_session_bind_output(t->s, t->loss_out, t->loss_dev, sizeof(float))) == GF_OK)
        gf_session_set_epilogue(t->s, epilogue, t);
    return st;
}

static void free_device(struct gf_trainer *t)
{
    if (!t->be)
        return;
    for (size_t i = 0; t->p && i < t->n_params; i++) {
        release_view(t, t->p[i].pv);
        release_view(t, t->p[i].gv);
        release_view(t, t->p[i].lv);
    }
    release_view(t, t->guard);
    release_view(t, t->low_in);
    release_view(t, t->low_out);
    struct gf_devop *ops[] = {&t->acc, &t->acc_t, &t->gnorm, &t->transpose, &t->zero_times,
                              &t->cast};
    for (int i = 0; i < 6; i++)
        if (ops[i]->be)
            gf_devop_release(ops[i]);
    void *bufs[] = {t->P, t->G, t->A, t->norm, t->loss_dev, t->PL};
    for (int i = 0; i < 6; i++)
        if (bufs[i])
            t->be->ops->release(t->be, bufs[i]);
    if (t->device && t->scale_dev)
        t->be->ops->release(t->be, t->scale_dev);
    gf_model_free(t->ops);
    free(t->host_tmp);
}

/* The host copies of the parameters from P (a device only, when stale). */
static enum gf_status refresh_host(const struct gf_trainer *ct)
{
    struct gf_trainer *t = (struct gf_trainer *)ct; /* a cache of P: not the trainer's state */
    enum gf_status st = GF_OK;
    if (!t->device || !t->host_stale)
        return GF_OK;
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++)
        st = t->be->ops->copy_out(t->be, t->p[i].t->data, t->p[i].pv,
                                  t->p[i].nelem * sizeof(float));
    if (st == GF_OK)
        t->host_stale = false;
    return st;
}

static enum gf_status check_opts(const struct gf_trainer_opts *o)
{
    char names[1024];
    if (o->disable && strlen(o->disable) >= sizeof(names))
        return gf_error(GF_ERR_ARG, "--disable: list too long");
    snprintf(names, sizeof(names), "%s", o->disable ? o->disable : "");
    for (char *p = strtok(names, ","); p; p = strtok(NULL, ","))
        if (!gf_fuse_pattern_known(p))
            return gf_error(GF_ERR_ARG, "--disable: no fusion pattern named '%s'", p);
    if (o->accumulate < 0)
        return gf_error(GF_ERR_ARG, "invalid micro-batch count %d", o->accumulate);
    if (o->warmup < 0 || o->steps < 0)
        return gf_error(GF_ERR_ARG, "invalid step counts (warmup %lld, steps %lld)",
                        (long long)o->warmup, (long long)o->steps);
    if (!(o->clip_grad_norm >= 0) || !(o->min_lr >= 0))
        return gf_error(GF_ERR_ARG, "invalid clipping norm %g or minimum learning rate %g",
                        o->clip_grad_norm, o->min_lr);
    if (o->schedule != GF_LR_CONSTANT && o->schedule != GF_LR_COSINE)
        return gf_error(GF_ERR_ARG, "unknown learning-rate schedule %d", (int)o->schedule);
    if (o->precision < GF_PRECISION_FP32 || o->precision > GF_PRECISION_FP16)
        return gf_error(GF_ERR_ARG, "unknown precision %d", (int)o->precision);
    if (!(o->loss_scale >= 0) || !isfinite(o->loss_scale) || o->loss_scale_window < 0)
        return gf_error(GF_ERR_ARG, "invalid loss scale %g or window %lld", o->loss_scale,
                        (long long)o->loss_scale_window);
    if (o->precision == GF_PRECISION_FP16 && o->differentiated)
        return gf_error(GF_ERR_UNSUPPORTED, "fp16 loss scaling needs the trainer's own "
                        "backward (the model is already differentiated)");
    return GF_OK;
}

/* fp16: the backward's seed is d(S x loss) = S: a node Mul(loss, S) with S
 * an initializer that is also a graph input (no pass folds it), bound to
 * backend memory the trainer writes before each step (setup_device): S
 * changes without replanning, and a captured CUDA graph reads it there. */
static enum gf_status add_loss_scale(struct gf_trainer *t)
{
    struct gf_graph *g = t->m->graph;
    float s = (float)t->S;
    struct gf_value *loss = gf_graph_find(g, t->loss_name), *out;
    struct gf_tensor *ts = gf_tensor_new(t->m, "graphfuse.loss_scale", GF_FLOAT, 0, NULL, &s);
    if (!loss || !ts || !(t->scale_v = gf_graph_add_initializer(g, ts->name, ts)))
        return gf_error(GF_ERR_NOMEM, "out of memory");
    enum gf_status st = gf_graph_add_input(g, t->scale_v);
    if (st != GF_OK)
        return st;
    if (!(out = gf_graph_new_value(g, NULL, "graphfuse.scaled_loss")))
        return gf_error(GF_ERR_NOMEM, "out of memory");
    out->type = loss->type;
    struct gf_value *in[2] = {loss, t->scale_v};
    if (!gf_graph_add_node(g, "Mul", "", NULL, 2, in, 1, &out))
        return gf_error(GF_ERR_NOMEM, "out of memory");
    t->seed = out->name; /* an output, so that cleanup keeps it */
    st = gf_graph_add_output(g, out);
    return st != GF_OK ? st : gf_graph_infer_shapes(g);
}

/* The Cast of v to a 16-bit float type among v's readers, or NULL. */
static struct gf_node *low_cast_of(const struct gf_value *v)
{
    for (size_t i = 0; i < v->n_uses; i++) {
        struct gf_node *n = v->uses[i].node;
        if (n->op != GF_OP_CAST || n->graph != v->graph || n->n_outputs != 1 || !n->outputs[0])
            continue;
        int64_t to = gf_node_attr_int(n, "to", 0);
        if (to == GF_BFLOAT16 || to == GF_FLOAT16)
            return n;
    }
    return NULL;
}

/* Low copies (bf16 / fp16 training, docs/precision.md): the precision pass
 * reads each fp32 master through one Cast to the low type, a launch per
 * parameter per step.  After autodiff (whose Cast rule has given the
 * masters their fp32 gradients) each such Cast's output becomes an
 * initializer of its own, bound to a view of PL, and the trainer refreshes
 * all of them with one Cast over P's range after each update (sync_low):
 * the same bits the per-parameter Casts gave.  Copies of tied parameters
 * keep their Casts. */
static enum gf_status low_copies(struct gf_trainer *t)
{
    struct gf_graph *g = t->m->graph;
    enum gf_status st = GF_OK;
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++) {
        struct param *p = &t->p[i];
        struct gf_node *c = p->master < 0 ? low_cast_of(p->v) : NULL;
        if (!c || (t->n_low && c->outputs[0]->type.dtype != t->low))
            continue;
        struct gf_value *v = c->outputs[0];
        const struct gf_tensor *src = p->v->init;
        struct gf_tensor *ts = gf_tensor_new(t->m, v->name, v->type.dtype, src->rank, src->dims,
                                             NULL);
        if (!ts)
            return gf_error(GF_ERR_NOMEM, "out of memory for the low copy of '%s'", p->name);
        gf_graph_remove_node(g, c);
        if ((st = gf_value_set_initializer(v, ts)) == GF_OK)
            st = gf_graph_add_input(g, v);
        p->low_v = v;
        t->low = v->type.dtype;
        t->n_low++;
    }
    return st;
}

/* The training model: a fresh copy of the caller's, its loss and
 * parameters, fused when asked, and differentiated. */
static enum gf_status training_graph(struct gf_trainer *t, bool fused)
{
    enum gf_status st = gf_model_load_buffer(t->orig, t->orig_len, t->dir, NULL, &t->m);
    /* the forward graph in the low type, fp32 parameters read through Casts:
     * autodiff gives fp32 gradients, the optimizer keeps fp32 state */
    if (st == GF_OK)
        st = gf_pass_precision(t->m, t->o.precision, NULL);
    if (st == GF_OK)
        st = gf_graph_infer_shapes(t->m->graph);
    if (st == GF_OK)
        st = find_loss(t, t->m->graph);
    if (st == GF_OK)
        st = untie(t, t->m->graph);
    if (st == GF_OK)
        st = classify(t);
    if (st == GF_OK)
        st = select_params(t);
    if (st == GF_OK)
        st = keep_outputs(t);
    if (st == GF_OK && t->scaling)
        st = add_loss_scale(t);
    if (st == GF_OK && fused)
        st = fuse(t);
    if (st == GF_OK)
        st = differentiate(t);
    if (st == GF_OK && !getenv("GRAPHFUSE_NO_LOW_COPIES"))
        st = low_copies(t);
    return st;
}

static void drop_graph(struct gf_trainer *t)
{
    free(t->cls);
    t->cls = NULL;
    t->n_cls = 0;
    gf_model_free(t->m);
    free(t->p);
    free(t->loss_name);
    t->m = NULL;
    t->p = NULL;
    t->loss_name = NULL;
    t->scale_v = NULL;
    t->seed = NULL;
    t->n_params = 0;
    t->n_low = 0;
}

static enum gf_status build(struct gf_trainer *t, const struct gf_model *m)
{
    enum gf_status st = gf_model_save_buffer(m, &t->orig, &t->orig_len);
    if (st == GF_OK && !(t->dir = strdup(m->dir ? m->dir : ".")))
        st = gf_error(GF_ERR_NOMEM, "out of memory");
    if (st == GF_OK)
        st = training_graph(t, t->o.fuse);
    if (st == GF_ERR_UNSUPPORTED && t->o.fuse) {
        /* a fused op without a gradient rule (or kernel): train unfused */
        snprintf(t->fuse_note, sizeof(t->fuse_note), "%s", gf_last_error());
        drop_graph(t);
        st = training_graph(t, false);
    }
    if (st == GF_OK)
        st = gf_session_new(t->m, &t->o.exec, &t->s);
    if (st == GF_OK)
        st = setup_device(t);
    return st;
}

enum gf_status gf_trainer_new(const struct gf_model *m, const struct gf_trainer_opts *o,
                              struct gf_trainer **out)
{
    *out = NULL;
    enum gf_status st = check_opts(o);
    if (st != GF_OK)
        return st;
    struct gf_optim *probe;
    if ((st = gf_optim_new(&o->optim, 0, NULL, &probe)) != GF_OK)
        return st;
    gf_optim_free(probe);
    struct gf_trainer *t = calloc(1, sizeof(*t));
    if (!t)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    t->o = *o; /* the loss / trainable / freeze strings are borrowed: build reads them */
    if (t->o.accumulate == 0)
        t->o.accumulate = 1;
    t->o.exec.check_finite = false;
    t->scaling = o->precision == GF_PRECISION_FP16;
    t->S = o->loss_scale > 0 ? o->loss_scale : 65536.0;
    if (t->o.loss_scale_window == 0)
        t->o.loss_scale_window = 2000;
    st = build(t, m);
    t->o.trainable = t->o.freeze = t->o.loss = t->o.untie = t->o.disable = NULL;
    if (st != GF_OK) {
        gf_trainer_free(t);
        return st;
    }
    *out = t;
    return GF_OK;
}

void gf_trainer_free(struct gf_trainer *t)
{
    if (!t)
        return;
    gf_session_free(t->s);
    gf_optim_free(t->opt);
    free_device(t);
    drop_graph(t);
    for (size_t i = 0; i < t->n_untied; i++)
        free(t->untied[i]);
    free(t->untied);
    free(t->orig);
    free(t->dir);
    free(t);
}

size_t gf_trainer_input_count(const struct gf_trainer *t)
{
    return gf_session_input_count(t->s);
}

const struct gf_value *gf_trainer_input(const struct gf_trainer *t, size_t i)
{
    return gf_session_input(t->s, i);
}

size_t gf_trainer_param_count(const struct gf_trainer *t)
{
    return t->n_params;
}

void gf_trainer_get_param(const struct gf_trainer *t, size_t i, struct gf_param_info *p)
{
    const struct param *q = &t->p[i];
    refresh_host(t); /* a failed download leaves the last values */
    *p = (struct gf_param_info){q->name, q->nelem, q->master >= 0 ? t->p[q->master].name : NULL,
                                q->transposed, q->t->data};
}

const char *gf_trainer_fuse_note(const struct gf_trainer *t)
{
    return t->fuse_note[0] ? t->fuse_note : NULL;
}

const char *gf_trainer_loss_name(const struct gf_trainer *t)
{
    return t->loss_name;
}

int64_t gf_trainer_get_step(const struct gf_trainer *t)
{
    return t->step;
}

void gf_trainer_print_profile(const struct gf_trainer *t, FILE *f)
{
    gf_session_print_profile(t->s, f);
    const struct step_prof *p = &t->prof;
    if (!p->micro)
        return;
    /* kernels: each node and each of the trainer's kernels, synchronized
     * after it; outside: the host's own time around and between them */
    double kernels = p->graph_ms + p->optim_ms, outside = p->ms - kernels;
    fprintf(f, "train profile: step %lld: %.3f ms, kernels %.3f ms (graph %.3f, optimizer "
            "%.3f), outside kernels %.3f ms (%.1f%%); copied host->device %llu bytes (batch "
            "%zu), device->host %llu bytes\n", (long long)t->step - 1, p->ms, kernels,
            p->graph_ms, p->optim_ms, outside > 0 ? outside : 0.0,
            p->ms > 0 && outside > 0 ? 100.0 * outside / p->ms : 0.0,
            (unsigned long long)p->traffic.h2d, p->batch_bytes,
            (unsigned long long)p->traffic.d2h);
}

const struct gf_model *gf_trainer_model(const struct gf_trainer *t)
{
    return t->m;
}

void gf_trainer_print_backend(const struct gf_trainer *t, FILE *f)
{
    if (!t->s)
        return;
    fprintf(f, "backend: %s on %s\n", gf_session_backend(t->s), gf_session_device(t->s));
    gf_session_print_fallbacks(t->s, f);
    gf_session_print_tuning(t->s, f);
}

/* ---- the step ------------------------------------------------------------------- */

static bool all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* Runs the micro-batch again with every node's outputs checked, so that
 * the message names the first node that produced a NaN or Inf. */
static enum gf_status diagnose(struct gf_trainer *t, struct gf_tensor *const *in,
                               const char *what)
{
    struct gf_exec_opts eo = t->o.exec;
    eo.check_finite = true;
    eo.profile = false;
    struct gf_session *s = NULL;
    struct gf_tensor **out;
    size_t n_out;
    enum gf_status st = refresh_host(t); /* that session reads the host copies */
    if (st == GF_OK)
        st = gf_session_new(t->m, &eo, &s);
    if (st == GF_OK)
        st = gf_session_run(s, gf_session_input_count(s), in, &out, &n_out);
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", st != GF_OK ? gf_last_error() : "");
    gf_session_free(s);
    t->diverged = true;
    if (st != GF_OK)
        return gf_error(GF_ERR_INVALID, "step %lld: %s is not finite: %s", (long long)t->step,
                        what, msg);
    return gf_error(GF_ERR_INVALID, "step %lld: %s is not finite, yet no node produced a NaN "
                    "or Inf when the micro-batch ran again", (long long)t->step, what);
}

static int n_threads(const struct gf_trainer *t)
{
    return t->o.exec.n_threads > 0 ? t->o.exec.n_threads : t->be->n_threads;
}

/* One of the trainer's kernels; with --profile synchronized and timed
 * (not in the session's epilogue, which the session times, and may be
 * capturing). */
static enum gf_status devop(struct gf_trainer *t, struct gf_devop *op, const struct gf_tview *in,
                            size_t n_in, struct gf_tview *out)
{
    bool timed = t->o.exec.profile && !t->in_graph;
    double t0 = timed ? now_ms() : 0;
    enum gf_status st = gf_devop_run(op, in, n_in, out, 1, n_threads(t));
    if (st == GF_OK && timed) {
        st = t->be->ops->sync(t->be);
        t->prof.optim_ms += now_ms() - t0;
    }
    return st;
}

/* The gradient the optimizer reads: A, or G with one micro-batch. */
static void *grad_acc(const struct gf_trainer *t)
{
    return t->A ? t->A : t->G;
}

/* After micro-batch k: with several, G's masters into A ((A or 0) +
 * G / K); then each tied copy's gradient into its master's (transposed
 * back), in parameter order, as the mean of the sum over the copies needs. */
static enum gf_status accumulate(struct gf_trainer *t, int k)
{
    struct gf_tview in[2], out;
    enum gf_status st = GF_OK;
    if (t->A) {
        gf_devop_view(&in[0], t->G, t->n_m, 0);
        gf_devop_view(&in[1], k ? t->A : NULL, k ? t->n_m : 0, 0);
        gf_devop_view(&out, t->A, t->n_m, 0);
        st = devop(t, &t->acc, in, 2, &out);
    }
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++) {
        const struct param *p = &t->p[i], *q = &t->p[p->master < 0 ? 0 : p->master];
        if (p->master < 0)
            continue;
        void *dst = t->A ? view_at(t, t->A, q->off, q->nelem) : q->gv;
        if (!dst)
            return GF_ERR_NOMEM;
        gf_devop_view(&in[0], p->gv, p->nelem, p->transposed ? p->t->dims[0] : 0);
        gf_devop_view(&in[1], dst, q->nelem, p->transposed ? q->t->dims[0] : 0);
        gf_devop_view(&out, dst, q->nelem, p->transposed ? q->t->dims[0] : 0);
        st = devop(t, p->transposed ? &t->acc_t : &t->acc, in, 2, &out);
        if (t->A)
            release_view(t, dst);
    }
    return st;
}

/* Tied copies take their master's new values (transposed or not), the
 * low copies theirs. */
static enum gf_status sync_ties(struct gf_trainer *t)
{
    enum gf_status st = GF_OK;
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++) {
        const struct param *p = &t->p[i], *q = &t->p[p->master < 0 ? 0 : p->master];
        if (p->master < 0)
            continue;
        if (!p->transposed) {
            st = t->be->ops->copy(t->be, p->pv, q->pv, p->nelem * sizeof(float));
            continue;
        }
        struct gf_tview in, out;
        gf_devop_view(&in, q->pv, q->nelem, q->t->dims[0]);
        gf_devop_view(&out, p->pv, p->nelem, p->t->dims[0]);
        st = devop(t, &t->transpose, &in, 1, &out);
    }
    return st == GF_OK ? sync_low(t) : st;
}

/* GradNorm's output (one float64) back to the host. */
static enum gf_status read_norm(struct gf_trainer *t, double *norm)
{
    if (!t->device) {
        *norm = *(const double *)t->norm;
        return GF_OK;
    }
    t->traffic.d2h += sizeof(double);
    return t->be->ops->copy_out(t->be, norm, t->norm, sizeof(double));
}

/* GradNorm of the accumulated gradient into t->norm. */
static enum gf_status launch_norm(struct gf_trainer *t)
{
    struct gf_tview in, out;
    gf_devop_view(&in, grad_acc(t), t->n_m, 0);
    gf_devop_view(&out, t->norm, 1, 0);
    out.dtype = GF_DOUBLE;
    return devop(t, &t->gnorm, &in, 1, &out);
}

/* GradNorm of the accumulated gradient (one float64 back to the host). */
static enum gf_status grad_norm(struct gf_trainer *t, double *norm)
{
    enum gf_status st = launch_norm(t);
    return st != GF_OK ? st : read_norm(t, norm);
}

/* The session's epilogue (t->in_graph): after the backward, in the same
 * CUDA graph, the guard (layout()), the tied copies' gradients into their
 * masters', GradNorm,
 * the update reading this step's hyper (gf_optim_stage) and the norm from
 * memory (clipping on the device; nothing changed when the norm is not
 * finite), and the tied copies from their masters.  Nothing synchronizes:
 * the host reads the norm after the run. */
static enum gf_status epilogue(void *ctx)
{
    struct gf_trainer *t = ctx;
    struct gf_tview in[2], out;
    gf_devop_view(&in[0], t->loss_dev, 1, 0);
    gf_devop_view(&in[1], NULL, 0, 0);
    gf_devop_view(&out, t->guard, 1, 0);
    enum gf_status st = devop(t, &t->zero_times, in, 2, &out); /* the guard: 0 x the loss */
    if (st == GF_OK)
        st = accumulate(t, 0);
    if (st == GF_OK)
        st = launch_norm(t);
    if (st == GF_OK)
        st = gf_optim_update_staged(t->opt, t->P, grad_acc(t), t->norm, t->o.clip_grad_norm,
                                    n_threads(t));
    if (st == GF_OK)
        st = sync_ties(t);
    return st;
}

/* Micro-batch `in` forward and backward: the loss in *loss, the gradients
 * in G; the session's time and copies added to the step's profile. */
static enum gf_status run_one(struct gf_trainer *t, struct gf_tensor *const *in, float *loss)
{
    struct gf_tensor **out;
    size_t n_out;
    enum gf_status st = gf_session_run(t->s, gf_session_input_count(t->s), in, &out, &n_out);
    struct gf_traffic tr;
    double kernel_ms, total_ms;
    gf_session_last_run(t->s, &tr, &kernel_ms, &total_ms);
    t->prof.traffic.h2d += tr.h2d;
    t->prof.traffic.d2h += tr.d2h;
    t->prof.graph_ms += kernel_ms - gf_session_epilogue_ms(t->s);
    t->prof.optim_ms += gf_session_epilogue_ms(t->s);
    t->prof.micro++;
    for (size_t i = 0; i < gf_session_input_count(t->s); i++)
        t->prof.batch_bytes += in[i]->nbytes;
    if (st != GF_OK)
        return st;
    const struct gf_tensor *l = out[t->loss_out];
    if (l->dtype != GF_FLOAT || l->nelem != 1 || (!l->data && !t->loss_dev))
        return gf_error(GF_ERR_INVALID, "loss '%s' is not one float", t->loss_name);
    if (l->data) {
        *loss = *(const float *)l->data;
        return GF_OK;
    }
    t->traffic.d2h += sizeof(float); /* bound (t->in_graph): in backend memory */
    return t->be->ops->copy_out(t->be, loss, t->loss_dev, sizeof(float));
}

/* The accumulated gradient is not finite: the step's first `upto`
 * micro-batches run again (the data rewound to `at`) until one's gradients
 * hold a NaN or Inf, which diagnose() traces to its node. */
static enum gf_status find_bad_gradient(struct gf_trainer *t, struct gf_data *d,
                                        const struct gf_data *from, int upto, double norm)
{
    d->cursor = from->cursor;
    d->rng = from->rng;
    char what[1100];
    for (int k = 0; k < upto; k++) {
        struct gf_tensor *const *in;
        float loss;
        enum gf_status st = gf_data_next(d, &in);
        if (st == GF_OK)
            st = run_one(t, in, &loss);
        for (size_t i = 0; st == GF_OK && i < t->n_params; i++) {
            const struct param *p = &t->p[i];
            float *g = t->device ? t->host_tmp : at(t->G, p->off);
            if (t->device)
                st = t->be->ops->copy_out(t->be, g, p->gv, p->nelem * sizeof(float));
            if (st == GF_OK && !all_finite(g, p->nelem)) {
                snprintf(what, sizeof(what), "the gradient of '%s'", p->name);
                return diagnose(t, in, what);
            }
        }
        if (st != GF_OK)
            return st;
    }
    t->diverged = true;
    return gf_error(GF_ERR_INVALID, "step %lld: the gradient is not finite (global norm %g), "
                    "yet no micro-batch's gradients held a NaN or Inf when run again",
                    (long long)t->step, norm);
}

/* Forward and backward of the step's micro-batches; the accumulated
 * gradient (A, or G) receives their mean, *loss the mean loss.  A loss that
 * is not finite stops the step, named (the gradients of the micro-batches
 * before it first, as they would have been checked before it ran). */
static enum gf_status run_micro_batches(struct gf_trainer *t, struct gf_data *d, double *loss,
                                        size_t *tokens)
{
    int K = t->o.accumulate;
    const struct gf_data start = {.cursor = d->cursor, .rng = d->rng};
    *loss = 0;
    *tokens = 0;
    for (int k = 0; k < K; k++) {
        struct gf_tensor *const *in;
        float l;
        double norm;
        enum gf_status st = gf_data_next(d, &in);
        if (st == GF_OK)
            st = run_one(t, in, &l);
        if (st != GF_OK)
            return st;
        if (!isfinite(l)) {
            if (k > 0 && (st = grad_norm(t, &norm)) == GF_OK && !isfinite(norm))
                return find_bad_gradient(t, d, &start, k, norm);
            char what[1100];
            snprintf(what, sizeof(what), "the loss '%s' (%g)", t->loss_name, l);
            return st != GF_OK ? st : diagnose(t, in, what);
        }
        if ((st = accumulate(t, k)) != GF_OK)
            return st;
        *loss += l;
        *tokens += gf_data_tokens(d);
    }
    *loss /= K;
    return GF_OK;
}

/* fp16: S into the bound scale (the seed of this step's backward). */
static enum gf_status write_scale(struct gf_trainer *t)
{
    float s = (float)t->S;
    if (!t->device) {
        *(float *)t->scale_dev = s;
        return GF_OK;
    }
    t->traffic.h2d += sizeof(float);
    return t->be->ops->copy_in(t->be, t->scale_dev, &s, sizeof(float));
}

/* fp16: GradScaler.update() after the step: a gradient that is not finite
 * skips the step and halves S; `window` good steps in a row double it. */
static void update_scale(struct gf_trainer *t, bool finite)
{
    if (!finite) {
        t->S *= 0.5;
        t->good = 0;
        t->n_skipped++;
    } else if (++t->good >= t->o.loss_scale_window) {
        t->S *= 2;
        t->good = 0;
    }
}

/* The gradient norm (also the NaN / Inf check: nothing is updated when it
 * is not finite), torch's clipping coefficient, the update, the copies.
 * With loss scaling the gradient is S times the loss's: its norm divided
 * by S (exact: S is a power of 2) is what clipping sees and is reported,
 * and the update's grad_scale is the clipping coefficient / S; a norm
 * that is not finite skips the step (GradScaler: an overflow in the fp16
 * backward is expected, not a divergence). */
static enum gf_status update(struct gf_trainer *t, struct gf_data *d,
                             const struct gf_data *from, struct gf_train_stats *st)
{
    double norm;
    enum gf_status s = grad_norm(t, &norm);
    if (s != GF_OK)
        return s;
    if (t->scaling) {
        st->skipped = !isfinite(norm);
        update_scale(t, !st->skipped);
        st->n_skipped = t->n_skipped;
        st->grad_norm = norm / st->loss_scale;
        if (st->skipped)
            return GF_OK;
        norm = st->grad_norm;
    }
    if (!isfinite(norm))
        return find_bad_gradient(t, d, from, t->o.accumulate, norm);
    st->grad_norm = norm;
    float coef = gf_clip_coef(t->o.clip_grad_norm, norm); /* the update's grad_scale */
    double gs = t->scaling ? (double)coef / st->loss_scale : coef;
    double t0 = t->o.exec.profile ? now_ms() : 0;
    s = gf_optim_update(t->opt, t->P, grad_acc(t), st->lr, gs, n_threads(t));
    if (s == GF_OK && t->o.exec.profile) {
        s = t->be->ops->sync(t->be);
        t->prof.optim_ms += now_ms() - t0;
    }
    if (s == GF_OK)
        s = sync_ties(t);
    t->host_stale = t->device;
    return s;
}

/* The step with the optimizer in the session's epilogue (t->in_graph, one
 * micro-batch): this step's hyper staged, one session run (forward,
 * backward, GradNorm, the update, the tied copies: on CUDA one graph),
 * then the loss and the norm read back.  The update changed nothing when
 * the norm is not finite; the micro-batch then runs again with the update
 * staged to skip, to find the gradient that is not (find_bad_gradient).  A
 * loss that is not finite (which the guard turned into a NaN norm: nothing
 * was updated) is diagnosed as before. */
static enum gf_status step_in_graph(struct gf_trainer *t, struct gf_data *d,
                                    const struct gf_data *from, struct gf_train_stats *st)
{
    struct gf_tensor *const *in;
    float loss = 0;
    double norm = 0;
    /* with loss scaling the update unscales the gradient and its norm (1 / S) */
    enum gf_status s = gf_optim_stage(t->opt, st->lr, t->scaling ? 1.0 / t->S : 1.0);
    if (s == GF_OK)
        s = gf_data_next(d, &in);
    if (s == GF_OK)
        s = run_one(t, in, &loss);
    t->host_stale = t->device;
    if (s == GF_OK)
        s = read_norm(t, &norm);
    if (s != GF_OK)
        return s;
    if (isfinite(norm))
        gf_optim_advance(t->opt);
    if (!isfinite(loss)) {
        char what[1100];
        snprintf(what, sizeof(what), "the loss '%s' (%g)", t->loss_name, loss);
        return diagnose(t, in, what);
    }
    st->loss = loss;
    st->tokens = gf_data_tokens(d);
    if (t->scaling) { /* an fp16 overflow: the update skipped itself (update()) */
        st->skipped = !isfinite(norm);
        update_scale(t, !st->skipped);
        st->n_skipped = t->n_skipped;
        st->grad_norm = norm / st->loss_scale;
        return GF_OK;
    }
    if (!isfinite(norm))
        return (s = gf_optim_stage(t->opt, st->lr, NAN)) != GF_OK
                   ? s : find_bad_gradient(t, d, from, 1, norm);
    st->grad_norm = norm;
    return GF_OK;
}

enum gf_status gf_trainer_step(struct gf_trainer *t, struct gf_data *d,
                               struct gf_train_stats *st)
{
    memset(st, 0, sizeof(*st));
    memset(&t->prof, 0, sizeof(t->prof));
    memset(&t->traffic, 0, sizeof(t->traffic));
    double t0 = now_ms();
    st->step = t->step;
    st->lr = gf_lr_at(t->o.schedule, t->o.optim.lr, t->o.min_lr, t->o.warmup, t->o.steps,
                      t->step);
    t->diverged = false;
    const struct gf_data start = {.cursor = d->cursor, .rng = d->rng};
    enum gf_status s = GF_OK;
    if (t->scaling) {
        st->loss_scale = t->S;
        st->n_skipped = t->n_skipped;
        s = write_scale(t);
    }
    if (s != GF_OK) {
    } else if (t->in_graph) {
        s = step_in_graph(t, d, &start, st);
    } else if ((s = run_micro_batches(t, d, &st->loss, &st->tokens)) == GF_OK) {
        s = update(t, d, &start, st);
    }
    if (s == GF_OK && t->o.exec.profile)
        s = t->be->ops->sync(t->be);
    t->prof.traffic.h2d += t->traffic.h2d;
    t->prof.traffic.d2h += t->traffic.d2h;
    if (s != GF_OK) {
        st->diverged = t->diverged;
        return s;
    }
    t->step++;
    st->ms = t->prof.ms = now_ms() - t0;
    return GF_OK;
}

/* ---- saving, checkpoints ---------------------------------------------------------- */

static enum gf_status set_init(struct gf_model *m, const char *name, const struct gf_tensor *t,
                               const void *data)
{
    struct gf_value *v = gf_graph_find(m->graph, name);
    struct gf_tensor *c = gf_tensor_new(m, name, t->dtype, t->rank, t->dims, data);
    if (!c)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    if (!v)
        return gf_graph_add_initializer(m->graph, name, c) ? GF_OK : GF_ERR_NOMEM;
    return gf_value_set_initializer(v, c);
}

/* The caller's model again, with the current weights. */
static enum gf_status export_model(const struct gf_trainer *t, struct gf_model **out)
{
    struct gf_model *m = NULL;
    enum gf_status st = refresh_host(t);
    if (st != GF_OK) {
        *out = NULL;
        return st;
    }
    st = gf_model_load_buffer(t->orig, t->orig_len, t->dir, NULL, &m);
    if (st == GF_OK)
        st = apply_untie(t, m->graph);
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++) {
        if (!gf_graph_find(m->graph, t->p[i].name))
            st = gf_error(GF_ERR_INTERNAL, "parameter '%s' is not in the model", t->p[i].name);
        else
            st = set_init(m, t->p[i].name, t->p[i].t, t->p[i].t->data);
    }
    if (st != GF_OK) {
        gf_model_free(m);
        m = NULL;
    }
    *out = m;
    return st;
}

enum gf_status gf_trainer_export(const struct gf_trainer *t, struct gf_model **out)
{
    return export_model(t, out);
}

enum gf_status gf_trainer_save(const struct gf_trainer *t, const char *path)
{
    struct gf_model *m;
    enum gf_status st = export_model(t, &m);
    if (st == GF_OK)
        st = gf_model_save(m, path, NULL);
    gf_model_free(m);
    return st;
}

static void state_name(const struct gf_trainer *t, size_t k, const char *param, char *buf,
                       size_t len)
{
    snprintf(buf, len, "graphfuse.optim.%s.%s", gf_optim_state_name(t->opt, k), param);
}

/* The optimizer buffers of every group, under its master's name (read
 * from the backend one tensor at a time). */
static enum gf_status add_optim_state(const struct gf_trainer *ct, struct gf_model *m)
{
    struct gf_trainer *t = (struct gf_trainer *)ct; /* host_tmp: staging only */
    char name[1200];
    enum gf_status st = GF_OK;
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++) {
        const struct param *p = &t->p[i];
        for (size_t k = 0; st == GF_OK && p->master < 0 && k < gf_optim_state_count(t->opt); k++) {
            state_name(t, k, p->name, name, sizeof(name));
            st = read_slice(t, t->host_tmp, gf_optim_state_mem(t->opt, k), p->off, p->nelem);
            if (st == GF_OK)
                st = set_init(m, name, p->t, t->host_tmp);
        }
    }
    return st;
}

enum gf_status gf_trainer_save_checkpoint(const struct gf_trainer *t, const struct gf_data *d,
                                          const char *path)
{
    struct gf_model *m;
    enum gf_status st = export_model(t, &m);
    if (st != GF_OK)
        return st;
    int64_t state[STATE_LEN] = {STATE_VERSION, t->step, t->o.optim.kind,
                                gf_optim_get_step(t->opt), d ? (int64_t)d->cursor : 0,
                                d ? (int64_t)d->rng : 0, t->o.accumulate,
                                (int64_t)t->n_groups};
    int64_t dims[1] = {STATE_LEN};
    struct gf_tensor *s = gf_tensor_new(m, STATE_NAME, GF_INT64, 1, dims, state);
    if (!s || !gf_graph_add_initializer(m->graph, STATE_NAME, s))
        st = gf_error(GF_ERR_NOMEM, "out of memory");
    if (st == GF_OK)
        st = add_optim_state(t, m);
    if (st == GF_OK && t->scaling) { /* fp16: GradScaler's state */
        double sc[3] = {t->S, (double)t->good, (double)t->n_skipped};
        int64_t d3[1] = {3};
        struct gf_tensor *x = gf_tensor_new(m, SCALE_NAME, GF_DOUBLE, 1, d3, sc);
        if (!x || !gf_graph_add_initializer(m->graph, SCALE_NAME, x))
            st = gf_error(GF_ERR_NOMEM, "out of memory");
    }
    if (st == GF_OK)
        st = gf_model_save(m, path, NULL);
    gf_model_free(m);
    return st;
}

/* Copies initializer `name` of checkpoint c into dst (shape of `like`). */
static enum gf_status restore(const struct gf_model *c, const char *path, const char *name,
                              const struct gf_tensor *like, void *dst)
{
    const struct gf_value *v = gf_graph_find(c->graph, name);
    const struct gf_tensor *x = v ? v->init : NULL;
    if (!x)
        return gf_error(GF_ERR_INVALID, "%s: checkpoint has no tensor '%s'", path, name);
    if (x->dtype != like->dtype || x->rank != like->rank ||
        memcmp(x->dims, like->dims, (size_t)x->rank * sizeof(int64_t)) != 0)
        return gf_error(GF_ERR_INVALID, "%s: tensor '%s' has another type or shape than the "
                        "model's", path, name);
    memcpy(dst, x->data, x->nbytes);
    return GF_OK;
}

static enum gf_status check_state(const struct gf_trainer *t, const struct gf_model *c,
                                  const char *path, const int64_t **out)
{
    const struct gf_value *v = gf_graph_find(c->graph, STATE_NAME);
    const struct gf_tensor *s = v ? v->init : NULL;
    if (!s || s->dtype != GF_INT64 || s->nelem != STATE_LEN ||
        ((const int64_t *)s->data)[0] != STATE_VERSION)
        return gf_error(GF_ERR_INVALID, "%s: not a graphfuse checkpoint (no '%s' tensor of "
                        "version %d)", path, STATE_NAME, STATE_VERSION);
    const int64_t *x = s->data;
    if (x[2] != t->o.optim.kind)
        return gf_error(GF_ERR_ARG, "%s: the checkpoint was written by %s, the trainer uses %s",
                        path, gf_optim_name((enum gf_optim_kind)x[2]),
                        gf_optim_name(t->o.optim.kind));
    if (x[7] != (int64_t)t->n_groups)
        return gf_error(GF_ERR_ARG, "%s: the checkpoint trains %lld tensors, this trainer %zu "
                        "(other --trainable / --freeze?)", path, (long long)x[7], t->n_groups);
    *out = x;
    return GF_OK;
}

enum gf_status gf_trainer_load_checkpoint(struct gf_trainer *t, struct gf_data *d,
                                          const char *path)
{
    struct gf_model *c;
    const int64_t *x = NULL;
    char name[1200];
    enum gf_status st = gf_model_load(path, NULL, &c);
    if (st != GF_OK)
        return st;
    st = check_state(t, c, path, &x);
    /* the parameters' host copies, then P; the state through host_tmp */
    for (size_t i = 0; st == GF_OK && i < t->n_params; i++) {
        const struct param *p = &t->p[i];
        st = restore(c, path, p->name, p->t, p->t->data);
        if (st == GF_OK && t->device)
            st = write_slice(t, t->P, p->off, p->t->data, p->nelem);
        for (size_t k = 0; st == GF_OK && p->master < 0 && k < gf_optim_state_count(t->opt); k++) {
            state_name(t, k, p->name, name, sizeof(name));
            st = restore(c, path, name, p->t, t->host_tmp);
            if (st == GF_OK)
                st = write_slice(t, gf_optim_state_mem(t->opt, k), p->off, t->host_tmp,
                                 p->nelem);
        }
    }
    const struct gf_value *sv = gf_graph_find(c->graph, SCALE_NAME);
    if (st == GF_OK && t->scaling && sv && sv->init) { /* fp16: GradScaler's state */
        const double *sc = sv->init->data;
        if (sv->init->dtype != GF_DOUBLE || sv->init->nelem != 3 || !(sc[0] > 0) ||
            !isfinite(sc[0]))
            st = gf_error(GF_ERR_INVALID, "%s: bad '%s' tensor", path, SCALE_NAME);
        else {
            t->S = sc[0];
            t->good = (int64_t)sc[1];
            t->n_skipped = (int64_t)sc[2];
        }
    }
    if (st == GF_OK) {
        t->step = x[1];
        gf_optim_set_step(t->opt, x[3]);
        if (d) {
            d->cursor = (uint64_t)x[4];
            d->rng = (uint64_t)x[5];
        }
        st = sync_ties(t);
        t->host_stale = t->device;
    }
    gf_model_free(c);
    return st;
}

/* ---- data: folders ------------------------------------------------------------------- */

static bool is_integer(enum gf_dtype t)
{
    return t == GF_INT64 || t == GF_INT32 || t == GF_INT16 || t == GF_INT8 || t == GF_UINT8 ||
           t == GF_UINT16 || t == GF_UINT32 || t == GF_UINT64;
}

static struct gf_data *data_new(const struct gf_trainer *t)
{
    struct gf_data *d = calloc(1, sizeof(*d));
    if (!d || !(d->arena = gf_model_new(8, "data"))) {
        free(d);
        return NULL;
    }
    d->n_inputs = gf_trainer_input_count(t);
    return d;
}

void gf_data_free(struct gf_data *d)
{
    if (!d)
        return;
    gf_model_free(d->arena);
    free(d->batches);
    free(d->batch_tokens);
    free(d->tok);
    free(d->cur);
    free(d);
}

/* Tokens of one batch: elements of the first integer input, else the
 * leading dim of the first input (samples). */
static size_t count_tokens(struct gf_tensor *const *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (is_integer(in[i]->dtype))
            return in[i]->nelem;
    return n && in[0]->rank > 0 ? (size_t)in[0]->dims[0] : 1;
}

/* Puts the files' tensors in trainer input order: by name when every
 * input has a file of its name, else by position. */
static enum gf_status match_inputs(const struct gf_trainer *t, const char *dir,
                                   struct gf_tensor **files, size_t n_files,
                                   struct gf_tensor **slot)
{
    size_t n = gf_trainer_input_count(t), by_name = 0;
    for (size_t i = 0; i < n; i++) {
        slot[i] = NULL;
        for (size_t f = 0; f < n_files && !slot[i]; f++)
            if (files[f]->name && strcmp(files[f]->name, gf_trainer_input(t, i)->name) == 0)
                slot[i] = files[f];
        by_name += slot[i] != NULL;
    }
    if (by_name == n)
        return GF_OK;
    if (n_files != n)
        return gf_error(GF_ERR_INVALID, "%s: %zu input files, the model takes %zu inputs and "
                        "no file is named '%s'", dir, n_files, n,
                        gf_trainer_input(t, by_name < n ? by_name : 0)->name);
    for (size_t i = 0; i < n; i++)
        slot[i] = files[i];
    return GF_OK;
}

/* The batch's tensors against the inputs' declared types, so that bad
 * data is found when it is opened, not at some step. */
static enum gf_status check_batch(const struct gf_trainer *t, const char *dir,
                                  struct gf_tensor *const *slot)
{
    for (size_t i = 0; i < gf_trainer_input_count(t); i++) {
        const struct gf_value *v = gf_trainer_input(t, i);
        const struct gf_tensor *x = slot[i];
        const struct gf_type *ty = &v->type;
        if (ty->dtype != GF_UNDEFINED && x->dtype != ty->dtype)
            return gf_error(GF_ERR_INVALID, "%s: input '%s' is %s, the model expects %s", dir,
                            v->name, gf_dtype_name(x->dtype), gf_dtype_name(ty->dtype));
        if (ty->rank >= 0 && x->rank != ty->rank)
            return gf_error(GF_ERR_INVALID, "%s: input '%s' has rank %d, the model expects %d",
                            dir, v->name, x->rank, ty->rank);
        for (int d = 0; ty->rank >= 0 && d < ty->rank; d++)
            if (ty->dims[d].value >= 0 && ty->dims[d].value != x->dims[d])
                return gf_error(GF_ERR_INVALID, "%s: input '%s' has size %lld on axis %d, the "
                                "model expects %lld", dir, v->name, (long long)x->dims[d], d,
                                (long long)ty->dims[d].value);
    }
    return GF_OK;
}

/* One batch: dir/input_0.pb, input_1.pb, ... into slot[] (input order). */
static enum gf_status load_batch(struct gf_data *d, const struct gf_trainer *t,
                                 const char *dir, struct gf_tensor **slot)
{
    struct gf_tensor *files[256];
    size_t n = 0;
    char path[4096];
    for (; n < 256; n++) {
        struct stat sb;
        if (snprintf(path, sizeof(path), "%s/input_%zu.pb", dir, n) >= (int)sizeof(path) ||
            stat(path, &sb) != 0)
            break;
        enum gf_status st = gf_tensor_load(d->arena, path, &files[n]);
        if (st != GF_OK)
            return st;
    }
    if (n == 0)
        return gf_error(GF_ERR_IO, "%s: no input_0.pb", dir);
    enum gf_status st = match_inputs(t, dir, files, n, slot);
    return st == GF_OK ? check_batch(t, dir, slot) : st;
}

static int cmp_index(const void *a, const void *b)
{
    unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
    return x < y ? -1 : x > y;
}

/* Numbers K of the dir/test_data_set_K folders, ascending. */
static enum gf_status list_sets(const char *dir, unsigned long **out, size_t *n)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return gf_error(GF_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    unsigned long *k = NULL;
    size_t cnt = 0, cap = 0;
    for (struct dirent *e; (e = readdir(dp));) {
        unsigned long idx;
        int len = 0;
        if (sscanf(e->d_name, "test_data_set_%lu%n", &idx, &len) != 1 || e->d_name[len])
            continue;
        if (cnt == cap) {
            unsigned long *nk = realloc(k, (cap = cap ? 2 * cap : 16) * sizeof(*k));
            if (!nk) {
                free(k);
                closedir(dp);
                return gf_error(GF_ERR_NOMEM, "out of memory");
            }
            k = nk;
        }
        k[cnt++] = idx;
    }
    closedir(dp);
    if (cnt)
        qsort(k, cnt, sizeof(*k), cmp_index);
    *out = k;
    *n = cnt;
    return GF_OK;
}

static enum gf_status load_sets(struct gf_data *d, const struct gf_trainer *t, const char *dir)
{
    char path[4096], single[4096];
    struct stat sb;
    unsigned long *k = NULL;
    size_t n = 1;
    bool one = snprintf(single, sizeof(single), "%s/input_0.pb", dir) < (int)sizeof(single) &&
               stat(single, &sb) == 0;
    enum gf_status st = one ? GF_OK : list_sets(dir, &k, &n);
    if (st == GF_OK && n == 0)
        st = gf_error(GF_ERR_IO, "%s: no input_*.pb files and no test_data_set_* folders", dir);
    if (st == GF_OK) {
        d->batches = calloc(n * d->n_inputs + 1, sizeof(*d->batches));
        d->batch_tokens = calloc(n + 1, sizeof(*d->batch_tokens));
        if (!d->batches || !d->batch_tokens)
            st = gf_error(GF_ERR_NOMEM, "out of memory");
    }
    for (size_t b = 0; st == GF_OK && b < n; b++) {
        if (!one && snprintf(path, sizeof(path), "%s/test_data_set_%lu", dir, k[b]) >=
                        (int)sizeof(path))
            st = gf_error(GF_ERR_ARG, "%s: path too long", dir);
        if (st != GF_OK)
            break;
        st = load_batch(d, t, one ? dir : path, &d->batches[b * d->n_inputs]);
        if (st == GF_OK)
            d->batch_tokens[b] = count_tokens(&d->batches[b * d->n_inputs], d->n_inputs);
    }
    free(k);
    d->n_batches = n;
    return st;
}

enum gf_status gf_data_open_dir(const struct gf_trainer *t, const char *dir,
                                struct gf_data **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return gf_error(GF_ERR_IO, "%s: not a folder", dir);
    struct gf_data *d = data_new(t);
    if (!d)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    enum gf_status st = load_sets(d, t, dir);
    if (st != GF_OK) {
        gf_data_free(d);
        return st;
    }
    snprintf(d->desc, sizeof(d->desc), "%zu batch%s from %s, cycled", d->n_batches,
             d->n_batches == 1 ? "" : "es", dir);
    *out = d;
    return GF_OK;
}

/* ---- data: token files ------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t token_at(const struct gf_data *d, size_t i)
{
    const uint8_t *b = d->tok + i * (size_t)d->width;
    uint32_t x = (uint32_t)b[0] | (uint32_t)b[1] << 8;
    if (d->width == 4)
        x |= (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return x;
}

/* Rows of the embedding table the first input indexes (Gather), else 0. */
static int64_t model_vocab(const struct gf_trainer *t)
{
    const struct gf_value *ids = gf_trainer_input(t, 0);
    for (size_t u = 0; ids && u < ids->n_uses; u++) {
        const struct gf_node *n = ids->uses[u].node;
        const struct gf_value *table = n->n_inputs > 0 ? n->inputs[0] : NULL;
        if (n->op == GF_OP_GATHER && ids->uses[u].slot == 1 && table && table->init &&
            table->init->rank == 2)
            return table->init->dims[0];
    }
    return 0;
}

static enum gf_status read_file(const char *path, uint8_t **buf, size_t *len)
{
    struct stat sb;
    int fd = gf_file_open_read(path, 0, &sb);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        enum gf_status st = gf_error(GF_ERR_IO, "%s: cannot read: %s", path,
                                     gf_file_open_error(fd));
        if (fd >= 0)
            close(fd);
        return st;
    }
    *len = (size_t)sb.st_size;
    *buf = malloc(*len + 1);
    bool ok = *buf && fread(*buf, 1, *len, f) == *len;
    fclose(f);
    if (!ok) {
        free(*buf);
        *buf = NULL;
        return gf_error(GF_ERR_IO, "%s: read failed", path);
    }
    return GF_OK;
}

/* Width of a token and the file's checks (whole tokens, enough of them,
 * every id inside the vocabulary when it is known). */
static enum gf_status check_tokens(struct gf_data *d, const char *path, int64_t vocab,
                                   size_t len)
{
    if (len % (size_t)d->width)
        return gf_error(GF_ERR_INVALID, "%s: %zu bytes is not a whole number of %d-byte tokens",
                        path, len, d->width);
    d->n_tok = len / (size_t)d->width;
    if (d->n_tok < (size_t)d->seq)
        return gf_error(GF_ERR_INVALID, "%s: %zu tokens, fewer than one window of %lld", path,
                        d->n_tok, (long long)d->seq);
    for (size_t i = 0; vocab > 0 && i < d->n_tok; i++)
        if (token_at(d, i) >= (uint64_t)vocab)
            return gf_error(GF_ERR_INVALID, "%s: token %u at index %zu is outside the "
                            "vocabulary of %lld ids", path, token_at(d, i), i, (long long)vocab);
    return GF_OK;
}

/* One [batch, seq] tensor per input, each an integer [?, ?] input. */
static enum gf_status token_tensors(struct gf_data *d, const struct gf_trainer *t)
{
    int64_t dims[2] = {d->rows, d->seq};
    if (!(d->cur = calloc(d->n_inputs + 1, sizeof(*d->cur))))
        return gf_error(GF_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < d->n_inputs; i++) {
        const struct gf_value *v = gf_trainer_input(t, i);
        enum gf_dtype dt = v->type.dtype;
        if ((dt != GF_INT64 && dt != GF_INT32) || (v->type.rank >= 0 && v->type.rank != 2))
            return gf_error(GF_ERR_UNSUPPORTED, "--tokens feeds int64 / int32 [batch, seq] "
                            "inputs; input '%s' is %s of rank %d", v->name,
                            gf_dtype_name(dt), v->type.rank);
        if (!(d->cur[i] = gf_tensor_new(d->arena, v->name, dt, 2, dims, NULL)))
            return gf_error(GF_ERR_NOMEM, "out of memory");
    }
    return GF_OK;
}

static enum gf_status open_tokens(struct gf_data *d, const struct gf_trainer *t,
                                  const char *path, const struct gf_token_opts *o)
{
    int64_t vocab = o->vocab > 0 ? o->vocab : model_vocab(t);
    const char *how = o->token_bytes ? "given" : "from the vocabulary size";
    d->width = o->token_bytes ? o->token_bytes : vocab > 0 ? (vocab <= 65536 ? 2 : 4) : 0;
    if (o->token_bytes && d->width != 2 && d->width != 4)
        return gf_error(GF_ERR_ARG, "token width %d: 2 or 4 bytes", o->token_bytes);
    size_t len = 0;
    enum gf_status st = d->width ? read_file(path, &d->tok, &len) : GF_OK;
    if (!d->width && access(path, R_OK) != 0) /* the missing file first */
        return gf_error(GF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!d->width)
        return gf_error(GF_ERR_ARG, "%s: cannot tell the vocabulary size of the model: give "
                        "the token width (--token-bytes 2 or 4)", path);
    if (st == GF_OK)
        st = check_tokens(d, path, vocab, len);
    if (st == GF_OK)
        st = token_tensors(d, t);
    if (st == GF_OK)
        snprintf(d->desc, sizeof(d->desc), "%zu tokens from %s (uint%d, %s%s%lld), "
                 "%lld random windows of %lld per micro-batch", d->n_tok, path, 8 * d->width,
                 how, vocab > 0 ? " " : "", (long long)vocab, (long long)d->rows,
                 (long long)d->seq);
    return st;
}

enum gf_status gf_data_open_tokens(const struct gf_trainer *t, const char *path,
                                   const struct gf_token_opts *o, struct gf_data **out)
{
    *out = NULL;
    if (o->batch <= 0 || o->seq <= 0)
        return gf_error(GF_ERR_ARG, "token windows need a batch and a sequence length > 0 "
                        "(got %lld x %lld)", (long long)o->batch, (long long)o->seq);
    if (gf_trainer_input_count(t) == 0)
        return gf_error(GF_ERR_INVALID, "the model takes no input to feed tokens to");
    struct gf_data *d = data_new(t);
    if (!d)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    d->is_tokens = true;
    d->rows = o->batch;
    d->seq = o->seq;
    d->rng = o->seed;
    enum gf_status st = open_tokens(d, t, path, o);
    if (st != GF_OK) {
        gf_data_free(d);
        return st;
    }
    *out = d;
    return GF_OK;
}

static void put(struct gf_tensor *x, size_t i, uint32_t id)
{
    if (x->dtype == GF_INT64)
        ((int64_t *)x->data)[i] = id;
    else
        ((int32_t *)x->data)[i] = (int32_t)id;
}

enum gf_status gf_data_next(struct gf_data *d, struct gf_tensor *const **in)
{
    if (!d->is_tokens) {
        size_t b = (size_t)(d->cursor++ % d->n_batches);
        *in = &d->batches[b * d->n_inputs];
        d->last_tokens = d->batch_tokens[b];
        return GF_OK;
    }
    size_t seq = (size_t)d->seq, starts = d->n_tok - seq + 1;
    for (size_t r = 0; r < (size_t)d->rows; r++) {
        size_t start = (size_t)(splitmix64(&d->rng) % starts);
        for (size_t j = 0; j < seq; j++)
            for (size_t i = 0; i < d->n_inputs; i++)
                put(d->cur[i], r * seq + j, token_at(d, start + j));
    }
    d->cursor++;
    *in = d->cur;
    d->last_tokens = (size_t)(d->rows * d->seq);
    return GF_OK;
}

size_t gf_data_tokens(const struct gf_data *d)
{
    return d->last_tokens;
}

const char *gf_data_describe(const struct gf_data *d)
{
    return d->desc;
}
