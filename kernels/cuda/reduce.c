/* CUDA kernels of the reduce family (device code: reduce.cu):
 *
 *   ReduceSum ReduceMean ReduceMax SumToShape      any set of axes
 *   Softmax LogSoftmax SoftmaxGrad LogSoftmaxGrad  along one axis
 *   Sum                                            variadic, numpy broadcasting
 *
 * (LayerNormalization and its Grad: fused_norm.c, with the fused norms.)
 * fp32, fp16, bf16 (16-bit storage: loaded as fp32, computed as fp32 is,
 * stored rounded to nearest even once, as the CPU's 16-bit nodes; Sum
 * rounds each partial sum, as the CPU's folds); sums in double (as the
 * CPU), each in a fixed order.  The rules and checks are
 * the device backends' (kernels/device_common.c), the messages the CPU's
 * reduce.c.  Not here yet (they run on the CPU): SoftmaxCrossEntropyLoss,
 * NegativeLogLikelihoodLoss and their Grads.
 */
#include "cu.h"
#include "device_common.h"
#include "launch_fused.h"

/* ==== Reduce{Sum,Mean,Max}, SumToShape, Softmax, LogSoftmax and their Grads ========== */

_Static_assert((int)GF_CU_RED_SUM == (int)GF_DEV_RED_SUM &&
                   (int)GF_CU_RED_MEAN == (int)GF_DEV_RED_MEAN &&
                   (int)GF_CU_RED_MAX == (int)GF_DEV_RED_MAX,
               "gf_dev_red is gf_cu_red_op");

static enum gf_status red_launch(const struct gf_kernel_args *a, const bool *reduce, int op)
{
    const struct gf_tview *x = &a->in[0];
    struct gf_red_plan p;
    gf_red_plan(x, reduce, &p);
    enum gf_status st = gf_check_out_count(a, 0, x->dtype, (size_t)p.nout);
    if (st != GF_OK || p.nout == 0)
        return st;
    struct gf_cu_red g = {.nk = p.nk, .nr = p.nr, .nout = p.nout, .nred = p.nred};
    memcpy(g.kdim, p.kdim, sizeof(g.kdim));
    memcpy(g.kstr, p.kstr, sizeof(g.kstr));
    memcpy(g.rdim, p.rdim, sizeof(g.rdim));
    memcpy(g.rstr, p.rstr, sizeof(g.rstr));
    cudaError_t e = gf_cu_reduce(gf_cu_stream(a), op, gf_dev_type_of(x->dtype), x->data,
                                 a->out[0].data, &g);
    return gf_cu_check(a, e, "reduction kernel");
}

/* Softmax LogSoftmax from X, their Grads from dY and Y. */
static enum gf_status rows_launch(const struct gf_kernel_args *a, const struct gf_dev_rows *r)
{
    enum gf_op op = a->node->op;
    cudaStream_t s = gf_cu_stream(a);
    int64_t n = (int64_t)r->n, inner = (int64_t)r->inner, rows = (int64_t)r->rows;
    int t = gf_dev_type_of(a->in[0].dtype);
    if (op == GF_OP_SOFTMAX || op == GF_OP_LOG_SOFTMAX)
        return gf_cu_check(a, gf_cu_softmax(s, op == GF_OP_LOG_SOFTMAX, t, a->in[0].data,
                                            a->out[0].data, n, inner, rows),
                           "softmax kernel");
    return gf_cu_check(a, gf_cu_softmax_grad(s, op == GF_OP_LOG_SOFTMAX_GRAD, t, a->in[0].data,
                                             a->in[1].data, a->out[0].data, n, inner, rows),
                       "softmax gradient kernel");
}

static const struct gf_dev_reduce cu_red = {
    .caps = {.name = "CUDA", .half = true, .int_index = false},
    .reduce = red_launch, .rows = rows_launch};

static enum gf_status red_run(const struct gf_kernel_args *a)
{
    return gf_dev_reduce_run(&cu_red, a);
}

/* With elements (empty reductions are the CPU's). */
static bool red_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return gf_dev_reduce_supports(&cu_red.caps, n, in, n_in) && in[0].nelem > 0;
}

static bool rows_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return gf_dev_rows_supports(&cu_red.caps, n, in, n_in);
}

/* ==== Sum ============================================================================= */

/* Adds the inputs in order, four per launch: y = in0 + in1 + in2 + in3,
 * then y = y + in4 + ..., each sum rounded to y's type as the CPU's
 * pairwise folds into its output round it. */
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
        if ((st = gf_ew_check_operand(a, k, y->dtype)))
            return st;
        if (!fu_bcasts_to(&a->in[k], y->rank, y->dims))
            return gf_kernel_error(a, GF_ERR_INVALID, "input %zu %s does not broadcast to the "
                                   "output %s", k, FU_SHAPE(&a->in[k]), FU_SHAPE(y));
    }
    if (!gf_dev_float(&cu_red.caps, y->dtype))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CUDA kernel for type %s",
                               gf_dtype_name(y->dtype));
    if (a->n_in == 1) {
        if (a->in[0].nelem != y->nelem)
            return gf_kernel_error(a, GF_ERR_INVALID, "input 0 has %zu elements, the output "
                                   "%zu", a->in[0].nelem, y->nelem);
        return a->backend->ops->copy(a->backend, y->data, a->in[0].data, gf_tview_bytes(y));
    }
    for (size_t done = 0; done < a->n_in;) {
        const void *src[4];
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
        cudaError_t e = gf_cu_sum(gf_cu_stream(a), gf_dev_type_of(y->dtype), src, n, y->data,
                                  &nd, (int64_t)y->nelem);
        if ((st = gf_cu_check(a, e, "Sum kernel")))
            return st;
    }
    return GF_OK;
}

/* One float type. */
static bool sum_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    if (n_in < 1 || !gf_dev_float(&cu_red.caps, in[0].dtype))
        return false;
    for (size_t i = 0; i < n_in; i++)
        if (in[i].dtype != in[0].dtype || in[i].rank > GF_MAX_RANK)
            return false;
    return true;
}

/* ==== the table ====================================================================== */

#define KERNEL(OP, IMPL, SUPPORTS, RUN)                                                     \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = IMPL,              \
     .supports = SUPPORTS, .run = RUN}

static const struct gf_kernel kernels[] = {
    KERNEL(REDUCE_SUM, "reduce", red_supports, red_run),
    KERNEL(REDUCE_MEAN, "reduce", red_supports, red_run),
    KERNEL(REDUCE_MAX, "reduce", red_supports, red_run),
    KERNEL(SUM_TO_SHAPE, "reduce", red_supports, red_run),
    KERNEL(SUM, "variadic", sum_supports, sum_run),
    KERNEL(SOFTMAX, "rows", rows_supports, red_run),
    KERNEL(LOG_SOFTMAX, "rows", rows_supports, red_run),
    KERNEL(SOFTMAX_GRAD, "rows", rows_supports, red_run),
    KERNEL(LOG_SOFTMAX_GRAD, "rows", rows_supports, red_run),
};

const struct gf_kernel_table gf_cuda_reduce_table = {kernels,
                                                     sizeof(kernels) / sizeof(kernels[0])};
