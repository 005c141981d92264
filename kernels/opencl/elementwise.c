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
 * the rules (what `supports` takes) and the checks before a launch are the
 * device backends' (kernels/device_common.c).  Integer division by zero is
 * checked on the host, so integer Div needs its divisor's host copy.
 */
#include <stdio.h>

#include "device_common.h"
#include "ocl.h"

#define EW_FILE "elementwise.cl"

static const int wg_values[] = {256, 64, 128, 512, 1024};
static const int vec_values[] = {4, 1, 2, 8};
static const struct gf_config_knob ew_knobs[] = {
    {"wg", 5, wg_values},
    {"vec", 4, vec_values},
};

static const struct gf_dev_ew cl_ew;

/* Kernel name suffixes of the gf_dev_types. */
static const char *const type_sfx[GF_DEV_N_TYPES] = {"f32", "f16", "bf16", "i64", "i32", "u8",
                                                     "b8"};

/* ---- launching ------------------------------------------------------------ */

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
    const char *store = gf_dev_float(&cl_ew.caps, dt) ? gf_cl_storage_opt(dt) : "";
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

/* Unary ops ("un_<name>"), and the gradients (dY, v) -> dX ("grad_<name>"):
 * same shapes, one type. */
static enum gf_status un_launch(const struct gf_kernel_args *a, int op)
{
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    bool grad = a->n_in == 2, gop = gf_dev_is_act_grad(a->node->op);
    char name[32];
    snprintf(name, sizeof(name), "%s_%s", gop ? "grad" : "un", gf_dev_unary_name(op, gop));
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
static enum gf_status isx_launch(const struct gf_kernel_args *a)
{
    bool inf = a->node->op == GF_OP_IS_INF;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
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

/* ---- binary ----------------------------------------------------------------- */

/* out = op(x, b), both broadcast to out (x may be out itself); b may be
 * Pow's float exponent of a half x (the _powx kernels).  Arithmetic ops
 * of float operands that have the output's shape or one element run the
 * flat kernels binf_<name>, the others bnd_<name>_<type>. */
static enum gf_status bin_launch(const struct gf_kernel_args *a, const struct gf_dev_binop *op,
                                 const struct gf_tview *x, const struct gf_tview *b,
                                 const int64_t st[3][GF_MAX_RANK])
{
    const struct gf_tview *out = &a->out[0];
    cl_int n = (cl_int)out->nelem;
    size_t wg;
    int vec;
    char name[32];
    const char *stem = b->dtype != x->dtype ? "powx" : op->name;
    bool flat = !op->bool_out && gf_dev_float(&cl_ew.caps, x->dtype) &&
                (x->nelem == out->nelem || x->nelem == 1) &&
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
    snprintf(name, sizeof(name), "bnd_%s_%s", stem,
             type_sfx[gf_dev_bin_type(&cl_ew.caps, op, x->dtype)]);
    cl_kernel k = ew_kernel(a, name, x->dtype, &wg, &vec);
    if (!k || !gf_cl_args(k, 4, sizeof(cl_mem), &x->data, sizeof(cl_mem), &b->data,
                          sizeof(cl_mem), &out->data, sizeof(n), &n) || !nd_args(k, 4, &nd))
        return gf_cl_fail(a, name);
    return ew_launch(a, k, out->nelem, 1, wg);
}

/* ---- Clip --------------------------------------------------------------------- */

static enum gf_status clip_launch(const struct gf_kernel_args *a, const struct gf_dev_clip *b)
{
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    cl_mem lo_t = b->lo_t, hi_t = b->hi_t;
    cl_float lo = b->lo, hi = b->hi;
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

static enum gf_status where_launch(const struct gf_kernel_args *a, size_t size,
                                   const int64_t st[3][GF_MAX_RANK])
{
    const struct gf_tview *out = &a->out[0];
    struct gf_cl_nd nd;
    if (!gf_cl_nd_init(&nd, out->rank, out->dims, 3, st))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "tensors too large for the OpenCL "
                               "kernels");
    char name[16];
    snprintf(name, sizeof(name), "where_%zu", size);
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

static enum gf_status cast_launch(const struct gf_kernel_args *a, bool trunc)
{
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    char name[32];
    snprintf(name, sizeof(name), "cast_%s_%s", type_sfx[gf_dev_type_of(x->dtype)],
             type_sfx[gf_dev_type_of(y->dtype)]);
    if (trunc)
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

static const struct gf_dev_ew cl_ew = {
    .caps = {.name = "OpenCL", .half = true, .int_index = true},
    .unary = un_launch, .isx = isx_launch, .binary = bin_launch, .clip = clip_launch,
    .where = where_launch, .cast = cast_launch};

/* ---- registration ----------------------------------------------------------------- */

static bool ew_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return gf_dev_ew_supports(&cl_ew, n, in, n_in);
}

static enum gf_status ew_run(const struct gf_kernel_args *a)
{
    return gf_dev_ew_run(&cl_ew, a);
}

#define EW_KERNEL(OP, IMPL, DT)                                                             \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_##DT, .impl = "cl_" #IMPL,          \
     .supports = ew_supports, .run = ew_run, .n_knobs = 2, .knobs = ew_knobs},

static const struct gf_kernel kernels[] = {GF_DEV_EW_OPS(EW_KERNEL)};

const struct gf_kernel_table gf_opencl_elementwise_table = {kernels,
                                                            sizeof(kernels) / sizeof(kernels[0])};
