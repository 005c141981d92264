/*
 * Optimizers, gradient clipping and learning-rate schedules.  The updates
 * are ops (SGDStep, AdamWStep: graph/ops.def, "optimizer ops"; torch.optim's
 * arithmetic, defined in kernels/cpu/optim.c) run through the backend's
 * kernel: per tensor on the host for gf_optim_step, on one flat range of
 * backend memory for the trainer (gf_optim_new_on), where the state stays.
 * The ops' hyper vector (kernels/optim_ops.h) carries the options in
 * double, as torch keeps them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec_priv.h"
#include "optim_ops.h"

struct gf_optim {
    struct gf_optim_opts o;
    size_t n;
    size_t *sizes;
    size_t n_state;  /* buffers per tensor: 0, 1 (SGD momentum) or 2 (AdamW) */
    float **state;   /* gf_optim_new: state[k * n + i], buffer k of tensor i */
    float *block;    /* all state buffers, one allocation */
    void *mem[2];    /* gf_optim_new_on: buffer k of the range, backend memory */
    struct gf_model *ops; /* the update op's nodes */
    struct gf_devop op;
    /* gf_optim_stage / gf_optim_update_staged: hyper in backend memory (read
     * by the kernel when it runs), and the node taking N (max_norm) */
    struct gf_devop op_staged;
    void *hyper_mem;
    int64_t step;
};

void gf_optim_opts_init(struct gf_optim_opts *o, enum gf_optim_kind kind)
{
    memset(o, 0, sizeof(*o));
    o->kind = kind;
    o->lr = 1e-3;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->weight_decay = kind == GF_OPTIM_ADAMW ? 0.01 : 0.0;
}

const char *gf_optim_name(enum gf_optim_kind kind)
{
    return kind == GF_OPTIM_ADAMW ? "adamw" : "sgd";
}

bool gf_optim_parse(const char *name, enum gf_optim_kind *kind)
{
    if (strcmp(name, "sgd") == 0)
        *kind = GF_OPTIM_SGD;
    else if (strcmp(name, "adamw") == 0)
        *kind = GF_OPTIM_ADAMW;
    else
        return false;
    return true;
}

/* torch's own checks (torch/optim/sgd.py, adam.py). */
static enum gf_status check_opts(const struct gf_optim_opts *o)
{
    if (!(o->lr >= 0) || !isfinite(o->lr))
        return gf_error(GF_ERR_ARG, "invalid learning rate %g", o->lr);
    if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
        return gf_error(GF_ERR_ARG, "invalid weight decay %g", o->weight_decay);
    if (o->kind == GF_OPTIM_SGD) {
        if (!(o->momentum >= 0) || !isfinite(o->momentum))
            return gf_error(GF_ERR_ARG, "invalid momentum %g", o->momentum);
        if (!isfinite(o->dampening))
            return gf_error(GF_ERR_ARG, "invalid dampening %g", o->dampening);
        if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
            return gf_error(GF_ERR_ARG, "nesterov momentum needs a momentum > 0 and "
                            "dampening 0");
        return GF_OK;
    }
    if (o->kind != GF_OPTIM_ADAMW)
        return gf_error(GF_ERR_ARG, "unknown optimizer %d", (int)o->kind);
    if (!(o->beta1 >= 0 && o->beta1 < 1))
        return gf_error(GF_ERR_ARG, "invalid beta1 %g (0 <= beta1 < 1)", o->beta1);
    if (!(o->beta2 >= 0 && o->beta2 < 1))
        return gf_error(GF_ERR_ARG, "invalid beta2 %g (0 <= beta2 < 1)", o->beta2);
    if (!(o->eps >= 0) || !isfinite(o->eps))
        return gf_error(GF_ERR_ARG, "invalid epsilon %g", o->eps);
    return GF_OK;
}

/* ---- ops run outside a graph ---------------------------------------------------------- */

struct gf_node *gf_devop_node(struct gf_model *m, const char *op_type, const char *domain,
                              size_t n_in, size_t n_out)
{
    struct gf_value *v[16];
    if (n_in + n_out > 16)
        return NULL;
    for (size_t i = 0; i < n_in + n_out; i++)
        if (!(v[i] = gf_graph_new_value(m->graph, NULL, i < n_in ? "in" : "out")))
            return NULL;
    return gf_graph_add_node(m->graph, op_type, domain ? domain : "graphfuse", op_type, n_in,
                             v, n_out, v + n_in);
}

void gf_devop_view(struct gf_tview *t, void *data, size_t n, int64_t rows)
{
    memset(t, 0, sizeof(*t));
    t->dtype = GF_FLOAT;
    t->nelem = n;
    t->data = n ? data : NULL;
    t->rank = rows > 0 ? 2 : 1;
    t->dims[0] = rows > 0 ? rows : (int64_t)n;
    t->dims[1] = rows > 0 ? (int64_t)n / rows : 0;
}

void gf_devop_release(struct gf_devop *op)
{
    if (op->ws)
        op->be->ops->release(op->be, op->ws);
    op->ws = NULL;
    op->ws_size = 0;
}

/* Runs the CPU kernel on host copies of the device views (a backend
 * without the op's kernel). */
static enum gf_status run_staged(struct gf_devop *op, const struct gf_tview *in, size_t n_in,
                                 struct gf_tview *out, size_t n_out, int n_threads)
{
    struct gf_backend *be = op->be, *cpu = gf_backend_get("cpu");
    struct gf_tview hin[16], hout[16];
    void *buf[32] = {0};
    enum gf_status st = GF_OK;
    for (size_t i = 0; i < n_in + n_out && st == GF_OK; i++) {
        const struct gf_tview *t = i < n_in ? &in[i] : &out[i - n_in];
        struct gf_tview *h = i < n_in ? &hin[i] : &hout[i - n_in];
        *h = *t;
        if (!t->data || (i < n_in && t->host)) {
            h->data = (void *)t->host;
            continue;
        }
        size_t bytes = gf_tview_bytes(t);
        if (!(buf[i] = malloc(bytes + 1)))
            st = gf_error(GF_ERR_NOMEM, "out of memory staging %s", op->node->op_type);
        else if (i < n_in && (st = be->ops->copy_out(be, buf[i], t->data, bytes)) == GF_OK &&
                 op->traffic)
            op->traffic->d2h += bytes;
        h->data = buf[i];
        h->host = buf[i];
    }
    /* an output written in place over an input starts from the input's values */
    for (size_t o = 0; o < n_out && st == GF_OK; o++)
        for (size_t i = 0; i < n_in; i++)
            if (out[o].data && out[o].data == in[i].data && buf[n_in + o])
                memcpy(buf[n_in + o], hin[i].data, gf_tview_bytes(&out[o]));
    struct gf_kernel_args a = {.node = op->node, .in = hin, .n_in = n_in, .out = hout,
                               .n_out = n_out, .n_threads = n_threads, .backend = cpu};
    size_t need = st == GF_OK && op->k->workspace ? op->k->workspace(&a) : 0;
    void *ws = need ? malloc(need) : NULL;
    a.workspace = ws;
    if (st == GF_OK && need && !ws)
        st = gf_error(GF_ERR_NOMEM, "out of memory for %s's workspace", op->node->op_type);
    if (st == GF_OK)
        st = op->k->run(&a);
    for (size_t o = 0; o < n_out && st == GF_OK; o++) {
        if (!out[o].data)
            continue;
        size_t bytes = gf_tview_bytes(&out[o]);
        if ((st = be->ops->copy_in(be, out[o].data, hout[o].data, bytes)) == GF_OK &&
            op->traffic)
            op->traffic->h2d += bytes;
    }
    free(ws);
    for (size_t i = 0; i < 32; i++)
        free(buf[i]);
    return st;
}

enum gf_status gf_devop_run(struct gf_devop *op, const struct gf_tview *in, size_t n_in,
                            struct gf_tview *out, size_t n_out, int n_threads)
{
    if (n_in > 16 || n_out > 16)
        return gf_error(GF_ERR_INTERNAL, "%s: too many operands", op->node->op_type);
    if (!op->k) {
        op->k = gf_kernel_find(op->be, op->node, in, n_in);
        op->staged = !op->k && !op->be->host_memory;
        if (op->staged)
            op->k = gf_kernel_find(gf_backend_get("cpu"), op->node, in, n_in);
        if (!op->k)
            return gf_error(GF_ERR_UNSUPPORTED, "no %s kernel for %s", op->be->ops->name,
                            op->node->op_type);
    }
    if (op->staged)
        return run_staged(op, in, n_in, out, n_out, n_threads);
    struct gf_kernel_args a = {.node = op->node, .in = in, .n_in = n_in, .out = out,
                               .n_out = n_out, .n_threads = n_threads, .backend = op->be};
    size_t need = op->k->workspace ? op->k->workspace(&a) : 0;
    if (need > op->ws_size) {
        gf_devop_release(op);
        if (!(op->ws = op->be->ops->alloc(op->be, need)))
            return GF_ERR_NOMEM;
        op->ws_size = need;
    }
    a.workspace = op->ws;
    return op->k->run(&a);
}

/* ---- the optimizer ------------------------------------------------------------------ */

static enum gf_status optim_alloc(const struct gf_optim_opts *o, struct gf_backend *be,
                                  size_t n, struct gf_optim **out)
{
    *out = NULL;
    enum gf_status st = check_opts(o);
    if (st != GF_OK)
        return st;
    struct gf_optim *op = calloc(1, sizeof(*op));
    if (!op)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    op->o = *o;
    op->n = n;
    op->n_state = o->kind == GF_OPTIM_ADAMW ? 2 : o->momentum != 0 ? 1 : 0;
    op->op.be = op->op_staged.be = be;
    bool adamw = o->kind == GF_OPTIM_ADAMW;
    if (!(op->ops = gf_model_new(8, "optimizer")) ||
        !(op->op.node = gf_devop_node(op->ops, adamw ? "AdamWStep" : "SGDStep", NULL,
                                      adamw ? 5 : 4, adamw ? 3 : 2)) ||
        !(op->op_staged.node = gf_devop_node(op->ops, adamw ? "AdamWStep" : "SGDStep", NULL,
                                             adamw ? 6 : 5, adamw ? 3 : 2))) {
        gf_optim_free(op);
        return gf_error(GF_ERR_NOMEM, "out of memory");
    }
    *out = op;
    return GF_OK;
}

enum gf_status gf_optim_new(const struct gf_optim_opts *o, size_t n, const size_t *sizes,
                            struct gf_optim **out)
{
    struct gf_optim *op;
    enum gf_status st = optim_alloc(o, gf_backend_get("cpu"), n, &op);
    if (st != GF_OK)
        return st;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += sizes[i];
    op->sizes = malloc((n + 1) * sizeof(*op->sizes));
    op->state = calloc(op->n_state * n + 1, sizeof(*op->state));
    op->block = calloc(op->n_state * total + 1, sizeof(float));
    if (!op->sizes || !op->state || !op->block) {
        gf_optim_free(op);
        return gf_error(GF_ERR_NOMEM, "out of memory for the optimizer state (%zu floats)",
                        op->n_state * total);
    }
    if (n)
        memcpy(op->sizes, sizes, n * sizeof(*sizes));
    float *p = op->block;
    for (size_t k = 0; k < op->n_state; k++)
        for (size_t i = 0; i < n; i++, p += sizes[i - 1])
            op->state[k * n + i] = p;
    *out = op;
    return GF_OK;
}

void *gf_exec_zeroed(struct gf_backend *be, size_t n, struct gf_traffic *traffic)
{
    size_t bytes = n * sizeof(float), chunk = bytes < (64u << 20) ? bytes : 64u << 20;
    void *mem = be->ops->alloc(be, bytes ? bytes : sizeof(float));
    if (!mem || !bytes)
        return mem;
    if (be->host_memory) {
        memset(mem, 0, bytes);
        return mem;
    }
    void *zero = calloc(1, chunk);
    enum gf_status st = zero ? GF_OK : gf_error(GF_ERR_NOMEM, "out of memory");
    for (size_t off = 0; off < bytes && st == GF_OK; off += chunk) {
        size_t len = bytes - off < chunk ? bytes - off : chunk;
        void *view = be->ops->view(be, mem, off, len);
        st = view ? be->ops->copy_in(be, view, zero, len) : GF_ERR_NOMEM;
        if (view && be->ops->view_release)
            be->ops->view_release(be, view);
    }
    free(zero);
    if (st != GF_OK) {
        be->ops->release(be, mem);
        return NULL;
    }
    if (traffic)
        traffic->h2d += bytes;
    return mem;
}

enum gf_status gf_optim_new_on(const struct gf_optim_opts *o, struct gf_backend *be, size_t n,
                               struct gf_traffic *traffic, struct gf_optim **out)
{
    struct gf_optim *op;
    enum gf_status st = optim_alloc(o, be, 1, &op);
    if (st != GF_OK)
        return st;
    op->op.traffic = op->op_staged.traffic = traffic;
    if (!(op->sizes = malloc(sizeof(*op->sizes)))) {
        gf_optim_free(op);
        return gf_error(GF_ERR_NOMEM, "out of memory");
    }
    op->sizes[0] = n;
    for (size_t k = 0; k < op->n_state; k++)
        if (!(op->mem[k] = gf_exec_zeroed(be, n, traffic))) {
            gf_optim_free(op);
            return gf_error(GF_ERR_NOMEM, "out of %s memory for the optimizer state (%zu "
                            "floats)", be->ops->name, op->n_state * n);
        }
    *out = op;
    return GF_OK;
}

void gf_optim_free(struct gf_optim *o)
{
    if (!o)
        return;
    for (size_t k = 0; k < 2; k++)
        if (o->mem[k])
            o->op.be->ops->release(o->op.be, o->mem[k]);
    gf_devop_release(&o->op);
    gf_devop_release(&o->op_staged);
    if (o->hyper_mem)
        o->op.be->ops->release(o->op.be, o->hyper_mem);
    gf_model_free(o->ops);
    free(o->block);
    free(o->state);
    free(o->sizes);
    free(o);
}

int64_t gf_optim_get_step(const struct gf_optim *o)
{
    return o->step;
}

void gf_optim_set_step(struct gf_optim *o, int64_t step)
{
    o->step = step;
}

size_t gf_optim_state_count(const struct gf_optim *o)
{
    return o->n_state;
}

const char *gf_optim_state_name(const struct gf_optim *o, size_t k)
{
    if (k >= o->n_state)
        return NULL;
    if (o->o.kind == GF_OPTIM_SGD)
        return "momentum_buffer";
    return k == 0 ? "exp_avg" : "exp_avg_sq";
}

float *gf_optim_get_state(struct gf_optim *o, size_t i, size_t k)
{
    if (i >= o->n || k >= o->n_state)
        return NULL;
    if (o->state)
        return o->state[k * o->n + i];
    return o->op.be->host_memory ? o->mem[k] : NULL;
}

void *gf_optim_state_mem(const struct gf_optim *o, size_t k)
{
    return k < o->n_state ? o->mem[k] : NULL;
}

/* The update's hyper (kernels/optim_ops.h) for o's next step. */
static void fill_hyper(const struct gf_optim *o, double lr, double grad_scale, double *hyper)
{
    const struct gf_optim_opts *p = &o->o;
    if (p->kind == GF_OPTIM_ADAMW) {
        hyper[GF_ADAMW_LR] = lr;
        hyper[GF_ADAMW_BETA1] = p->beta1;
        hyper[GF_ADAMW_BETA2] = p->beta2;
        hyper[GF_ADAMW_EPS] = p->eps;
        hyper[GF_ADAMW_WD] = p->weight_decay;
        hyper[GF_ADAMW_STEP] = (double)o->step;
        hyper[GF_ADAMW_GRAD_SCALE] = grad_scale;
    } else {
        hyper[GF_SGD_LR] = lr;
        hyper[GF_SGD_MOMENTUM] = p->momentum;
        hyper[GF_SGD_DAMPENING] = p->dampening;
        hyper[GF_SGD_WD] = p->weight_decay;
        hyper[GF_SGD_NESTEROV] = p->nesterov;
        hyper[GF_SGD_STEP] = (double)o->step;
        hyper[GF_SGD_GRAD_SCALE] = grad_scale;
    }
}

/* The hyper input: `host` (and on the CPU its data) the values, else
 * backend memory `mem` alone. */
static void hyper_view(const struct gf_optim *o, struct gf_tview *h, double *host, void *mem)
{
    memset(h, 0, sizeof(*h));
    h->dtype = GF_DOUBLE;
    h->rank = 1;
    h->dims[0] = o->o.kind == GF_OPTIM_ADAMW ? GF_ADAMW_HYPER : GF_SGD_HYPER;
    h->nelem = (size_t)h->dims[0];
    h->host = host;
    h->data = mem ? mem : o->op.be->host_memory ? host : NULL;
}

/* One SGDStep / AdamWStep over n floats: params, grads and the state
 * buffers state[0..n_state) are memory of o's backend. */
static enum gf_status update(struct gf_optim *o, void *params, void *grads, void *const *state,
                             size_t n, double lr, double grad_scale, int n_threads)
{
    bool adamw = o->o.kind == GF_OPTIM_ADAMW;
    double hyper[8];
    fill_hyper(o, lr, grad_scale, hyper);
    struct gf_tview in[5], out[3];
    gf_devop_view(&in[0], params, n, 0);
    gf_devop_view(&in[1], grads, n, 0);
    gf_devop_view(&out[0], params, n, 0);
    hyper_view(o, &in[adamw ? 4 : 2], hyper, NULL);
    for (size_t k = 0; k < o->n_state; k++) {
        gf_devop_view(&in[adamw ? 2 + k : 3], state[k], n, 0);
        gf_devop_view(&out[1 + k], state[k], n, 0);
    }
    if (!adamw && !o->n_state) {
        memset(&in[3], 0, sizeof(in[3]));
        memset(&out[1], 0, sizeof(out[1]));
    }
    return gf_devop_run(&o->op, in, adamw ? 5 : 4, out, adamw ? 3 : 2, n_threads);
}

void gf_optim_step(struct gf_optim *o, float *const *params, const float *const *grads,
                   double lr)
{
    for (size_t i = 0; i < o->n; i++) {
        void *state[2] = {gf_optim_get_state(o, i, 0), gf_optim_get_state(o, i, 1)};
        /* host memory, checked shapes: the CPU kernel cannot fail */
        (void)update(o, params[i], (void *)grads[i], state, o->sizes[i], lr, 1.0, 1);
    }
    o->step++;
}

enum gf_status gf_optim_update(struct gf_optim *o, void *params, void *grads, double lr,
                               double grad_scale, int n_threads)
{
    enum gf_status st = update(o, params, grads, o->mem, o->sizes[0], lr, grad_scale,
                               n_threads);
    if (st == GF_OK)
        o->step++;
    return st;
}

enum gf_status gf_optim_stage(struct gf_optim *o, double lr, double grad_scale)
{
    struct gf_backend *be = o->op.be;
    double hyper[8];
    fill_hyper(o, lr, grad_scale, hyper);
    if (!o->hyper_mem && !(o->hyper_mem = be->ops->alloc(be, sizeof(hyper))))
        return gf_error(GF_ERR_NOMEM, "out of %s memory for the optimizer's scalars",
                        be->ops->name);
    size_t bytes = GF_ADAMW_HYPER * sizeof(double); /* (SGD's as long) */
    if (be->host_memory) {
        memcpy(o->hyper_mem, hyper, bytes);
        return GF_OK;
    }
    if (o->op.traffic)
        o->op.traffic->h2d += bytes;
    return be->ops->copy_in(be, o->hyper_mem, hyper, bytes);
}

enum gf_status gf_optim_update_staged(struct gf_optim *o, void *params, void *grads, void *norm,
                                      double max_norm, int n_threads)
{
    bool adamw = o->o.kind == GF_OPTIM_ADAMW;
    size_t n = o->sizes[0], hi = adamw ? 4 : 2, ni = adamw ? 5 : 4;
    if (!o->hyper_mem)
        return gf_error(GF_ERR_INTERNAL, "the optimizer's update was not staged");
    if (gf_node_set_attr_float(o->op_staged.node, "max_norm", (float)max_norm) != GF_OK)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    struct gf_tview in[6], out[3];
    memset(in, 0, sizeof(in));
    gf_devop_view(&in[0], params, n, 0);
    gf_devop_view(&in[1], grads, n, 0);
    gf_devop_view(&out[0], params, n, 0);
    for (size_t k = 0; k < o->n_state; k++) {
        gf_devop_view(&in[adamw ? 2 + k : 3], o->mem[k], n, 0);
        gf_devop_view(&out[1 + k], o->mem[k], n, 0);
    }
    if (!adamw && !o->n_state)
        memset(&out[1], 0, sizeof(out[1]));
    hyper_view(o, &in[hi], NULL, o->hyper_mem);
    gf_devop_view(&in[ni], norm, 1, 0);
    in[ni].dtype = GF_DOUBLE;
    return gf_devop_run(&o->op_staged, in, ni + 1, out, adamw ? 3 : 2, n_threads);
}

void gf_optim_advance(struct gf_optim *o)
{
    o->step++;
}

/* torch.nn.utils.clip_grad_norm_'s coefficient, in float. */
float gf_clip_coef(double max_norm, double norm)
{
    return gf_clip_coef_of(max_norm, norm);
}

double gf_lr_at(enum gf_lr_schedule kind, double lr, double min_lr, int64_t warmup,
                int64_t total, int64_t s)
{
    if (warmup > 0 && s < warmup)
        return lr * (double)(s + 1) / (double)warmup;
    if (kind == GF_LR_CONSTANT)
        return lr;
    int64_t span = total - warmup;
    double progress = span > 0 ? (double)(s - warmup) / (double)span : 1.0;
    if (progress > 1)
        progress = 1;
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * progress));
}
