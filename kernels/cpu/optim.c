/*
 * CPU kernels: the optimizer ops (graph/ops.def, "optimizer ops"), which
 * the trainer runs on flat fp32 ranges holding every trained parameter
 * (executor/train.c), and executor/optim.c's gf_optim_step per tensor.
 * The arithmetic is torch.optim's, exactly as executor/optim.c computed it
 * before these ops existed: fp32 tensors and state, the scalars of
 * kernels/optim_ops.h, the same operation order, and a fused multiply-add
 * where torch's vectorized CPU kernels use one (add with alpha, lerp).
 *
 * GradAccumulate(G, Acc?) -> Y, attributes scale (float, 1), transpose (0):
 *   Y = (Acc, or +0 when absent) + G * scale, in fp32.  transpose=1: G is
 *   [c, r] and read as its transpose (Y, Acc [r, c]): a tied copy stored
 *   transposed adds its gradient to its master's.  Y may be Acc (in place).
 * GradNorm(X) -> N: float64 [1], sqrt of the sum of (double)x^2 taken in
 *   index order (here sequentially, as torch's clip_grad_norm_ would in
 *   double); other backends add in a fixed tree order.
 * SGDStep(P, G, hyper, Buf?) -> P', Buf' (torch.optim.SGD, one tensor):
 *   g = (0 + G) * grad_scale
 *   g = g + wd * p                       (wd != 0)
 *   buf = g (step 0), else buf = momentum * buf + (1 - dampening) * g
 *   g = g + momentum * buf (nesterov), else g = buf      (momentum != 0)
 *   p = p - lr * g
 * AdamWStep(P, G, M, V, hyper) -> P', M', V' (torch.optim.AdamW):
 *   g = (0 + G) * grad_scale
 *   p = p * (1 - lr * wd)                (wd != 0)
 *   m = lerp(m, g, 1 - beta1)            = m + (1 - beta1) * (g - m)
 *   v = v * beta2 + (1 - beta2) * g * g
 *   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *   with t = step + 1.
 * The updates write in place (P' is P, and so on).  "0 + G" turns a -0
 * gradient into +0, as a gradient accumulated from +0 has it.  hyper:
 * kernels/optim_ops.h.  With N (SGDStep's input 4, AdamWStep's 5) the
 * gradient scale is grad_scale times torch's clipping coefficient for
 * attribute max_norm; a scale or N not finite skips the update (the outputs
 * keep the inputs' values: gf_clip_scale).  Elementwise loops split over threads (each element
 * computes the same whichever thread takes it); GradNorm runs on one.
 */
#include "cpu.h"
#include "optim_ops.h"

#define GRAIN 16384 /* elements worth a thread */

/* ---- GradAccumulate --------------------------------------------------------------- */

struct acc_ctx {
    float *y;
    const float *acc, *g;
    float scale;
    size_t r, c; /* transposed: Y is [r, c], G [c, r] */
};

static void acc_chunk(void *p, size_t b, size_t e)
{
    const struct acc_ctx *c = p;
    for (size_t i = b; i < e; i++)
        c->y[i] = (c->acc ? c->acc[i] : 0.0f) + c->g[i] * c->scale;
}

static void acc_rows_t(void *p, size_t b, size_t e)
{
    const struct acc_ctx *c = p;
    for (size_t a = b; a < e; a++)
        for (size_t k = 0; k < c->c; k++)
            c->y[a * c->c + k] = (c->acc ? c->acc[a * c->c + k] : 0.0f) +
                                 c->g[k * c->r + a] * c->scale;
}

static enum gf_status acc_run(const struct gf_kernel_args *a)
{
    struct gf_optim_args o;
    enum gf_status st = gf_optim_check(a, &o);
    if (st != GF_OK)
        return st;
    const struct gf_tview *g = &a->in[0], *acc = o.opt ? &a->in[1] : NULL;
    struct gf_tview *y = &a->out[0];
    bool tr = o.r.transpose;
    struct acc_ctx c = {y->data, acc ? acc->data : NULL, g->data, o.r.scale, 0, 0};
    if (!tr) {
        gf_parallel_for(a->n_threads, y->nelem, GRAIN, acc_chunk, &c);
        return GF_OK;
    }
    c.r = (size_t)y->dims[0];
    c.c = (size_t)y->dims[1];
    gf_parallel_for(a->n_threads, c.r, c.c ? GRAIN / c.c + 1 : 1, acc_rows_t, &c);
    return GF_OK;
}

/* ---- GradNorm ------------------------------------------------------------------------- */

static enum gf_status norm_run(const struct gf_kernel_args *a)
{
    struct gf_optim_args chk;
    enum gf_status st = gf_optim_check(a, &chk);
    if (st != GF_OK)
        return st;
    const float *x = a->in[0].data;
    struct gf_tview *o = &a->out[0];
    double sum = 0;
    for (size_t i = 0; i < a->in[0].nelem; i++)
        sum += (double)x[i] * x[i];
    *(double *)o->data = sqrt(sum);
    return GF_OK;
}

/* ---- the updates ---------------------------------------------------------------------- */

struct sgd_ctx {
    float *p, *buf;                     /* written */
    const float *p0, *buf0, *grad;      /* read (p0 may be p: in place) */
    struct gf_sgd_scalars s;
};

static void sgd_chunk(void *ctx, size_t b, size_t e)
{
    const struct sgd_ctx *c = ctx;
    const struct gf_sgd_scalars *s = &c->s;
    for (size_t i = b; i < e; i++) {
        const float p = c->p0[i];
        float g = (0.0f + c->grad[i]) * s->grad_scale;
        if (s->decay_on)
            g = fmaf(s->wd, p, g);
        if (s->momentum_on) {
            const float buf = s->first ? g : fmaf(s->damp, g, c->buf0[i] * s->mom);
            c->buf[i] = buf;
            g = s->nesterov ? fmaf(s->mom, buf, g) : buf;
        }
        c->p[i] = fmaf(s->neg_lr, g, p);
    }
}

/* A skipped update: each output takes its input's values (in place: nothing). */
static void keep(const struct gf_kernel_args *a, const size_t *from, size_t n_out)
{
    for (size_t k = 0; k < n_out; k++)
        if (a->out[k].data && a->out[k].data != a->in[from[k]].data)
            memcpy(a->out[k].data, a->in[from[k]].data, gf_tview_bytes(&a->out[k]));
}

/* The update's gradient scale (gf_clip_scale); false: skipped. */
static bool step_scale(const struct gf_optim_args *o, float grad_scale, float *scale)
{
    return gf_clip_scale(grad_scale, o->norm ? o->norm_host : NULL, o->max_norm, scale);
}

static enum gf_status sgd_run(const struct gf_kernel_args *a)
{
    struct gf_optim_args o;
    enum gf_status st = gf_optim_check(a, &o);
    if (st != GF_OK)
        return st;
    struct sgd_ctx c = {.p = a->out[0].data, .p0 = a->in[0].data, .grad = a->in[1].data};
    gf_sgd_scalars(o.hyper, &c.s);
    if (!step_scale(&o, c.s.grad_scale, &c.s.grad_scale)) {
        keep(a, (const size_t[]){0, 3}, o.opt ? 2 : 1);
        return GF_OK;
    }
    c.buf = o.opt ? a->out[1].data : NULL;
    c.buf0 = o.opt ? a->in[3].data : NULL;
    gf_parallel_for(a->n_threads, a->in[0].nelem, GRAIN, sgd_chunk, &c);
    return GF_OK;
}

struct adamw_ctx {
    float *p, *m, *v;                   /* written */
    const float *p0, *m0, *v0, *grad;   /* read (may be the same: in place) */
    struct gf_adamw_scalars s;
};

static void adamw_chunk(void *ctx, size_t b, size_t e)
{
    const struct adamw_ctx *c = ctx;
    const struct gf_adamw_scalars *s = &c->s;
    for (size_t i = b; i < e; i++) {
        const float g = (0.0f + c->grad[i]) * s->grad_scale;
        float p = c->p0[i];
        if (s->decay_on)
            p = p * s->decay;
        const float m0 = c->m0[i];
        const float m = s->small ? fmaf(s->w, g - m0, m0) : fmaf(s->w - 1.0f, g - m0, g);
        const float v = c->v0[i] * s->b2 + s->one_b2 * g * g;
        const float denom = sqrtf(v) / s->bc2_sqrt + s->eps;
        c->m[i] = m;
        c->v[i] = v;
        c->p[i] = p + s->step_size * (m / denom);
    }
}

static enum gf_status adamw_run(const struct gf_kernel_args *a)
{
    struct gf_optim_args o;
    enum gf_status st = gf_optim_check(a, &o);
    if (st != GF_OK)
        return st;
    struct adamw_ctx c = {a->out[0].data, a->out[1].data, a->out[2].data, a->in[0].data,
                          a->in[2].data, a->in[3].data, a->in[1].data, {0}};
    gf_adamw_scalars(o.hyper, &c.s);
    if (!step_scale(&o, c.s.grad_scale, &c.s.grad_scale)) {
        keep(a, (const size_t[]){0, 2, 3}, 3);
        return GF_OK;
    }
    gf_parallel_for(a->n_threads, a->in[0].nelem, GRAIN, adamw_chunk, &c);
    return GF_OK;
}

/* ==== the table ====================================================================== */

/* The rules (kernels/checks.c): fp32; the hyper's bytes are in host memory. */
static bool optim_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return gf_optim_supports(n, in, n_in, false);
}

static const struct gf_kernel kernels[] = {
    {.op = GF_OP_GRAD_ACCUMULATE, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "optim",
     .supports = optim_supports, .run = acc_run},
    {.op = GF_OP_GRAD_NORM, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "optim",
     .supports = optim_supports, .run = norm_run},
    {.op = GF_OP_SGD_STEP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "optim",
     .supports = optim_supports, .run = sgd_run},
    {.op = GF_OP_ADAMW_STEP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "optim",
     .supports = optim_supports, .run = adamw_run},
};

const struct gf_kernel_table gf_cpu_optim_table = {kernels, sizeof(kernels) / sizeof(kernels[0])};
