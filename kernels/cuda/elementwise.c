/*
 * CUDA kernels: the elementwise family (device code: elementwise.cu).
 *
 *   unary      Neg Sqrt Reciprocal Exp Log Tanh Abs Erf Sin Cos Floor Ceil
 *              Relu Sigmoid Softplus Gelu Clip IsNaN IsInf (float), Not (bool)
 *   binary     Add Sub Mul Div Max Min (float, int64, int32), Pow (float; a
 *              half base may have an fp32 exponent), Equal Less LessOrEqual
 *              Greater GreaterOrEqual (float, int64, int32; Equal also
 *              bool), And Or Xor (bool); numpy broadcasting; Max and Min
 *              take any number of inputs
 *   plumbing   Where (any 1/2/4/8-byte type), Cast CastLike (between fp32,
 *              fp16, bf16, int64, int32, uint8, bool), Identity
 *   backward   ReluGrad SigmoidGrad TanhGrad GeluGrad (float)
 *
 * "float" is fp32, fp16 and bf16: 16-bit storage, loaded as fp32, computed
 * as the fp32 kernels and stored rounded to nearest even once, as the CPU
 * computes a 16-bit node (kernels/cpu/half.c).  The rules (what `supports`
 * takes) and the checks before a launch are the device backends'
 * (kernels/device_common.c, caps.half).  Semantics and messages follow
 * kernels/cpu/elementwise.c; integer division by zero is checked on the
 * host, so integer Div needs its divisor's host copy.
 */
#include "cu.h"
#include "device_common.h"

static const struct gf_dev_ew cu_ew;

/* device_common.h's orders are the launchers' (launch.h): passed as they are */
#define SAME(x) ((int)GF_CU_##x == (int)GF_DEV_##x)
_Static_assert(SAME(F32) && SAME(F16) && SAME(BF16) && SAME(I64) && SAME(I32) && SAME(U8) &&
                   SAME(B8),
               "gf_dev_type is gf_cu_type");
_Static_assert(SAME(NEG) && SAME(SQRT) && SAME(RECIP) && SAME(EXP) && SAME(LOG) && SAME(TANH) &&
                   SAME(ABS) && SAME(ERF) && SAME(SIN) && SAME(COS) && SAME(FLOOR) &&
                   SAME(CEIL) && SAME(RELU) && SAME(SIGMOID) && SAME(SOFTPLUS) && SAME(GELU) &&
                   SAME(GELU_TANH) && SAME(NOT),
               "gf_dev_unary is gf_cu_unary_op");
_Static_assert(SAME(RELU_GRAD) && SAME(SIGMOID_GRAD) && SAME(TANH_GRAD) && SAME(GELU_GRAD) &&
                   SAME(GELU_TANH_GRAD),
               "gf_dev_grad is gf_cu_grad_op");
_Static_assert(SAME(ADD) && SAME(SUB) && SAME(MUL) && SAME(DIV) && SAME(POW) && SAME(MAX) &&
                   SAME(MIN) && SAME(EQ) && SAME(LT) && SAME(LE) && SAME(GT) && SAME(GE) &&
                   SAME(AND) && SAME(OR) && SAME(XOR),
               "gf_dev_binary is gf_cu_binary_op");
#undef SAME

/* y = f(x), or the gradient dX = f'(v) dY: same shapes, one type. */
static enum gf_status un_launch(const struct gf_kernel_args *a, int code)
{
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    cudaStream_t s = gf_cu_stream(a);
    int64_t n = (int64_t)x->nelem;
    int t = gf_dev_type_of(x->dtype);
    cudaError_t e = a->n_in == 2
                        ? gf_cu_act_grad(s, code, t, x->data, a->in[1].data, y->data, n)
                        : gf_cu_unary(s, code, t, x->data, y->data, n);
    return gf_cu_check(a, e, "unary kernel");
}

/* IsNaN, IsInf: a float type in, bool out. */
static enum gf_status isx_launch(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    int code = GF_CU_ISNAN;
    if (a->node->op == GF_OP_IS_INF)
        code = (gf_node_attr_int(a->node, "detect_negative", 1) ? GF_CU_ISINF_NEG : 0) |
               (gf_node_attr_int(a->node, "detect_positive", 1) ? GF_CU_ISINF_POS : 0);
    if (code == 0) { /* neither sign: all false */
        cudaError_t e = cudaMemsetAsync(y->data, 0, y->nelem, gf_cu_stream(a));
        return gf_cu_check(a, e, "memset");
    }
    cudaError_t e = gf_cu_unary(gf_cu_stream(a), code, gf_dev_type_of(x->dtype), x->data,
                                y->data, (int64_t)x->nelem);
    return gf_cu_check(a, e, "IsNaN / IsInf kernel");
}

/* out = op(x, b) over the merged axes of the output; the float ops in x's
 * storage type (the kernel type is GF_DEV_F32 for each), b's may be fp32
 * (Pow of a half base). */
static enum gf_status bin_launch(const struct gf_kernel_args *a, const struct gf_dev_binop *op,
                                 const struct gf_tview *x, const struct gf_tview *b,
                                 const int64_t st[3][GF_MAX_RANK])
{
    const struct gf_tview *out = &a->out[0];
    struct gf_cu_nd nd;
    gf_cu_nd_init(&nd, out->rank, out->dims, 2, st);
    int t = gf_dev_bin_type(&cu_ew.caps, op, x->dtype), bt = t;
    if (t == GF_DEV_F32) {
        t = gf_dev_type_of(x->dtype);
        bt = gf_dev_type_of(b->dtype);
    }
    cudaError_t e = gf_cu_binary(gf_cu_stream(a), (int)op->code, t, bt, x->data, b->data,
                                 out->data, &nd, (int64_t)out->nelem);
    return gf_cu_check(a, e, "binary kernel");
}

static enum gf_status clip_launch(const struct gf_kernel_args *a, const struct gf_dev_clip *b)
{
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    cudaError_t e = gf_cu_clip(gf_cu_stream(a), gf_dev_type_of(x->dtype), x->data, y->data,
                               (int64_t)x->nelem, b->lo_t, b->hi_t, b->lo, b->hi);
    return gf_cu_check(a, e, "Clip kernel");
}

static enum gf_status where_launch(const struct gf_kernel_args *a, size_t size,
                                   const int64_t st[3][GF_MAX_RANK])
{
    const struct gf_tview *out = &a->out[0];
    struct gf_cu_nd nd;
    gf_cu_nd_init(&nd, out->rank, out->dims, 3, st);
    cudaError_t e = gf_cu_where(gf_cu_stream(a), (int)size, a->in[0].data, a->in[1].data,
                                a->in[2].data, out->data, &nd, (int64_t)out->nelem);
    return gf_cu_check(a, e, "Where kernel");
}

static enum gf_status cast_launch(const struct gf_kernel_args *a, bool trunc)
{
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    cudaError_t e = gf_cu_cast(gf_cu_stream(a), gf_dev_type_of(x->dtype),
                               gf_dev_type_of(y->dtype), x->data, y->data, (int64_t)x->nelem,
                               trunc);
    return gf_cu_check(a, e, "Cast kernel");
}

static const struct gf_dev_ew cu_ew = {
    .caps = {.name = "CUDA", .half = true, .int_index = false},
    .unary = un_launch, .isx = isx_launch, .binary = bin_launch, .clip = clip_launch,
    .where = where_launch, .cast = cast_launch};

/* ---- registration ----------------------------------------------------------------- */

static bool ew_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return gf_dev_ew_supports(&cu_ew, n, in, n_in);
}

static enum gf_status ew_run(const struct gf_kernel_args *a)
{
    return gf_dev_ew_run(&cu_ew, a);
}

#define EW_KERNEL(OP, IMPL, DT)                                                             \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_##DT, .impl = "cu_" #IMPL,            \
     .supports = ew_supports, .run = ew_run},

static const struct gf_kernel kernels[] = {GF_DEV_EW_OPS(EW_KERNEL)};

const struct gf_kernel_table gf_cuda_elementwise_table = {kernels,
                                                          sizeof(kernels) / sizeof(kernels[0])};
