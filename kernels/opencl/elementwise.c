/*
 * OpenCL kernels: the elementwise family (elementwise.cl), fp32.
 *
 *   unary     Neg Sqrt Reciprocal Exp Log Tanh Abs Erf Sin Cos Floor Ceil
 *             Relu Sigmoid Softplus Gelu, SiLU-free forms only
 *   plumbing  Identity
 *
 * Flat kernels take VEC elements per step with a grid-stride loop; the
 * knobs are the work-group size and VEC.  Semantics and messages follow
 * kernels/cpu/elementwise.c.
 */
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

/* Work-group size and VEC of a config (defaults for NULL), the work-group
 * size clamped to the device. */
static void ew_config(const struct gf_kernel_args *a, size_t *wg, int *vec)
{
    *wg = (size_t)(a->config ? a->config[0] : wg_values[0]);
    *vec = a->config ? a->config[1] : vec_values[0];
    size_t max = gf_cl_of(a->backend)->max_wg;
    if (max && *wg > max)
        *wg = max;
}

/* A grid-stride launch over `items` work-items: enough groups to fill the
 * device several times over, no more than needed. */
static size_t ew_global(const struct gf_kernel_args *a, size_t items, size_t wg)
{
    size_t cap = (size_t)gf_cl_of(a->backend)->compute_units * 8 * wg;
    if (cap < wg)
        cap = wg;
    size_t g = (items + wg - 1) / wg * wg;
    return g < cap ? g : cap;
}

/* Output 0 present; *empty when it has no elements. */
static enum gf_status ew_check_out(const struct gf_kernel_args *a, bool *empty)
{
    *empty = a->n_out >= 1 && a->out[0].nelem == 0;
    if (*empty)
        return GF_OK;
    if (a->n_out < 1 || !a->out[0].data)
        return gf_kernel_error(a, GF_ERR_INVALID, "output 0 is missing");
    return GF_OK;
}

static enum gf_status ew_check_dtype(const struct gf_kernel_args *a, const char *what,
                                     enum gf_dtype got, enum gf_dtype want)
{
    if (got == want)
        return GF_OK;
    return gf_kernel_error(a, GF_ERR_INVALID, "%s has type %s, expected %s", what,
                           gf_dtype_name(got), gf_dtype_name(want));
}

static enum gf_status ew_check_count(const struct gf_kernel_args *a, const struct gf_tview *x,
                                     const struct gf_tview *y)
{
    if (x->nelem == y->nelem)
        return GF_OK;
    return gf_kernel_error(a, GF_ERR_INVALID, "input 0 has %zu elements, output 0 has %zu",
                           x->nelem, y->nelem);
}

/* ---- unary ------------------------------------------------------------- */

static const struct {
    enum gf_op op;
    const char *kernel;
} un_ops[] = {
    {GF_OP_NEG, "un_neg"},       {GF_OP_SQRT, "un_sqrt"},   {GF_OP_RECIPROCAL, "un_recip"},
    {GF_OP_EXP, "un_exp"},       {GF_OP_LOG, "un_log"},     {GF_OP_TANH, "un_tanh"},
    {GF_OP_ABS, "un_abs"},       {GF_OP_ERF, "un_erf"},     {GF_OP_SIN, "un_sin"},
    {GF_OP_COS, "un_cos"},       {GF_OP_FLOOR, "un_floor"}, {GF_OP_CEIL, "un_ceil"},
    {GF_OP_RELU, "un_relu"},     {GF_OP_SIGMOID, "un_sigmoid"},
    {GF_OP_SOFTPLUS, "un_softplus"}, {GF_OP_GELU, "un_gelu"},
};

/* The kernel name for a unary node, NULL if none (or a bad attribute). */
static const char *un_kernel(const struct gf_node *n)
{
    if (n->op == GF_OP_GELU) {
        const char *s = gf_node_attr_string(n, "approximate", "none");
        return strcmp(s, "tanh") == 0 ? "un_gelu_tanh" : strcmp(s, "none") == 0 ? "un_gelu"
                                                                                 : NULL;
    }
    for (size_t i = 0; i < sizeof(un_ops) / sizeof(un_ops[0]); i++)
        if (un_ops[i].op == n->op)
            return un_ops[i].kernel;
    return NULL;
}

static bool un_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return n_in == 1 && in[0].dtype == GF_FLOAT && in[0].nelem <= INT_MAX && un_kernel(n);
}

static enum gf_status un_run(const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = ew_check_out(a, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    if ((st = ew_check_dtype(a, "output 0", y->dtype, GF_FLOAT)) ||
        (st = ew_check_count(a, x, y)))
        return st;
    const char *name = un_kernel(a->node);
    if (!name)
        return gf_kernel_error(a, GF_ERR_INVALID, "approximate='%s' is neither 'none' nor "
                               "'tanh'", gf_node_attr_string(a->node, "approximate", ""));
    size_t wg;
    int vec;
    ew_config(a, &wg, &vec);
    char opts[32];
    snprintf(opts, sizeof(opts), "-DVEC=%d", vec);
    cl_kernel k = gf_cl_kernel(a->backend, EW_FILE, name, opts);
    cl_int n = (cl_int)x->nelem;
    if (!k || !gf_cl_args(k, 3, sizeof(cl_mem), &x->data, sizeof(cl_mem), &y->data,
                          sizeof(n), &n))
        return gf_cl_fail(a, name);
    size_t global = ew_global(a, (x->nelem + (size_t)vec - 1) / (size_t)vec, wg);
    return gf_cl_run(a, k, 1, &global, &wg);
}

/* ---- registration -------------------------------------------------------- */

#define EW_KERNEL(OP, DT, name, sup, fn)                                                     \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = DT, .impl = name, .supports = sup,      \
     .run = fn, .n_knobs = 2, .knobs = ew_knobs}
#define EW_UNARY(OP) EW_KERNEL(OP, GF_FLOAT, "cl_unary", un_supports, un_run)

static const struct gf_kernel kernels[] = {
    EW_UNARY(NEG),   EW_UNARY(SQRT),    EW_UNARY(RECIPROCAL), EW_UNARY(EXP),
    EW_UNARY(LOG),   EW_UNARY(TANH),    EW_UNARY(ABS),        EW_UNARY(ERF),
    EW_UNARY(SIN),   EW_UNARY(COS),     EW_UNARY(FLOOR),      EW_UNARY(CEIL),
    EW_UNARY(RELU),  EW_UNARY(SIGMOID), EW_UNARY(SOFTPLUS),   EW_UNARY(GELU),
};

const struct gf_kernel_table gf_opencl_elementwise_table = {kernels,
                                                            sizeof(kernels) / sizeof(kernels[0])};
