/*
 * OpenCL kernels: the elementwise family (elementwise.cl).
 *
 *   unary      Neg Sqrt Reciprocal Exp Log Tanh Abs Erf Sin Cos Floor Ceil
 *              Relu Sigmoid Softplus Gelu Clip (float), Not (bool)
 *   binary     Add Sub Mul Div Max Min (float, int64, int32), Pow (float,
 *              and a half base with a float exponent), Equal Less
 *              LessOrEqual Greater GreaterOrEqual (float, int64, int32;
 *              Equal also bool), And Or Xor (bool); numpy broadcasting;
 *              Max and Min take any number of inputs
 *   plumbing   Where (any 1/2/4/8-byte type), Cast CastLike (between fp32,
 *              fp16, bf16, int64, int32, uint8, bool), Identity
 *   backward   ReluGrad SigmoidGrad TanhGrad GeluGrad (float)
 *
 * "float" is fp32, fp16 or bf16 storage (storage.cl, the program built
 * with gf_cl_storage_opt of the tensors' type): loaded to float, computed
 * in float, stored once in the tensor's type, as the CPU kernels do.
 *
 * Operands that have the output's shape or one element run "flat" kernels:
 * VEC elements per step (a knob, with the work-group size) in a
 * grid-stride loop.  Other broadcasts run the "_nd" kernels over the
 * merged output axes (gf_cl_nd_init).  Semantics and messages follow
 * kernels/cpu/elementwise.c and the activation gradients of cpu/grad.c;
 * integer division by zero is checked on the host, so integer Div needs
 * its divisor's host copy.
 */
#include <float.h>
#include <limits.h>
#include <stdio.h>

#include "ocl.h"

#define EW_FILE "elementwise.cl"

static const int wg_values[] = {256, 64, 128, 512, 1024};
static const int vec_values[] = {4, 1, 2, 8};
static const struct gf_config_knob ew_knobs[] = {
    {"wg", 5, wg_values},
    {"vec", 4, vec_values},
};

/* ---- launching ------------------------------------------------------------ */

static bool is_float(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

/* The kernel `name` built for this config's VEC and the storage of float
 * type dt (other types: fp32's build), and the work-group size (clamped
 * to the device); NULL with gf_error set. */
static cl_kernel ew_kernel(const struct gf_kernel_args *a, const char *name, enum gf_dtype dt,
                           size_t *wg, int *vec)
{
    *wg = (size_t)(a->config ? a->config[0] : wg_values[0]);
    *vec = a->config ? a->config[1] : vec_values[0];
    size_t max = gf_cl_of(a->backend)->max_wg;
    if (max && *wg > max)
        *wg = max;
    const char *store = is_float(dt) ? gf_cl_storage_opt(dt) : "";
    char opts[64];
    snprintf(opts, sizeof(opts), "-DVEC=%d%s%s", *vec, *store ? " " : "", store);
    return gf_cl_kernel(a->backend, EW_FILE, name, opts);
}

/* Runs k (arguments set) over `n` elements taken `per` at a time. */
static enum gf_status ew_launch(const struct gf_kernel_args *a, cl_kernel k, size_t n,
                                size_t per, size_t wg)
{
    size_t global = gf_cl_grid(a, (n + per - 1) / per, wg);
    return gf_cl_run(a, k, 1, &global, &wg);
}

/* ---- checks (kernels/checks.c has the shared ones) ------------------------------------ */

/* gf_ew_begin, and an output the kernels can index with int. */
static enum gf_status ew_begin(const struct gf_kernel_args *a, size_t n_in, bool *empty)
{
    enum gf_status st = gf_ew_begin(a, n_in, empty);
    if (st == GF_OK && !*empty && a->out[0].nelem > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "output 0 has %zu elements; the OpenCL "
                               "kernels take fewer than 2^31", a->out[0].nelem);
    return st;
}

/* Element-size suffix of the type-generic kernels ("1", "2", "4", "8"). */
static const char *size_sfx(enum gf_dtype t)
{
    switch (t == GF_STRING || t == GF_INT4 || t == GF_UINT4 ? 0 : gf_dtype_size(t)) {
    case 1: return "1";
    case 2: return "2";
    case 4: return "4";
    case 8: return "8";
    default: return NULL;
    }
}

/* Sets the ND arguments (rank, dims, 3 stride vectors) from index `at`. */
static bool nd_args(cl_kernel k, cl_uint at, const struct gf_cl_nd *nd)
{
    cl_int err = clSetKernelArg(k, at, sizeof(cl_int), &nd->rank);
    if (err == CL_SUCCESS)
        err = clSetKernelArg(k, at + 1, sizeof(cl_int8), &nd->dims);
    for (cl_uint i = 0; i < 3 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, at + 2 + i, sizeof(cl_int8), &nd->st[i]);
    if (err != CL_SUCCESS)
        gf_error(GF_ERR_INTERNAL, "OpenCL: setting the shape arguments failed: %s",
                 gf_cl_strerror(err));
    return err == CL_SUCCESS;
}

/* ---- unary ------------------------------------------------------------------ */

static const struct {
    enum gf_op op;
    const char *kernel;
} un_ops[] = {
    {GF_OP_NEG, "un_neg"},         {GF_OP_SQRT, "un_sqrt"},     {GF_OP_RECIPROCAL, "un_recip"},
    {GF_OP_EXP, "un_exp"},         {GF_OP_LOG, "un_log"},       {GF_OP_TANH, "un_tanh"},
    {GF_OP_ABS, "un_abs"},         {GF_OP_ERF, "un_erf"},       {GF_OP_SIN, "un_sin"},
    {GF_OP_COS, "un_cos"},         {GF_OP_FLOOR, "un_floor"},   {GF_OP_CEIL, "un_ceil"},
    {GF_OP_RELU, "un_relu"},       {GF_OP_SIGMOID, "un_sigmoid"},
    {GF_OP_SOFTPLUS, "un_softplus"}, {GF_OP_NOT, "un_not"},
    {GF_OP_RELU_GRAD, "grad_relu"}, {GF_OP_SIGMOID_GRAD, "grad_sigmoid"},
    {GF_OP_TANH_GRAD, "grad_tanh"},
};

/* The kernel of a unary or gradient node; Gelu's by its attribute (NULL
 * for a bad one: run() says so). */
static const char *un_kernel(const struct gf_node *n)
{
    if (n->op == GF_OP_GELU || n->op == GF_OP_GELU_GRAD) {
        const char *s = gf_node_attr_string(n, "approximate", "none");
        bool grad = n->op == GF_OP_GELU_GRAD;
        if (strcmp(s, "tanh") == 0)
            return grad ? "grad_gelu_tanh" : "un_gelu_tanh";
        return strcmp(s, "none") == 0 ? (grad ? "grad_gelu" : "un_gelu") : NULL;
    }
    for (size_t i = 0; i < sizeof(un_ops) / sizeof(un_ops[0]); i++)
        if (un_ops[i].op == n->op)
            return un_ops[i].kernel;
    return NULL;
}

static bool un_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return n_in == 1 && in[0].nelem <= INT_MAX &&
           (n->op == GF_OP_NOT ? in[0].dtype == GF_BOOL : is_float(in[0].dtype));
}

/* Unary ops, and the gradients (dY, v) -> dX: same shapes, one type. */
static enum gf_status un_run(const struct gf_kernel_args *a)
{
    bool empty, grad = a->n_in == 2;
    enum gf_status st = ew_begin(a, grad ? 2 : 1, &empty);
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
    const char *name = un_kernel(a->node);
    if (!name)
        return gf_kernel_error(a, GF_ERR_INVALID, "approximate='%s' is neither 'none' nor "
                               "'tanh'", gf_node_attr_string(a->node, "approximate", ""));
    size_t wg;
    int vec;
    cl_kernel k = ew_kernel(a, name, x->dtype, &wg, &vec);
    cl_int n = (cl_int)x->nelem;
    bool ok = k && (grad ? gf_cl_args(k, 4, sizeof(cl_mem), &x->data, sizeof(cl_mem),
                                      &a->in[1].data, sizeof(cl_mem), &y->data, sizeof(n), &n)
                         : gf_cl_args(k, 3, sizeof(cl_mem), &x->data, sizeof(cl_mem), &y->data,
                                      sizeof(n), &n));
    if (!ok)
        return gf_cl_fail(a, name);
    return ew_launch(a, k, x->nelem, a->node->op == GF_OP_NOT ? 1 : (size_t)vec, wg);
}

/* IsNaN, IsInf: float in, bool out. */
static bool isx_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 1 && in[0].nelem <= INT_MAX && is_float(in[0].dtype);
}

static enum gf_status isx_run(const struct gf_kernel_args *a)
{
    bool empty, inf = a->node->op == GF_OP_IS_INF;
    enum gf_status st = ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    if ((st = gf_ew_check_dtype(a, "output 0", y->dtype, GF_BOOL)) ||
        (st = gf_ew_check_count(a, x, y)))
        return st;
    const char *name = inf ? "un_isinf" : "un_isnan";
    size_t wg;
    int vec;
    cl_kernel k = ew_kernel(a, name, x->dtype, &wg, &vec);
    cl_int n = (cl_int)x->nelem;
    cl_int neg = (cl_int)gf_node_attr_int(a->node, "detect_negative", 1);
    cl_int pos = (cl_int)gf_node_attr_int(a->node, "detect_positive", 1);
    bool ok = k && (inf ? gf_cl_args(k, 5, sizeof(cl_mem), &x->data, sizeof(cl_mem), &y->data,
                                     sizeof(n), &n, sizeof(neg), &neg, sizeof(pos), &pos)
                        : gf_cl_args(k, 3, sizeof(cl_mem), &x->data, sizeof(cl_mem), &y->data,
                                     sizeof(n), &n));
    if (!ok)
        return gf_cl_fail(a, name);
    return ew_launch(a, k, x->nelem, 1, wg);
}

static bool grad_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 2 && is_float(in[0].dtype) && in[0].nelem <= INT_MAX;
}

/* ---- binary ----------------------------------------------------------------- */

enum { T_F32 = 1, T_INT = 2, T_BOOL = 4 };

static const struct bin_op {
    enum gf_op op;
    const char *stem;  /* binf_<stem>, bnd_<stem>_<type> */
    unsigned types;    /* T_F32 (the float types) | T_INT | T_BOOL */
    bool flat;         /* has a float flat kernel */
    bool bool_out;
} bin_ops[] = {
    {GF_OP_ADD, "add", T_F32 | T_INT, true, false},
    {GF_OP_SUB, "sub", T_F32 | T_INT, true, false},
    {GF_OP_MUL, "mul", T_F32 | T_INT, true, false},
    {GF_OP_DIV, "div", T_F32 | T_INT, true, false},
    {GF_OP_POW, "pow", T_F32, true, false},
    {GF_OP_MAX, "max", T_F32 | T_INT, true, false},
    {GF_OP_MIN, "min", T_F32 | T_INT, true, false},
    {GF_OP_EQUAL, "eq", T_F32 | T_INT | T_BOOL, false, true},
    {GF_OP_LESS, "lt", T_F32 | T_INT, false, true},
    {GF_OP_LESS_OR_EQUAL, "le", T_F32 | T_INT, false, true},
    {GF_OP_GREATER, "gt", T_F32 | T_INT, false, true},
    {GF_OP_GREATER_OR_EQUAL, "ge", T_F32 | T_INT, false, true},
    {GF_OP_AND, "and", T_BOOL, false, true},
    {GF_OP_OR, "or", T_BOOL, false, true},
    {GF_OP_XOR, "xor", T_BOOL, false, true},
};

static const struct bin_op *bin_find(enum gf_op op)
{
    for (size_t i = 0; i < sizeof(bin_ops) / sizeof(bin_ops[0]); i++)
        if (bin_ops[i].op == op)
            return &bin_ops[i];
    return NULL;
}

/* Type suffix of the ND kernels, NULL when op lacks the type. */
static const char *bin_sfx(const struct bin_op *op, enum gf_dtype t)
{
    if (is_float(t) && (op->types & T_F32))
        return "f32";
    if (t == GF_INT64 && (op->types & T_INT))
        return "i64";
    if (t == GF_INT32 && (op->types & T_INT))
        return "i32";
    if (t == GF_BOOL && (op->types & T_BOOL))
        return "b8";
    return NULL;
}

static bool is_int(enum gf_dtype t)
{
    return t == GF_INT64 || t == GF_INT32;
}

/* Pow of a half base (fp16, bf16) with an fp32 exponent: input k = 1 */
static bool pow_half_float(const struct gf_node *n, const struct gf_tview *in, size_t k)
{
    return n->op == GF_OP_POW && k == 1 && in[1].dtype == GF_FLOAT &&
           (in[0].dtype == GF_FLOAT16 || in[0].dtype == GF_BFLOAT16);
}

static bool bin_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    const struct bin_op *op = bin_find(n->op);
    bool variadic = n->op == GF_OP_MAX || n->op == GF_OP_MIN;
    if (!op || n_in < 1 || (!variadic && n_in != 2) || !bin_sfx(op, in[0].dtype) ||
        gf_node_attr_int(n, "broadcast", 0)) /* the opset < 7 form */
        return false;
    /* mixed types go to the CPU, which has them, but for Pow's half ^ float */
    for (size_t k = 0; k < n_in; k++)
        if (in[k].nelem > INT_MAX || (in[k].dtype != in[0].dtype && !pow_half_float(n, in, k)))
            return false;
    /* integer division by zero is checked on the host */
    return !(n->op == GF_OP_DIV && is_int(in[0].dtype) && !in[1].host);
}

/* out = op(x, b), both broadcast to out (x may be out itself); b may be
 * Pow's float exponent of a half x (the _powx kernels). */
static enum gf_status bin_pair(const struct gf_kernel_args *a, const struct bin_op *op,
                               const struct gf_tview *x, int kx, const struct gf_tview *b,
                               int kb)
{
    const struct gf_tview *out = &a->out[0];
    int64_t st[3][GF_MAX_RANK] = {{0}};
    enum gf_status s;
    if ((s = gf_ew_bcast(a, kx, x, out, st[0])) || (s = gf_ew_bcast(a, kb, b, out, st[1])))
        return s;
    cl_int n = (cl_int)out->nelem;
    size_t wg;
    int vec;
    char name[32];
    const char *stem = b->dtype != x->dtype ? "powx" : op->stem;
    bool flat = op->flat && is_float(x->dtype) && (x->nelem == out->nelem || x->nelem == 1) &&
                (b->nelem == out->nelem || b->nelem == 1);
    if (flat) {
        snprintf(name, sizeof(name), "binf_%s", stem);
        cl_int sa = x->nelem == out->nelem, sb = b->nelem == out->nelem;
        cl_kernel k = ew_kernel(a, name, x->dtype, &wg, &vec);
        if (!k || !gf_cl_args(k, 6, sizeof(cl_mem), &x->data, sizeof(cl_mem), &b->data,
                              sizeof(cl_mem), &out->data, sizeof(n), &n, sizeof(sa), &sa,
                              sizeof(sb), &sb))
            return gf_cl_fail(a, name);
        return ew_launch(a, k, out->nelem, (size_t)vec, wg);
    }
    struct gf_cl_nd nd;
    if (!gf_cl_nd_init(&nd, out->rank, out->dims, 3, st))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL "
                               "kernels");
    snprintf(name, sizeof(name), "bnd_%s_%s", stem, bin_sfx(op, x->dtype));
    cl_kernel k = ew_kernel(a, name, x->dtype, &wg, &vec);
    if (!k || !gf_cl_args(k, 4, sizeof(cl_mem), &x->data, sizeof(cl_mem), &b->data,
                          sizeof(cl_mem), &out->data, sizeof(n), &n) || !nd_args(k, 4, &nd))
        return gf_cl_fail(a, name);
    return ew_launch(a, k, out->nelem, 1, wg);
}

static enum gf_status bin_run(const struct gf_kernel_args *a)
{
    const struct bin_op *op = bin_find(a->node->op);
    bool empty;
    enum gf_status st = ew_begin(a, 0, &empty);
    if (st != GF_OK || empty)
        return st;
    if (a->n_in == 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs at least one input");
    for (size_t k = 0; k < a->n_in; k++) {
        if ((st = gf_ew_check_in(a, k)))
            return st;
        if (a->in[k].dtype != a->in[0].dtype && !pow_half_float(a->node, a->in, k))
            return gf_kernel_error(a, GF_ERR_INVALID, "inputs 0 and %zu differ in type (%s, "
                                   "%s)", k, gf_dtype_name(a->in[0].dtype),
                                   gf_dtype_name(a->in[k].dtype));
    }
    enum gf_dtype dt = a->in[0].dtype;
    if (!bin_sfx(op, dt))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no OpenCL kernel for type %s",
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

/* Bound k (1: min, 2: max): the tensor when given (one element of x's
 * type, read by the kernel: *t), else the attribute of opsets before 11,
 * else dflt (*v), as the CPU's. */
static enum gf_status clip_bound(const struct gf_kernel_args *a, size_t k, const char *name,
                                 float dflt, cl_mem *t, cl_float *v)
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
    return n_in >= 1 && is_float(in[0].dtype) && in[0].nelem <= INT_MAX;
}

static enum gf_status clip_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    cl_mem lo_t, hi_t;
    cl_float lo, hi;
    if ((st = clip_bound(a, 1, "min", -FLT_MAX, &lo_t, &lo)) ||
        (st = clip_bound(a, 2, "max", FLT_MAX, &hi_t, &hi)) ||
        (st = gf_ew_check_dtype(a, "output 0", y->dtype, x->dtype)) ||
        (st = gf_ew_check_count(a, x, y)))
        return st;
    size_t wg;
    int vec;
    cl_int n = (cl_int)x->nelem;
    cl_kernel k = ew_kernel(a, "clip", x->dtype, &wg, &vec);
    if (!k || !gf_cl_args(k, 7, sizeof(cl_mem), &x->data, sizeof(cl_mem), &y->data, sizeof(n),
                          &n, sizeof(cl_mem), &lo_t, sizeof(cl_mem), &hi_t, sizeof(lo), &lo,
                          sizeof(hi), &hi))
        return gf_cl_fail(a, "clip");
    return ew_launch(a, k, x->nelem, (size_t)vec, wg);
}

/* ---- Where ------------------------------------------------------------------- */

static bool where_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 3 && in[0].dtype == GF_BOOL && size_sfx(in[1].dtype) &&
           in[0].nelem <= INT_MAX && in[1].nelem <= INT_MAX && in[2].nelem <= INT_MAX;
}

static enum gf_status where_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = ew_begin(a, 3, &empty);
    if (st != GF_OK || empty || (st = gf_where_check(a)))
        return st;
    enum gf_dtype dt = a->in[1].dtype;
    const char *sfx = size_sfx(dt);
    if (!sfx)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no OpenCL kernel for type %s",
                               gf_dtype_name(dt));
    const struct gf_tview *out = &a->out[0];
    int64_t st3[3][GF_MAX_RANK];
    for (int k = 0; k < 3; k++)
        if ((st = gf_ew_bcast(a, k, &a->in[k], out, st3[k])))
            return st;
    struct gf_cl_nd nd;
    if (!gf_cl_nd_init(&nd, out->rank, out->dims, 3, st3))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL "
                               "kernels");
    char name[16];
    snprintf(name, sizeof(name), "where_%s", sfx);
    size_t wg;
    int vec;
    cl_int n = (cl_int)out->nelem;
    cl_kernel k = ew_kernel(a, name, GF_UNDEFINED, &wg, &vec);
    if (!k || !gf_cl_args(k, 5, sizeof(cl_mem), &a->in[0].data, sizeof(cl_mem), &a->in[1].data,
                          sizeof(cl_mem), &a->in[2].data, sizeof(cl_mem), &out->data,
                          sizeof(n), &n) || !nd_args(k, 5, &nd))
        return gf_cl_fail(a, name);
    return ew_launch(a, k, out->nelem, 1, wg);
}

/* ---- Cast, CastLike, Identity ------------------------------------------------------- */

static const char *cast_sfx(enum gf_dtype t)
{
    switch (t) {
    case GF_FLOAT: return "f32";
    case GF_FLOAT16: return "f16";
    case GF_BFLOAT16: return "bf16";
    case GF_INT64: return "i64";
    case GF_INT32: return "i32";
    case GF_UINT8: return "u8";
    case GF_BOOL: return "b8";
    default: return NULL;
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
    return n_in >= 1 && in[0].nelem <= INT_MAX &&
           (in[0].dtype == to ? size_sfx(to) != NULL : cast_sfx(in[0].dtype) && cast_sfx(to));
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
    enum gf_status st = ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    if ((st = gf_cast_check(a)))
        return st;
    if (x->dtype == y->dtype)
        return copy_run(a);
    if (!cast_sfx(x->dtype) || !cast_sfx(y->dtype))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no OpenCL cast from %s to %s",
                               gf_dtype_name(x->dtype), gf_dtype_name(y->dtype));
    if ((st = gf_ew_check_count(a, x, y)))
        return st;
    char name[32];
    snprintf(name, sizeof(name), "cast_%s_%s", cast_sfx(x->dtype), cast_sfx(y->dtype));
    if (x->dtype == GF_FLOAT && y->dtype == GF_BFLOAT16 && gf_node_opset(a->node) < 19)
        snprintf(name, sizeof(name), "cast_f32_bf16_trunc");
    size_t wg;
    int vec;
    cl_int n = (cl_int)x->nelem;
    cl_kernel k = ew_kernel(a, name, GF_UNDEFINED, &wg, &vec);
    if (!k || !gf_cl_args(k, 3, sizeof(cl_mem), &x->data, sizeof(cl_mem), &y->data, sizeof(n),
                          &n))
        return gf_cl_fail(a, name);
    return ew_launch(a, k, x->nelem, 1, wg);
}

static bool identity_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in == 1 && size_sfx(in[0].dtype);
}

static enum gf_status identity_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = ew_begin(a, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    return copy_run(a);
}

/* ---- registration ----------------------------------------------------------------- */

#define EW_KERNEL(OP, DT, name, sup, fn)                                                     \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = DT, .impl = name, .supports = sup,      \
     .run = fn, .n_knobs = 2, .knobs = ew_knobs}
#define EW_UNARY(OP) EW_KERNEL(OP, GF_UNDEFINED, "cl_unary", un_supports, un_run)
#define EW_GRAD(OP) EW_KERNEL(OP, GF_UNDEFINED, "cl_act_grad", grad_supports, un_run)
#define EW_BINARY(OP) EW_KERNEL(OP, GF_UNDEFINED, "cl_binary", bin_supports, bin_run)

static const struct gf_kernel kernels[] = {
    EW_UNARY(NEG), EW_UNARY(SQRT), EW_UNARY(RECIPROCAL), EW_UNARY(EXP), EW_UNARY(LOG),
    EW_UNARY(TANH), EW_UNARY(ABS), EW_UNARY(ERF), EW_UNARY(SIN), EW_UNARY(COS),
    EW_UNARY(FLOOR), EW_UNARY(CEIL), EW_UNARY(RELU), EW_UNARY(SIGMOID), EW_UNARY(SOFTPLUS),
    EW_UNARY(GELU),
    EW_KERNEL(CLIP, GF_UNDEFINED, "cl_clip", clip_supports, clip_run),
    EW_KERNEL(NOT, GF_BOOL, "cl_unary", un_supports, un_run),
    EW_KERNEL(IS_NAN, GF_UNDEFINED, "cl_isx", isx_supports, isx_run),
    EW_KERNEL(IS_INF, GF_UNDEFINED, "cl_isx", isx_supports, isx_run),
    EW_BINARY(ADD), EW_BINARY(SUB), EW_BINARY(MUL), EW_BINARY(DIV), EW_BINARY(POW),
    EW_BINARY(MAX), EW_BINARY(MIN), EW_BINARY(EQUAL), EW_BINARY(LESS),
    EW_BINARY(LESS_OR_EQUAL), EW_BINARY(GREATER), EW_BINARY(GREATER_OR_EQUAL),
    EW_BINARY(AND), EW_BINARY(OR), EW_BINARY(XOR),
    EW_KERNEL(WHERE, GF_UNDEFINED, "cl_where", where_supports, where_run),
    EW_KERNEL(CAST, GF_UNDEFINED, "cl_cast", cast_supports, cast_run),
    EW_KERNEL(CAST_LIKE, GF_UNDEFINED, "cl_cast", cast_supports, cast_run),
    EW_KERNEL(IDENTITY, GF_UNDEFINED, "cl_copy", identity_supports, identity_run),
    EW_GRAD(RELU_GRAD), EW_GRAD(SIGMOID_GRAD), EW_GRAD(TANH_GRAD), EW_GRAD(GELU_GRAD),
};

const struct gf_kernel_table gf_opencl_elementwise_table = {kernels,
                                                            sizeof(kernels) / sizeof(kernels[0])};
