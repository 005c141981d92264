/* CUDA kernels of the reduce family (device code: reduce.cu):
 *
 *   ReduceSum ReduceMean ReduceMax SumToShape      any set of axes
 *   Softmax LogSoftmax SoftmaxGrad LogSoftmaxGrad  along one axis
 *   Sum                                            variadic, numpy broadcasting
 *
 * (LayerNormalization and its Grad: fused_norm.c, with the fused norms.)
 * fp32; sums in double (as the CPU), each in a fixed order.  Checks and
 * messages follow kernels/opencl/reduce.c and the CPU's reduce.c.  Not here
 * yet (they run on the CPU): SoftmaxCrossEntropyLoss,
 * NegativeLogLikelihoodLoss and their Grads, fp16 / bf16 storage.
 */
#include <stdio.h>

#include "cu.h"
#include "launch_fused.h"

/* Input i (named `name`) is present and fp32. */
static enum gf_status check_in(const struct gf_kernel_args *a, size_t i, const char *name)
{
    return fu_check_in(a, i, name, GF_FLOAT);
}

/* Input i is absent, empty, or holds a host copy (shape-like inputs). */
static bool host_or_empty(const struct gf_tview *in, size_t n_in, size_t i)
{
    return i >= n_in || in[i].dtype == GF_UNDEFINED || in[i].nelem == 0 || in[i].host;
}

/* ==== Reduce{Sum,Mean,Max}, SumToShape ============================================== */

/* x seen as kept x reduced axes: runs of adjacent axes of one kind merged,
 * size-1 axes dropped. */
static void red_plan(const struct gf_tview *x, const bool *reduce, struct gf_cu_red *g)
{
    memset(g, 0, sizeof(*g));
    g->nout = g->nred = 1;
    int64_t stride = 1, kd[GF_MAX_RANK], ks[GF_MAX_RANK], rd[GF_MAX_RANK], rs[GF_MAX_RANK];
    int last = -1;
    for (int i = x->rank - 1; i >= 0; i--) {
        int64_t d = x->dims[i];
        if (d == 1)
            continue;
        int r = reduce[i];
        int64_t *dims = r ? rd : kd, *strs = r ? rs : ks;
        int *cnt = r ? &g->nr : &g->nk;
        if (last == r) {
            dims[*cnt - 1] *= d;
        } else {
            dims[*cnt] = d;
            strs[(*cnt)++] = stride;
        }
        last = r;
        stride *= d;
        *(r ? &g->nred : &g->nout) *= d;
    }
    for (int i = 0; i < g->nk; i++) /* outermost first */
        g->kdim[i] = kd[g->nk - 1 - i], g->kstr[i] = ks[g->nk - 1 - i];
    for (int i = 0; i < g->nr; i++)
        g->rdim[i] = rd[g->nr - 1 - i], g->rstr[i] = rs[g->nr - 1 - i];
}

static enum gf_status red_launch(const struct gf_kernel_args *a, const struct gf_tview *x,
                                 const bool *reduce, int op)
{
    struct gf_cu_red g;
    red_plan(x, reduce, &g);
    enum gf_status st = gf_check_out_count(a, 0, x->dtype, (size_t)g.nout);
    if (st != GF_OK || g.nout == 0)
        return st;
    cudaError_t e = gf_cu_reduce(gf_cu_stream(a), op, x->data, a->out[0].data, &g);
    return gf_cu_check(a, e, "reduction kernel");
}

static enum gf_status red_run(const struct gf_kernel_args *a)
{
    bool red[GF_MAX_RANK];
    enum gf_status st = check_in(a, 0, "data");
    if (st == GF_OK)
        st = gf_reduce_axes(a, red);
    if (st != GF_OK)
        return st;
    int op = a->node->op == GF_OP_REDUCE_MEAN  ? GF_CU_RED_MEAN
             : a->node->op == GF_OP_REDUCE_MAX ? GF_CU_RED_MAX
                                               : GF_CU_RED_SUM;
    return red_launch(a, &a->in[0], red, op);
}

/* fp32 with elements (empty reductions are the CPU's) and host axes. */
static bool red_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && in[0].dtype == GF_FLOAT && in[0].rank <= GF_MAX_RANK &&
           in[0].nelem > 0 && host_or_empty(in, n_in, 1);
}

/* SumToShape(X, shape): X summed over its leading axes and those where the
 * target is 1. */
static enum gf_status s2s_run(const struct gf_kernel_args *a)
{
    enum gf_status st = check_in(a, 0, "X");
    if (st == GF_OK && a->n_in < 2)
        st = gf_kernel_error(a, GF_ERR_INVALID, "input 1 is missing");
    if (st == GF_OK)
        st = gf_check_shape_input(a, 1);
    if (st != GF_OK)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    int lead = x->rank - y->rank;
    bool red[GF_MAX_RANK], fits = lead >= 0;
    for (int i = 0; fits && i < x->rank; i++) {
        int64_t td = i >= lead ? y->dims[i - lead] : 1;
        fits = td == x->dims[i] || td == 1;
        red[i] = i < lead || td != x->dims[i];
    }
    if (!fits)
        return gf_kernel_error(a, GF_ERR_INVALID, "input 0 of rank %d cannot be summed to the "
                               "rank-%d target shape", x->rank, y->rank);
    return red_launch(a, x, red, GF_CU_RED_SUM);
}

static bool s2s_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return n_in >= 2 && red_supports(n, in, n_in);
}

/* ==== Softmax, LogSoftmax and their gradients ========================================== */

/* Rows along axis ax: n elements `inner` apart ([prod(dims[:ax]),
 * prod(dims[ax:])] before opset 13: coerce). */
static void axis_rows(const struct gf_tview *x, int ax, bool coerce, int64_t *n,
                      int64_t *inner, int64_t *rows)
{
    *n = x->dims[ax];
    *inner = (int64_t)gf_dims_prod(x->dims, ax + 1, x->rank);
    if (coerce) {
        *n *= *inner;
        *inner = 1;
    }
    *rows = *n ? (int64_t)x->nelem / *n : 0;
}

static int64_t onnx_opset(const struct gf_kernel_args *a)
{
    int64_t v = a->node->graph ? gf_model_opset(a->node->graph->model, "") : 0;
    return v > 0 ? v : 23;
}

static enum gf_status smx_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    bool old = onnx_opset(a) < 13;
    int ax;
    enum gf_status st = check_in(a, 0, "input");
    if (st == GF_OK)
        st = gf_axis_attr(a, old ? 1 : -1, x->rank, &ax);
    if (st == GF_OK)
        st = gf_check_out_count(a, 0, x->dtype, x->nelem);
    if (st != GF_OK || x->nelem == 0)
        return st;
    int64_t n, inner, rows;
    axis_rows(x, ax, old, &n, &inner, &rows);
    cudaError_t e = gf_cu_softmax(gf_cu_stream(a), a->node->op == GF_OP_LOG_SOFTMAX, x->data,
                                  a->out[0].data, n, inner, rows);
    return gf_cu_check(a, e, "softmax kernel");
}

static enum gf_status smx_grad_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *g = &a->in[0], *y = &a->in[1];
    int ax = 0;
    enum gf_status st = a->n_in < 2 ? gf_kernel_error(a, GF_ERR_INVALID, "input 1 is missing")
                                    : check_in(a, 0, "dY");
    if (st == GF_OK)
        st = check_in(a, 1, "Y");
    if (st == GF_OK)
        st = gf_axis_attr(a, -1, g->rank, &ax);
    if (st == GF_OK && !fu_same_shape(y, g->rank, g->dims))
        st = gf_kernel_error(a, GF_ERR_INVALID, "Y (input 1) and dY differ in shape");
    if (st == GF_OK)
        st = gf_check_out_count(a, 0, g->dtype, g->nelem);
    if (st != GF_OK || g->nelem == 0)
        return st;
    int64_t n, inner, rows;
    axis_rows(g, ax, false, &n, &inner, &rows);
    cudaError_t e = gf_cu_softmax_grad(gf_cu_stream(a), a->node->op == GF_OP_LOG_SOFTMAX_GRAD,
                                       g->data, y->data, a->out[0].data, n, inner, rows);
    return gf_cu_check(a, e, "softmax gradient kernel");
}

static bool float_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && in[0].dtype == GF_FLOAT && in[0].rank <= GF_MAX_RANK;
}

/* ==== Sum ============================================================================= */

/* Adds the inputs in order, four per launch: y = in0 + in1 + in2 + in3,
 * then y = y + in4 + ..., each float sum rounded as the CPU's pairwise
 * folds round it. */
static enum gf_status sum_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 0, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *y = &a->out[0];
    if (a->n_in == 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs at least one input");
    for (size_t k = 0; k < a->n_in; k++) {
        char what[32];
        snprintf(what, sizeof(what), "input %zu", k);
        if ((st = gf_ew_check_in(a, k)) ||
            (st = gf_ew_check_dtype(a, what, a->in[k].dtype, y->dtype)))
            return st;
        if (!fu_bcasts_to(&a->in[k], y->rank, y->dims))
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu %s does not broadcast to the "
                                   "output %s", k, FU_SHAPE(&a->in[k]), FU_SHAPE(y));
    }
    if (y->dtype != GF_FLOAT)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CUDA kernel for type %s",
                               gf_dtype_name(y->dtype));
    if (a->n_in == 1) {
        if (a->in[0].nelem != y->nelem)
            return gf_kernel_error(a, GF_ERR_INVALID, "input 0 has %zu elements, the output "
                                   "%zu", a->in[0].nelem, y->nelem);
        return a->backend->ops->copy(a->backend, y->data, a->in[0].data, gf_tview_bytes(y));
    }
    for (size_t done = 0; done < a->n_in;) {
        const float *src[4];
        int64_t sts[4][GF_MAX_RANK] = {{0}};
        int n = 0;
        if (done) { /* the sum so far */
            gf_strides_of(y->rank, y->dims, sts[0]);
            src[n++] = y->data;
        }
        for (; n < 4 && done < a->n_in; n++, done++) {
            fu_strides(&a->in[done], y->rank, y->dims, sts[n]);
            src[n] = a->in[done].data;
        }
        struct gf_cu_nd nd;
        gf_cu_nd_init(&nd, y->rank, y->dims, n, sts);
        cudaError_t e = gf_cu_sum(gf_cu_stream(a), src, n, y->data, &nd, (int64_t)y->nelem);
        if ((st = gf_cu_check(a, e, "Sum kernel")))
            return st;
    }
    return GF_OK;
}

static bool sum_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    for (size_t i = 0; i < n_in; i++)
        if (in[i].dtype != GF_FLOAT || in[i].rank > GF_MAX_RANK)
            return false;
    return n_in >= 1;
}

/* ==== the table ====================================================================== */

#define KERNEL(OP, IMPL, SUPPORTS, RUN)                                                     \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = IMPL,              \
     .supports = SUPPORTS, .run = RUN}

static const struct gf_kernel kernels[] = {
    KERNEL(REDUCE_SUM, "reduce", red_supports, red_run),
    KERNEL(REDUCE_MEAN, "reduce", red_supports, red_run),
    KERNEL(REDUCE_MAX, "reduce", red_supports, red_run),
    KERNEL(SUM_TO_SHAPE, "reduce", s2s_supports, s2s_run),
    KERNEL(SUM, "variadic", sum_supports, sum_run),
    KERNEL(SOFTMAX, "rows", float_supports, smx_run),
    KERNEL(LOG_SOFTMAX, "rows", float_supports, smx_run),
    KERNEL(SOFTMAX_GRAD, "rows", float_supports, smx_grad_run),
    KERNEL(LOG_SOFTMAX_GRAD, "rows", float_supports, smx_grad_run),
};

const struct gf_kernel_table gf_cuda_reduce_table = {kernels,
                                                     sizeof(kernels) / sizeof(kernels[0])};
