/* CUDA kernels of the optimizer ops (graph/ops.def, "optimizer ops";
 * definitions: kernels/cpu/optim.c; device code: optim.cu):
 *
 *   GradAccumulate   elementwise, or transposed through 32 x 32 tiles
 *   GradNorm         two passes: partial sums per block, then one block,
 *                    in double
 *   SGDStep AdamWStep elementwise; hyper read on the host (its `host` copy),
 *                    the scalars of kernels/optim_ops.h passed by value
 *
 * fp32 only; each element computed as the CPU computes it.  The rules
 * follow kernels/opencl/optim.c.  GradNorm's workspace holds the partial
 * sums.
 */
#include "cu.h"
#include "optim_ops.h"

static bool f32(const struct gf_tview *t)
{
    return t->dtype == GF_FLOAT;
}

/* ---- GradAccumulate ------------------------------------------------------------------- */

static bool acc_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n_in < 1 || !f32(&in[0]) || (n_in > 1 && in[1].dtype != GF_UNDEFINED && !f32(&in[1])))
        return false;
    return !gf_node_attr_int(n, "transpose", 0) || in[0].rank == 2;
}

static enum gf_status acc_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *g = &a->in[0];
    const struct gf_tview *acc = a->n_in > 1 && a->in[1].data ? &a->in[1] : NULL;
    struct gf_tview *y = &a->out[0];
    bool tr = gf_node_attr_int(a->node, "transpose", 0) != 0;
    if (y->nelem != g->nelem || (acc && acc->nelem != y->nelem) || y->dtype != GF_FLOAT)
        return gf_kernel_error(a, GF_ERR_INVALID, "gradient of %zu elements, accumulator of "
                               "%zu, output of %zu", g->nelem, acc ? acc->nelem : y->nelem,
                               y->nelem);
    if (tr && (y->rank != 2 || y->dims[0] != g->dims[1] || y->dims[1] != g->dims[0] ||
               y->dims[0] > INT32_MAX || y->dims[1] > INT32_MAX))
        return gf_kernel_error(a, GF_ERR_INVALID, "transpose: the output is not the "
                               "gradient's transpose");
    if (!y->nelem)
        return GF_OK;
    float scale = gf_node_attr_float(a->node, "scale", 1.0f);
    const float *am = acc ? acc->data : NULL;
    cudaError_t e = tr ? gf_cu_grad_acc_t(gf_cu_stream(a), y->data, am, g->data, scale,
                                          (int)y->dims[0], (int)y->dims[1])
                       : gf_cu_grad_acc(gf_cu_stream(a), y->data, am, g->data, scale,
                                        (int64_t)y->nelem);
    return gf_cu_check(a, e, "GradAccumulate kernel");
}

/* ---- GradNorm ------------------------------------------------------------------------- */

static bool norm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 1 && f32(&in[0]);
}

static size_t norm_workspace(const struct gf_kernel_args *a)
{
    (void)a;
    return GF_CU_SUMSQ_PARTS * sizeof(double);
}

static enum gf_status norm_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    struct gf_tview *o = &a->out[0];
    if (o->dtype != GF_DOUBLE || o->nelem != 1)
        return gf_kernel_error(a, GF_ERR_INVALID, "the norm is one float64");
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the partial sums");
    cudaError_t e = gf_cu_sumsq(gf_cu_stream(a), x->data, x->data ? (int64_t)x->nelem : 0,
                                a->workspace, o->data);
    return gf_cu_check(a, e, "GradNorm kernel");
}

/* ---- the updates ---------------------------------------------------------------------- */

static const double *hyper_of(const struct gf_kernel_args *a, size_t i, size_t len)
{
    const struct gf_tview *h = &a->in[i];
    if (h->dtype != GF_DOUBLE || h->nelem != len || !h->host) {
        gf_kernel_error(a, GF_ERR_INVALID, "hyper is not %zu float64 values on the host", len);
        return NULL;
    }
    return h->host;
}

static bool same_size(const struct gf_tview *t, size_t n)
{
    return t->dtype == GF_FLOAT && t->nelem == n;
}

static bool sgd_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 3 && f32(&in[0]) && f32(&in[1]) && in[2].dtype == GF_DOUBLE && in[2].host;
}

static enum gf_status sgd_run(const struct gf_kernel_args *a)
{
    const double *h = hyper_of(a, 2, GF_SGD_HYPER);
    if (!h)
        return GF_ERR_INVALID;
    struct gf_sgd_scalars s;
    gf_sgd_scalars(h, &s);
    size_t n = a->in[0].nelem;
    bool buf = a->n_in > 3 && a->in[3].data && a->n_out > 1 && a->out[1].data;
    if (s.momentum_on && !buf)
        return gf_kernel_error(a, GF_ERR_INVALID, "momentum without a momentum buffer");
    if (!same_size(&a->in[1], n) || !same_size(&a->out[0], n) ||
        (buf && (!same_size(&a->in[3], n) || !same_size(&a->out[1], n))))
        return gf_kernel_error(a, GF_ERR_INVALID, "operands are not all %zu floats", n);
    if (!n)
        return GF_OK;
    struct gf_cu_sgd_args c = {
        .decay_on = s.decay_on, .momentum_on = s.momentum_on && buf, .nesterov = s.nesterov,
        .first = s.first, .wd = s.wd, .mom = s.mom, .damp = s.damp, .neg_lr = s.neg_lr,
        .grad_scale = s.grad_scale};
    float *b = buf ? a->out[1].data : NULL;
    const float *b0 = buf ? a->in[3].data : NULL;
    cudaError_t e = gf_cu_sgd(gf_cu_stream(a), a->out[0].data, b, a->in[0].data, b0,
                              a->in[1].data, (int64_t)n, &c);
    return gf_cu_check(a, e, "SGDStep kernel");
}

static bool adamw_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 5 && f32(&in[0]) && in[4].dtype == GF_DOUBLE && in[4].host;
}

static enum gf_status adamw_run(const struct gf_kernel_args *a)
{
    const double *h = hyper_of(a, 4, GF_ADAMW_HYPER);
    if (!h)
        return GF_ERR_INVALID;
    size_t n = a->in[0].nelem;
    for (size_t i = 0; i < 4 + 3; i++)
        if (!same_size(i < 4 ? &a->in[i] : &a->out[i - 4], n))
            return gf_kernel_error(a, GF_ERR_INVALID, "operands are not all %zu floats", n);
    if (!n)
        return GF_OK;
    struct gf_adamw_scalars s;
    gf_adamw_scalars(h, &s);
    struct gf_cu_adamw_args c = {
        .decay_on = s.decay_on, .small = s.small, .decay = s.decay, .w = s.w, .b2 = s.b2,
        .one_b2 = s.one_b2, .step_size = s.step_size, .bc2_sqrt = s.bc2_sqrt, .eps = s.eps,
        .grad_scale = s.grad_scale};
    /* inputs P G M V hyper; outputs P M V */
    cudaError_t e = gf_cu_adamw(gf_cu_stream(a), a->out[0].data, a->out[1].data,
                                a->out[2].data, a->in[0].data, a->in[2].data, a->in[3].data,
                                a->in[1].data, (int64_t)n, &c);
    return gf_cu_check(a, e, "AdamWStep kernel");
}

/* ==== the table ====================================================================== */

static const struct gf_kernel kernels[] = {
    {.op = GF_OP_GRAD_ACCUMULATE, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "optim",
     .supports = acc_supports, .run = acc_run},
    {.op = GF_OP_GRAD_NORM, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "optim",
     .supports = norm_supports, .workspace = norm_workspace, .run = norm_run},
    {.op = GF_OP_SGD_STEP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "optim",
     .supports = sgd_supports, .run = sgd_run},
    {.op = GF_OP_ADAMW_STEP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "optim",
     .supports = adamw_supports, .run = adamw_run},
};

const struct gf_kernel_table gf_cuda_optim_table = {kernels,
                                                    sizeof(kernels) / sizeof(kernels[0])};
