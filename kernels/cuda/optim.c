/* CUDA kernels of the optimizer ops (graph/ops.def, "optimizer ops";
 * definitions: kernels/cpu/optim.c; device code: optim.cu):
 *
 *   GradAccumulate   elementwise, or transposed through 32 x 32 tiles
 *   GradNorm         two passes: partial sums per block, then one block,
 *                    in double
 *   SGDStep AdamWStep elementwise; the scalars of kernels/optim_ops.h passed
 *                    by value when hyper has a host copy, else computed
 *                    from it on the device when the kernel runs (so a
 *                    replayed CUDA graph reads each step's); N (GradNorm's
 *                    output) applied on the device
 *
 * fp32 only; each element computed as the CPU computes it.  The rules and
 * checks are every backend's (gf_optim_supports, gf_optim_check in
 * kernels/checks.c).  GradNorm's workspace holds the partial sums.
 */
#include "cu.h"
#include "device_common.h"
#include "optim_ops.h"

/* ---- GradAccumulate ------------------------------------------------------------------- */

static enum gf_status acc_launch(const struct gf_kernel_args *a, const struct gf_optim_args *o)
{
    const struct gf_tview *g = &a->in[0];
    struct gf_tview *y = &a->out[0];
    const float *am = o->opt ? a->in[1].data : NULL;
    cudaError_t e = o->r.transpose
                        ? gf_cu_grad_acc_t(gf_cu_stream(a), y->data, am, g->data, o->r.scale,
                                           (int)y->dims[0], (int)y->dims[1])
                        : gf_cu_grad_acc(gf_cu_stream(a), y->data, am, g->data, o->r.scale,
                                         (int64_t)y->nelem);
    return gf_cu_check(a, e, "GradAccumulate kernel");
}

/* ---- GradNorm ------------------------------------------------------------------------- */

static size_t norm_workspace(const struct gf_kernel_args *a)
{
    (void)a;
    return GF_CU_SUMSQ_PARTS * sizeof(double);
}

static enum gf_status norm_launch(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the partial sums");
    cudaError_t e = gf_cu_sumsq(gf_cu_stream(a), x->data, x->data ? (int64_t)x->nelem : 0,
                                a->workspace, a->out[0].data);
    return gf_cu_check(a, e, "GradNorm kernel");
}

/* ---- the updates ---------------------------------------------------------------------- */

_Static_assert(GF_SGD_LR == 0 && GF_SGD_MOMENTUM == 1 && GF_SGD_DAMPENING == 2 &&
               GF_SGD_WD == 3 && GF_SGD_NESTEROV == 4 && GF_SGD_STEP == 5 &&
               GF_SGD_GRAD_SCALE == 6 && GF_ADAMW_LR == 0 && GF_ADAMW_BETA1 == 1 &&
               GF_ADAMW_BETA2 == 2 && GF_ADAMW_EPS == 3 && GF_ADAMW_WD == 4 &&
               GF_ADAMW_STEP == 5 && GF_ADAMW_GRAD_SCALE == 6, "optim.cu's hyper layout");

/* What the kernel reads on the device: hyper without a host copy (s NULL),
 * an N without one (else its clipping is in s->grad_scale already). */
static struct gf_cu_step device_step(const struct gf_kernel_args *a, const struct gf_optim_args *o,
                                     const void *s)
{
    const struct gf_tview *h = &a->in[a->node->op == GF_OP_SGD_STEP ? 2 : 4];
    return (struct gf_cu_step){.hyper = s ? NULL : h->data,
                               .norm = o->norm && !o->norm_host ? o->norm->data : NULL,
                               .max_norm = o->max_norm};
}

static enum gf_status sgd_launch(const struct gf_kernel_args *a, const struct gf_optim_args *o,
                                 const struct gf_sgd_scalars *s)
{
    size_t n = a->in[0].nelem;
    struct gf_cu_sgd_args c = {0};
    if (s)
        c = (struct gf_cu_sgd_args){
            .decay_on = s->decay_on, .momentum_on = s->momentum_on && o->opt,
            .nesterov = s->nesterov, .first = s->first, .wd = s->wd, .mom = s->mom,
            .damp = s->damp, .neg_lr = s->neg_lr, .grad_scale = s->grad_scale};
    struct gf_cu_step st = device_step(a, o, s);
    float *b = o->opt ? a->out[1].data : NULL;
    const float *b0 = o->opt ? a->in[3].data : NULL;
    cudaError_t e = gf_cu_sgd(gf_cu_stream(a), a->out[0].data, b, a->in[0].data, b0,
                              a->in[1].data, (int64_t)n, &c, &st);
    return gf_cu_check(a, e, "SGDStep kernel");
}

static enum gf_status adamw_launch(const struct gf_kernel_args *a, const struct gf_optim_args *o,
                                   const struct gf_adamw_scalars *s)
{
    size_t n = a->in[0].nelem;
    struct gf_cu_adamw_args c = {0};
    if (s)
        c = (struct gf_cu_adamw_args){
            .decay_on = s->decay_on, .small = s->small, .decay = s->decay, .w = s->w,
            .b2 = s->b2, .one_b2 = s->one_b2, .step_size = s->step_size,
            .bc2_sqrt = s->bc2_sqrt, .eps = s->eps, .grad_scale = s->grad_scale};
    struct gf_cu_step st = device_step(a, o, s);
    /* inputs P G M V hyper N?; outputs P M V */
    cudaError_t e = gf_cu_adamw(gf_cu_stream(a), a->out[0].data, a->out[1].data,
                                a->out[2].data, a->in[0].data, a->in[2].data, a->in[3].data,
                                a->in[1].data, (int64_t)n, &c, &st);
    return gf_cu_check(a, e, "AdamWStep kernel");
}

/* ==== the table ====================================================================== */

static const struct gf_dev_optim cu_optim = {
    .acc = acc_launch, .norm = norm_launch, .sgd = sgd_launch, .adamw = adamw_launch};

static enum gf_status optim_run(const struct gf_kernel_args *a)
{
    return gf_dev_optim_run(&cu_optim, a);
}

/* The rules (kernels/checks.c): fp32; hyper and N on the host or the device. */
static bool optim_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return gf_optim_supports(n, in, n_in, false);
}

#define KERNEL(OP, WS)                                                                      \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "optim",           \
     .supports = optim_supports, .workspace = WS, .run = optim_run}

static const struct gf_kernel kernels[] = {
    KERNEL(GRAD_ACCUMULATE, NULL), KERNEL(GRAD_NORM, norm_workspace), KERNEL(SGD_STEP, NULL),
    KERNEL(ADAMW_STEP, NULL)};

const struct gf_kernel_table gf_cuda_optim_table = {kernels,
                                                    sizeof(kernels) / sizeof(kernels[0])};
