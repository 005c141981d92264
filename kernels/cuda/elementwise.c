/*
 * CUDA kernels: the elementwise family (device code: elementwise.cu).
 *
 *   unary      Neg Sqrt Reciprocal Exp Log Tanh Abs Erf Sin Cos Floor Ceil
 *              Relu Sigmoid Softplus Gelu Clip IsNaN IsInf (fp32), Not (bool)
 *   binary     Add Sub Mul Div Max Min (fp32, int64, int32), Pow (fp32),
 *              Equal Less LessOrEqual Greater GreaterOrEqual (fp32, int64,
 *              int32; Equal also bool), And Or Xor (bool); numpy
 *              broadcasting; Max and Min take any number of inputs
 *   plumbing   Where (any 1/2/4/8-byte type), Cast CastLike (between fp32,
 *              fp16, bf16, int64, int32, uint8, bool), Identity
 *   backward   ReluGrad SigmoidGrad TanhGrad GeluGrad (fp32)
 *
 * The rules (what `supports` takes) follow kernels/opencl/elementwise.c,
 * but for fp16 / bf16 storage of the float ops, not here yet (those nodes
 * run on the CPU).  Semantics and messages follow kernels/cpu/elementwise.c;
 * integer division by zero is checked on the host, so integer Div needs its
 * divisor's host copy.
 */
#include <float.h>
#include <stdio.h>

#include "cu.h"

static bool f32(enum gf_dtype t)
{
    return t == GF_FLOAT;
}

static bool is_int(enum gf_dtype t)
{
    return t == GF_INT64 || t == GF_INT32;
}

/* Bytes of an element movable by size (Where, Identity), 0 otherwise. */
static size_t move_size(enum gf_dtype t)
{
    if (t == GF_STRING || t == GF_INT4 || t == GF_UINT4 || t == GF_UNDEFINED)
        return 0;
    size_t s = gf_dtype_size(t);
    return s == 1 || s == 2 || s == 4 || s == 8 ? s : 0;
}

/* ---- unary ------------------------------------------------------------------ */

static const struct {
    enum gf_op op;
    int code;
} un_ops[] = {
    {GF_OP_NEG, GF_CU_NEG},         {GF_OP_SQRT, GF_CU_SQRT},   {GF_OP_RECIPROCAL, GF_CU_RECIP},
    {GF_OP_EXP, GF_CU_EXP},         {GF_OP_LOG, GF_CU_LOG},     {GF_OP_TANH, GF_CU_TANH},
    {GF_OP_ABS, GF_CU_ABS},         {GF_OP_ERF, GF_CU_ERF},     {GF_OP_SIN, GF_CU_SIN},
    {GF_OP_COS, GF_CU_COS},         {GF_OP_FLOOR, GF_CU_FLOOR}, {GF_OP_CEIL, GF_CU_CEIL},
    {GF_OP_RELU, GF_CU_RELU},       {GF_OP_SIGMOID, GF_CU_SIGMOID},
    {GF_OP_SOFTPLUS, GF_CU_SOFTPLUS}, {GF_OP_NOT, GF_CU_NOT},
    {GF_OP_RELU_GRAD, GF_CU_RELU_GRAD}, {GF_OP_SIGMOID_GRAD, GF_CU_SIGMOID_GRAD},
    {GF_OP_TANH_GRAD, GF_CU_TANH_GRAD},
};

/* The launcher's op of a unary or gradient node; Gelu's by its attribute
 * (-1 for a bad one: run() says so). */
static int un_code(const struct gf_node *n)
{
    if (n->op == GF_OP_GELU || n->op == GF_OP_GELU_GRAD) {
        const char *s = gf_node_attr_string(n, "approximate", "none");
        bool grad = n->op == GF_OP_GELU_GRAD;
        if (strcmp(s, "tanh") == 0)
            return grad ? GF_CU_GELU_TANH_GRAD : GF_CU_GELU_TANH;
        return strcmp(s, "none") == 0 ? (grad ? GF_CU_GELU_GRAD : GF_CU_GELU) : -1;
    }
    for (size_t i = 0; i < sizeof(un_ops) / sizeof(un_ops[0]); i++)
        if (un_ops[i].op == n->op)
            return un_ops[i].code;
    return -1;
}

static bool un_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return n_in == 1 && (n->op == GF_OP_NOT ? in[0].dtype == GF_BOOL : f32(in[0].dtype));
}

static bool grad_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 2 && f32(in[0].dtype);
}

/* Unary ops, and the gradients (dY, v) -> dX: same shapes, one type. */
static enum gf_status un_run(const struct gf_kernel_args *a)
{
    bool empty, grad = a->n_in == 2;
    enum gf_status st = gf_ew_begin(a, grad ? 2 : 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    if ((st = gf_ew_check_dtype(a, "output 0", y->dtype, x->dtype)) ||
        (st = gf_ew_check_count(a, x, y)))
        return st;
    if (grad && ((st = gf_ew_check_dtype(a, "input 1", a->in[1].dtype, x->dtype))))
        return st;
    if (grad && a->in[1].nelem != x->nelem)
        return gf_kernel_error(a, GF_ERR_INVALID, "input 1 has %zu elements, the gradient %zu",
                               a->in[1].nelem, x->nelem);
    int code = un_code(a->node);
    if (code < 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "approximate='%s' is neither 'none' nor "
                               "'tanh'", gf_node_attr_string(a->node, "approximate", ""));
    cudaStream_t s = gf_cu_stream(a);
    int64_t n = (int64_t)x->nelem;
    cudaError_t e = grad ? gf_cu_act_grad(s, code, x->data, a->in[1].data, y->data, n)
                         : gf_cu_unary(s, code, x->data, y->data, n);
    return gf_cu_check(a, e, "unary kernel");
}

/* IsNaN, IsInf: fp32 in, bool out. */
static bool isx_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 1 && f32(in[0].dtype);
}

static enum gf_status isx_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    if ((st = gf_ew_check_dtype(a, "output 0", y->dtype, GF_BOOL)) ||
        (st = gf_ew_check_count(a, x, y)))
        return st;
    int code = GF_CU_ISNAN;
    if (a->node->op == GF_OP_IS_INF)
        code = (gf_node_attr_int(a->node, "detect_negative", 1) ? GF_CU_ISINF_NEG : 0) |
               (gf_node_attr_int(a->node, "detect_positive", 1) ? GF_CU_ISINF_POS : 0);
    if (code == 0) { /* neither sign: all false */
        cudaError_t e = cudaMemsetAsync(y->data, 0, y->nelem, gf_cu_stream(a));
        return gf_cu_check(a, e, "memset");
    }
    cudaError_t e = gf_cu_unary(gf_cu_stream(a), code, x->data, y->data, (int64_t)x->nelem);
    return gf_cu_check(a, e, "IsNaN / IsInf kernel");
}

/* ---- binary ----------------------------------------------------------------- */

enum { T_F32 = 1, T_INT = 2, T_BOOL = 4 };

static const struct bin_op {
    enum gf_op op;
    int code;
    unsigned types; /* T_F32 | T_INT | T_BOOL */
    bool bool_out;
} bin_ops[] = {
    {GF_OP_ADD, GF_CU_ADD, T_F32 | T_INT, false},
    {GF_OP_SUB, GF_CU_SUB, T_F32 | T_INT, false},
    {GF_OP_MUL, GF_CU_MUL, T_F32 | T_INT, false},
    {GF_OP_DIV, GF_CU_DIV, T_F32 | T_INT, false},
    {GF_OP_POW, GF_CU_POW, T_F32, false},
    {GF_OP_MAX, GF_CU_MAX, T_F32 | T_INT, false},
    {GF_OP_MIN, GF_CU_MIN, T_F32 | T_INT, false},
    {GF_OP_EQUAL, GF_CU_EQ, T_F32 | T_INT | T_BOOL, true},
    {GF_OP_LESS, GF_CU_LT, T_F32 | T_INT, true},
    {GF_OP_LESS_OR_EQUAL, GF_CU_LE, T_F32 | T_INT, true},
    {GF_OP_GREATER, GF_CU_GT, T_F32 | T_INT, true},
    {GF_OP_GREATER_OR_EQUAL, GF_CU_GE, T_F32 | T_INT, true},
    {GF_OP_AND, GF_CU_AND, T_BOOL, true},
    {GF_OP_OR, GF_CU_OR, T_BOOL, true},
    {GF_OP_XOR, GF_CU_XOR, T_BOOL, true},
};

static const struct bin_op *bin_find(enum gf_op op)
{
    for (size_t i = 0; i < sizeof(bin_ops) / sizeof(bin_ops[0]); i++)
        if (bin_ops[i].op == op)
            return &bin_ops[i];
    return NULL;
}

/* The launcher's type of operands of type t, -1 when op lacks it. */
static int bin_type(const struct bin_op *op, enum gf_dtype t)
{
    if (t == GF_FLOAT && (op->types & T_F32))
        return GF_CU_F32;
    if (t == GF_INT64 && (op->types & T_INT))
        return GF_CU_I64;
    if (t == GF_INT32 && (op->types & T_INT))
        return GF_CU_I32;
    if (t == GF_BOOL && (op->types & T_BOOL))
        return GF_CU_B8;
    return -1;
}

static bool bin_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    const struct bin_op *op = bin_find(n->op);
    bool variadic = n->op == GF_OP_MAX || n->op == GF_OP_MIN;
    if (!op || n_in < 1 || (!variadic && n_in != 2) || bin_type(op, in[0].dtype) < 0 ||
        gf_node_attr_int(n, "broadcast", 0)) /* the opset < 7 form */
        return false;
    for (size_t k = 0; k < n_in; k++) /* mixed types go to the CPU, which has them */
        if (in[k].dtype != in[0].dtype)
            return false;
    /* integer division by zero is checked on the host */
    return !(n->op == GF_OP_DIV && is_int(in[0].dtype) && !in[1].host);
}

/* out = op(x, b), both broadcast to out (x may be out itself). */
static enum gf_status bin_pair(const struct gf_kernel_args *a, const struct bin_op *op,
                               const struct gf_tview *x, int kx, const struct gf_tview *b,
                               int kb)
{
    const struct gf_tview *out = &a->out[0];
    int64_t st[2][GF_MAX_RANK] = {{0}};
    enum gf_status s;
    if ((s = gf_ew_bcast(a, kx, x, out, st[0])) || (s = gf_ew_bcast(a, kb, b, out, st[1])))
        return s;
    struct gf_cu_nd nd;
    gf_cu_nd_init(&nd, out->rank, out->dims, 2, st);
    cudaError_t e = gf_cu_binary(gf_cu_stream(a), op->code, bin_type(op, x->dtype), x->data,
                                 b->data, out->data, &nd, (int64_t)out->nelem);
    return gf_cu_check(a, e, "binary kernel");
}

static enum gf_status bin_run(const struct gf_kernel_args *a)
{
    const struct bin_op *op = bin_find(a->node->op);
    bool empty;
    enum gf_status st = gf_ew_begin(a, 0, &empty);
    if (st != GF_OK || empty)
        return st;
    if (a->n_in == 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs at least one input");
    for (size_t k = 0; k < a->n_in; k++) {
        if ((st = gf_ew_check_in(a, k)))
            return st;
        if (a->in[k].dtype != a->in[0].dtype)
            return gf_kernel_error(a, GF_ERR_INVALID, "inputs 0 and %zu differ in type (%s, "
                                   "%s)", k, gf_dtype_name(a->in[0].dtype),
                                   gf_dtype_name(a->in[k].dtype));
    }
    enum gf_dtype dt = a->in[0].dtype;
    if (bin_type(op, dt) < 0)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CUDA kernel for type %s",
                               gf_dtype_name(dt));
    if ((st = gf_ew_check_dtype(a, "output 0", a->out[0].dtype, op->bool_out ? GF_BOOL : dt)))
        return st;
    if (a->n_in == 1) { /* Max / Min of one input */
        if ((st = gf_ew_check_count(a, &a->in[0], &a->out[0])))
            return st;
        return a->backend->ops->copy(a->backend, a->out[0].data, a->in[0].data,
                                     gf_tview_bytes(&a->out[0]));
    }
    if ((st = gf_check_int_divisor(a, &a->in[1])) ||
        (st = bin_pair(a, op, &a->in[0], 0, &a->in[1], 1)))
        return st;
    /* Max / Min of more: folded into the output */
    for (size_t k = 2; k < a->n_in; k++)
        if ((st = bin_pair(a, op, &a->out[0], 0, &a->in[k], (int)k)))
            return st;
    return GF_OK;
}

/* ---- Clip --------------------------------------------------------------------- */

/* Bound k (1: min, 2: max): the tensor when given (one element, read by
 * the kernel: *t), else the attribute of opsets before 11, else dflt. */
static enum gf_status clip_bound(const struct gf_kernel_args *a, size_t k, const char *name,
                                 float dflt, const float **t, float *v)
{
    const struct gf_attr *at = gf_node_attr(a->node, name);
    *v = at && at->type == GF_ATTR_FLOAT ? at->f : dflt;
    *t = NULL;
    enum gf_status st = gf_clip_bound_check(a, k, name);
    if (st == GF_OK && k < a->n_in)
        *t = a->in[k].data;
    return st;
}

static bool clip_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && f32(in[0].dtype);
}

static enum gf_status clip_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    const float *lo_t, *hi_t;
    float lo, hi;
    if ((st = clip_bound(a, 1, "min", -FLT_MAX, &lo_t, &lo)) ||
        (st = clip_bound(a, 2, "max", FLT_MAX, &hi_t, &hi)) ||
        (st = gf_ew_check_dtype(a, "output 0", y->dtype, x->dtype)) ||
        (st = gf_ew_check_count(a, x, y)))
        return st;
    cudaError_t e = gf_cu_clip(gf_cu_stream(a), x->data, y->data, (int64_t)x->nelem, lo_t, hi_t,
                               lo, hi);
    return gf_cu_check(a, e, "Clip kernel");
}

/* ---- Where ------------------------------------------------------------------- */

static bool where_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 3 && in[0].dtype == GF_BOOL && move_size(in[1].dtype);
}

static enum gf_status where_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 3, &empty);
    if (st != GF_OK || empty || (st = gf_where_check(a)))
        return st;
    size_t size = move_size(a->in[1].dtype);
    if (!size)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CUDA kernel for type %s",
                               gf_dtype_name(a->in[1].dtype));
    const struct gf_tview *out = &a->out[0];
    int64_t st3[3][GF_MAX_RANK];
    for (int k = 0; k < 3; k++)
        if ((st = gf_ew_bcast(a, k, &a->in[k], out, st3[k])))
            return st;
    struct gf_cu_nd nd;
    gf_cu_nd_init(&nd, out->rank, out->dims, 3, st3);
    cudaError_t e = gf_cu_where(gf_cu_stream(a), (int)size, a->in[0].data, a->in[1].data,
                                a->in[2].data, out->data, &nd, (int64_t)out->nelem);
    return gf_cu_check(a, e, "Where kernel");
}

/* ---- Cast, CastLike, Identity ------------------------------------------------------- */

static int cast_type(enum gf_dtype t)
{
    switch (t) {
    case GF_FLOAT: return GF_CU_F32;
    case GF_FLOAT16: return GF_CU_F16;
    case GF_BFLOAT16: return GF_CU_BF16;
    case GF_INT64: return GF_CU_I64;
    case GF_INT32: return GF_CU_I32;
    case GF_UINT8: return GF_CU_U8;
    case GF_BOOL: return GF_CU_B8;
    default: return -1;
    }
}

/* The cast's target: attribute `to` (Cast) or input 1's type (CastLike). */
static enum gf_dtype cast_target(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n->op == GF_OP_CAST_LIKE)
        return n_in >= 2 ? in[1].dtype : GF_UNDEFINED;
    return (enum gf_dtype)gf_node_attr_int(n, "to", GF_UNDEFINED);
}

static bool cast_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    enum gf_dtype to = cast_target(n, in, n_in);
    return n_in >= 1 && (in[0].dtype == to ? move_size(to) != 0
                                           : cast_type(in[0].dtype) >= 0 && cast_type(to) >= 0);
}

static enum gf_status copy_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    enum gf_status st = gf_ew_check_dtype(a, "output 0", y->dtype, x->dtype);
    if (st || (st = gf_ew_check_count(a, x, y)))
        return st;
    return a->backend->ops->copy(a->backend, y->data, x->data, gf_tview_bytes(y));
}

static enum gf_status cast_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    if ((st = gf_cast_check(a)))
        return st;
    if (x->dtype == y->dtype)
        return copy_run(a);
    int from = cast_type(x->dtype), to = cast_type(y->dtype);
    if (from < 0 || to < 0)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no CUDA cast from %s to %s",
                               gf_dtype_name(x->dtype), gf_dtype_name(y->dtype));
    if ((st = gf_ew_check_count(a, x, y)))
        return st;
    int trunc = x->dtype == GF_FLOAT && y->dtype == GF_BFLOAT16 && gf_node_opset(a->node) < 19;
    cudaError_t e = gf_cu_cast(gf_cu_stream(a), from, to, x->data, y->data, (int64_t)x->nelem,
                               trunc);
    return gf_cu_check(a, e, "Cast kernel");
}

static bool identity_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 1 && move_size(in[0].dtype);
}

static enum gf_status identity_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = gf_ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    return copy_run(a);
}

/* ---- registration ----------------------------------------------------------------- */

#define EW_KERNEL(OP, DT, name, sup, fn)                                                     \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = DT, .impl = name, .supports = sup,        \
     .run = fn}
#define EW_UNARY(OP) EW_KERNEL(OP, GF_UNDEFINED, "cu_unary", un_supports, un_run)
#define EW_GRAD(OP) EW_KERNEL(OP, GF_UNDEFINED, "cu_act_grad", grad_supports, un_run)
#define EW_BINARY(OP) EW_KERNEL(OP, GF_UNDEFINED, "cu_binary", bin_supports, bin_run)

static const struct gf_kernel kernels[] = {
    EW_UNARY(NEG), EW_UNARY(SQRT), EW_UNARY(RECIPROCAL), EW_UNARY(EXP), EW_UNARY(LOG),
    EW_UNARY(TANH), EW_UNARY(ABS), EW_UNARY(ERF), EW_UNARY(SIN), EW_UNARY(COS),
    EW_UNARY(FLOOR), EW_UNARY(CEIL), EW_UNARY(RELU), EW_UNARY(SIGMOID), EW_UNARY(SOFTPLUS),
    EW_UNARY(GELU),
    EW_KERNEL(CLIP, GF_UNDEFINED, "cu_clip", clip_supports, clip_run),
    EW_KERNEL(NOT, GF_BOOL, "cu_unary", un_supports, un_run),
    EW_KERNEL(IS_NAN, GF_UNDEFINED, "cu_isx", isx_supports, isx_run),
    EW_KERNEL(IS_INF, GF_UNDEFINED, "cu_isx", isx_supports, isx_run),
    EW_BINARY(ADD), EW_BINARY(SUB), EW_BINARY(MUL), EW_BINARY(DIV), EW_BINARY(POW),
    EW_BINARY(MAX), EW_BINARY(MIN), EW_BINARY(EQUAL), EW_BINARY(LESS),
    EW_BINARY(LESS_OR_EQUAL), EW_BINARY(GREATER), EW_BINARY(GREATER_OR_EQUAL),
    EW_BINARY(AND), EW_BINARY(OR), EW_BINARY(XOR),
    EW_KERNEL(WHERE, GF_UNDEFINED, "cu_where", where_supports, where_run),
    EW_KERNEL(CAST, GF_UNDEFINED, "cu_cast", cast_supports, cast_run),
    EW_KERNEL(CAST_LIKE, GF_UNDEFINED, "cu_cast", cast_supports, cast_run),
    EW_KERNEL(IDENTITY, GF_UNDEFINED, "cu_copy", identity_supports, identity_run),
    EW_GRAD(RELU_GRAD), EW_GRAD(SIGMOID_GRAD), EW_GRAD(TANH_GRAD), EW_GRAD(GELU_GRAD),
};

const struct gf_kernel_table gf_cuda_elementwise_table = {kernels,
                                                          sizeof(kernels) / sizeof(kernels[0])};
