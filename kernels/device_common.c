/* What the device backends' host code shares (device_common.h): the rules
 * of their supports(), the checks before a launch and its plan, once for
 * CUDA and OpenCL.  Messages name the backend from its caps. */
#include <float.h>
#include <limits.h>

#include "device_common.h"
#include "optim_ops.h"

/* ---- element types ------------------------------------------------------------ */

bool gf_dev_float(const struct gf_dev_caps *c, enum gf_dtype t)
{
    return t == GF_FLOAT || (c->half && (t == GF_FLOAT16 || t == GF_BFLOAT16));
}

bool gf_dev_fits(const struct gf_dev_caps *c, size_t n)
{
    return !c->int_index || n <= INT_MAX;
}

enum gf_status gf_dev_check_sizes(const struct gf_kernel_args *a, const struct gf_dev_caps *c)
{
    for (size_t i = 0; i < a->n_in + a->n_out; i++) {
        const struct gf_tview *t = i < a->n_in ? &a->in[i] : &a->out[i - a->n_in];
        if (!gf_dev_fits(c, t->nelem))
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "%s %zu has %zu elements; the %s "
                                   "kernels take fewer than 2^31", i < a->n_in ? "input" :
                                   "output", i < a->n_in ? i : i - a->n_in, t->nelem, c->name);
    }
    return GF_OK;
}

size_t gf_dev_move_size(enum gf_dtype t)
{
    if (t == GF_STRING || t == GF_INT4 || t == GF_UINT4 || t == GF_UNDEFINED)
        return 0;
    size_t s = gf_dtype_size(t);
    return s == 1 || s == 2 || s == 4 || s == 8 ? s : 0;
}

const char *gf_dev_size_sfx(enum gf_dtype t)
{
    static const char *const sfx[9] = {[1] = "1", [2] = "2", [4] = "4", [8] = "8"};
    return sfx[gf_dev_move_size(t)];
}

int gf_dev_type_of(enum gf_dtype t)
{
    switch (t) {
    case GF_FLOAT: return GF_DEV_F32;
    case GF_FLOAT16: return GF_DEV_F16;
    case GF_BFLOAT16: return GF_DEV_BF16;
    case GF_INT64: return GF_DEV_I64;
    case GF_INT32: return GF_DEV_I32;
    case GF_UINT8: return GF_DEV_U8;
    case GF_BOOL: return GF_DEV_B8;
    default: return -1;
    }
}

bool gf_dev_host_or_empty(const struct gf_tview *in, size_t n_in, size_t i)
{
    return i >= n_in || in[i].dtype == GF_UNDEFINED || in[i].nelem == 0 || in[i].host;
}

/* ---- merged axes ------------------------------------------------------------------ */

int gf_nd_merge(int rank, const int64_t *dims, int n, const int64_t st[][GF_MAX_RANK],
                int64_t *mdims, int64_t mst[][GF_MAX_RANK])
{
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1)
            continue;
        bool merge = r > 0;
        for (int k = 0; merge && k < n; k++)
            merge = mst[k][r - 1] == st[k][d] * dims[d];
        if (merge) {
            mdims[r - 1] *= dims[d];
        } else {
            mdims[r] = dims[d];
            r++;
        }
        for (int k = 0; k < n; k++)
            mst[k][r - 1] = st[k][d];
    }
    if (r == 0) { /* one element */
        mdims[0] = 1;
        for (int k = 0; k < n; k++)
            mst[k][0] = 0;
        r = 1;
    }
    return r;
}

/* ---- the elementwise family --------------------------------------------------------- */

/* gf_ew_begin, and an output within c's indexing. */
static enum gf_status ew_begin(const struct gf_kernel_args *a, const struct gf_dev_caps *c,
                               size_t n_in, bool *empty)
{
    enum gf_status st = gf_ew_begin(a, n_in, empty);
    if (st == GF_OK && !*empty && !gf_dev_fits(c, a->out[0].nelem))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "output 0 has %zu elements; the %s "
                               "kernels take fewer than 2^31", a->out[0].nelem, c->name);
    return st;
}

/* Output 0 = input 0, a device copy. */
static enum gf_status copy_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    enum gf_status st = gf_ew_check_dtype(a, "output 0", y->dtype, x->dtype);
    if (st || (st = gf_ew_check_count(a, x, y)))
        return st;
    return a->backend->ops->copy(a->backend, y->data, x->data, gf_tview_bytes(y));
}

/* ---- unary ops and the activation gradients --------------------------------------- */

static const struct {
    enum gf_op op;
    int code; /* gf_dev_unary, gf_dev_grad for the gradients */
} unary_ops[] = {
    {GF_OP_NEG, GF_DEV_NEG},         {GF_OP_SQRT, GF_DEV_SQRT},   {GF_OP_RECIPROCAL, GF_DEV_RECIP},
    {GF_OP_EXP, GF_DEV_EXP},         {GF_OP_LOG, GF_DEV_LOG},     {GF_OP_TANH, GF_DEV_TANH},
    {GF_OP_ABS, GF_DEV_ABS},         {GF_OP_ERF, GF_DEV_ERF},     {GF_OP_SIN, GF_DEV_SIN},
    {GF_OP_COS, GF_DEV_COS},         {GF_OP_FLOOR, GF_DEV_FLOOR}, {GF_OP_CEIL, GF_DEV_CEIL},
    {GF_OP_RELU, GF_DEV_RELU},       {GF_OP_SIGMOID, GF_DEV_SIGMOID},
    {GF_OP_SOFTPLUS, GF_DEV_SOFTPLUS}, {GF_OP_NOT, GF_DEV_NOT},
    {GF_OP_RELU_GRAD, GF_DEV_RELU_GRAD}, {GF_OP_SIGMOID_GRAD, GF_DEV_SIGMOID_GRAD},
    {GF_OP_TANH_GRAD, GF_DEV_TANH_GRAD},
};

static const char *const unary_names[] = {
    "neg", "sqrt", "recip", "exp", "log", "tanh", "abs", "erf", "sin", "cos", "floor", "ceil",
    "relu", "sigmoid", "softplus", "gelu", "gelu_tanh", "not"};
static const char *const grad_names[] = {"relu", "sigmoid", "tanh", "gelu", "gelu_tanh"};

/* The code of a unary or gradient node; Gelu's by its attribute (-1 for a
 * bad one: run() says so). */
static int unary_of(const struct gf_node *n)
{
    if (n->op == GF_OP_GELU || n->op == GF_OP_GELU_GRAD) {
        const char *s = gf_node_attr_string(n, "approximate", "none");
        bool grad = n->op == GF_OP_GELU_GRAD;
        if (strcmp(s, "tanh") == 0)
            return grad ? GF_DEV_GELU_TANH_GRAD : GF_DEV_GELU_TANH;
        return strcmp(s, "none") == 0 ? (grad ? GF_DEV_GELU_GRAD : GF_DEV_GELU) : -1;
    }
    for (size_t i = 0; i < sizeof(unary_ops) / sizeof(unary_ops[0]); i++)
        if (unary_ops[i].op == n->op)
            return unary_ops[i].code;
    return -1;
}

bool gf_dev_is_act_grad(enum gf_op op)
{
    return op == GF_OP_RELU_GRAD || op == GF_OP_SIGMOID_GRAD || op == GF_OP_TANH_GRAD ||
           op == GF_OP_GELU_GRAD;
}

const char *gf_dev_unary_name(int op, bool grad)
{
    return grad ? grad_names[op] : unary_names[op];
}

/* Unary ops (x -> y, one type) and activation gradients (dY, v -> dX: two
 * inputs of one type and size). */
static enum gf_status unary_run(const struct gf_dev_ew *d, const struct gf_kernel_args *a)
{
    bool empty, grad = a->n_in == 2;
    enum gf_status st = ew_begin(a, &d->caps, grad ? 2 : 1, &empty);
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
    int op = unary_of(a->node);
    if (op < 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "approximate='%s' is neither 'none' nor "
                               "'tanh'", gf_node_attr_string(a->node, "approximate", ""));
    return d->unary(a, op);
}

/* IsNaN IsInf: a float in, bool out of its size. */
static enum gf_status isx_run(const struct gf_dev_ew *d, const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = ew_begin(a, &d->caps, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    if ((st = gf_ew_check_dtype(a, "output 0", y->dtype, GF_BOOL)) ||
        (st = gf_ew_check_count(a, x, y)))
        return st;
    return d->isx(a);
}

/* ---- binary ops -------------------------------------------------------------------- */

enum { T_FLOAT = 1, T_INT = 2, T_BOOL = 4 };

static const struct gf_dev_binop bin_ops[] = {
    {GF_OP_ADD, GF_DEV_ADD, "add", T_FLOAT | T_INT, false},
    {GF_OP_SUB, GF_DEV_SUB, "sub", T_FLOAT | T_INT, false},
    {GF_OP_MUL, GF_DEV_MUL, "mul", T_FLOAT | T_INT, false},
    {GF_OP_DIV, GF_DEV_DIV, "div", T_FLOAT | T_INT, false},
    {GF_OP_POW, GF_DEV_POW, "pow", T_FLOAT, false},
    {GF_OP_MAX, GF_DEV_MAX, "max", T_FLOAT | T_INT, false},
    {GF_OP_MIN, GF_DEV_MIN, "min", T_FLOAT | T_INT, false},
    {GF_OP_EQUAL, GF_DEV_EQ, "eq", T_FLOAT | T_INT | T_BOOL, true},
    {GF_OP_LESS, GF_DEV_LT, "lt", T_FLOAT | T_INT, true},
    {GF_OP_LESS_OR_EQUAL, GF_DEV_LE, "le", T_FLOAT | T_INT, true},
    {GF_OP_GREATER, GF_DEV_GT, "gt", T_FLOAT | T_INT, true},
    {GF_OP_GREATER_OR_EQUAL, GF_DEV_GE, "ge", T_FLOAT | T_INT, true},
    {GF_OP_AND, GF_DEV_AND, "and", T_BOOL, true},
    {GF_OP_OR, GF_DEV_OR, "or", T_BOOL, true},
    {GF_OP_XOR, GF_DEV_XOR, "xor", T_BOOL, true},
};

static const struct gf_dev_binop *binop_of(enum gf_op op)
{
    for (size_t i = 0; i < sizeof(bin_ops) / sizeof(bin_ops[0]); i++)
        if (bin_ops[i].op == op)
            return &bin_ops[i];
    return NULL;
}

int gf_dev_bin_type(const struct gf_dev_caps *c, const struct gf_dev_binop *op,
                    enum gf_dtype t)
{
    if (gf_dev_float(c, t) && (op->types & T_FLOAT))
        return GF_DEV_F32;
    if (t == GF_INT64 && (op->types & T_INT))
        return GF_DEV_I64;
    if (t == GF_INT32 && (op->types & T_INT))
        return GF_DEV_I32;
    if (t == GF_BOOL && (op->types & T_BOOL))
        return GF_DEV_B8;
    return -1;
}

static bool is_int(enum gf_dtype t)
{
    return t == GF_INT64 || t == GF_INT32;
}

/* Pow of a half base (fp16, bf16) with an fp32 exponent: input k = 1, on a
 * backend with half kernels. */
static bool pow_half_float(const struct gf_dev_caps *c, const struct gf_node *n,
                           const struct gf_tview *in, size_t k)
{
    return c->half && n->op == GF_OP_POW && k == 1 && in[1].dtype == GF_FLOAT &&
           (in[0].dtype == GF_FLOAT16 || in[0].dtype == GF_BFLOAT16);
}

static bool bin_supports(const struct gf_dev_caps *c, const struct gf_node *n,
                         const struct gf_tview *in, size_t n_in)
{
    const struct gf_dev_binop *op = binop_of(n->op);
    bool variadic = n->op == GF_OP_MAX || n->op == GF_OP_MIN;
    if (!op || n_in < 1 || (!variadic && n_in != 2) || gf_dev_bin_type(c, op, in[0].dtype) < 0 ||
        gf_node_attr_int(n, "broadcast", 0)) /* the opset < 7 form */
        return false;
    /* mixed types go to the CPU, which has them, but for Pow's half ^ float */
    for (size_t k = 0; k < n_in; k++)
        if (!gf_dev_fits(c, in[k].nelem) ||
            (in[k].dtype != in[0].dtype && !pow_half_float(c, n, in, k)))
            return false;
    /* integer division by zero is checked on the host */
    return !(n->op == GF_OP_DIV && is_int(in[0].dtype) && !in[1].host);
}

/* d->binary of x (input or output kx) and b (input kb), broadcast to the output. */
static enum gf_status bin_pair(const struct gf_dev_ew *d, const struct gf_kernel_args *a,
                               const struct gf_dev_binop *op, const struct gf_tview *x, int kx,
                               const struct gf_tview *b, int kb)
{
    const struct gf_tview *out = &a->out[0];
    int64_t st[3][GF_MAX_RANK] = {{0}};
    enum gf_status s;
    if ((s = gf_ew_bcast(a, kx, x, out, st[0])) || (s = gf_ew_bcast(a, kb, b, out, st[1])))
        return s;
    return d->binary(a, op, x, b, st);
}

/* The binary ops and variadic Max / Min. */
static enum gf_status binary_run(const struct gf_dev_ew *d, const struct gf_kernel_args *a)
{
    const struct gf_dev_caps *c = &d->caps;
    const struct gf_dev_binop *op = binop_of(a->node->op);
    bool empty;
    enum gf_status st = ew_begin(a, c, 0, &empty);
    if (st != GF_OK || empty)
        return st;
    if (a->n_in == 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "needs at least one input");
    for (size_t k = 0; k < a->n_in; k++) {
        if ((st = gf_ew_check_in(a, k)))
            return st;
        if (a->in[k].dtype != a->in[0].dtype && !pow_half_float(c, a->node, a->in, k))
            return gf_kernel_error(a, GF_ERR_INVALID, "inputs 0 and %zu differ in type (%s, "
                                   "%s)", k, gf_dtype_name(a->in[0].dtype),
                                   gf_dtype_name(a->in[k].dtype));
    }
    enum gf_dtype dt = a->in[0].dtype;
    if (gf_dev_bin_type(c, op, dt) < 0)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no %s kernel for type %s", c->name,
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
        (st = bin_pair(d, a, op, &a->in[0], 0, &a->in[1], 1)))
        return st;
    /* Max / Min of more: folded into the output */
    for (size_t k = 2; k < a->n_in; k++)
        if ((st = bin_pair(d, a, op, &a->out[0], 0, &a->in[k], (int)k)))
            return st;
    return GF_OK;
}

/* ---- Clip, Where, Cast, Identity ----------------------------------------------------- */

/* Bound k (1: min, 2: max): the tensor when given (*t), else the attribute
 * of opsets before 11, else dflt (*v), as the CPU's. */
static enum gf_status clip_bound(const struct gf_kernel_args *a, size_t k, const char *name,
                                 float dflt, void **t, float *v)
{
    const struct gf_attr *at = gf_node_attr(a->node, name);
    *v = at && at->type == GF_ATTR_FLOAT ? at->f : dflt;
    *t = NULL;
    enum gf_status st = gf_clip_bound_check(a, k, name);
    if (st == GF_OK && k < a->n_in)
        *t = a->in[k].data;
    return st;
}

static enum gf_status clip_run(const struct gf_dev_ew *d, const struct gf_kernel_args *a)
{
    bool empty;
    struct gf_dev_clip b;
    enum gf_status st = ew_begin(a, &d->caps, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    if ((st = clip_bound(a, 1, "min", -FLT_MAX, &b.lo_t, &b.lo)) ||
        (st = clip_bound(a, 2, "max", FLT_MAX, &b.hi_t, &b.hi)) ||
        (st = gf_ew_check_dtype(a, "output 0", y->dtype, x->dtype)) ||
        (st = gf_ew_check_count(a, x, y)))
        return st;
    return d->clip(a, &b);
}

static enum gf_status where_run(const struct gf_dev_ew *d, const struct gf_kernel_args *a)
{
    const struct gf_dev_caps *c = &d->caps;
    bool empty;
    int64_t st3[3][GF_MAX_RANK];
    enum gf_status st = ew_begin(a, c, 3, &empty);
    if (st != GF_OK || empty || (st = gf_where_check(a)))
        return st;
    size_t size = gf_dev_move_size(a->in[1].dtype);
    if (!size)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no %s kernel for type %s", c->name,
                               gf_dtype_name(a->in[1].dtype));
    for (int k = 0; k < 3; k++)
        if ((st = gf_ew_bcast(a, k, &a->in[k], &a->out[0], st3[k])))
            return st;
    return d->where(a, size, st3);
}

/* The cast's target: attribute `to` (Cast) or input 1's type (CastLike). */
static enum gf_dtype cast_target(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n->op == GF_OP_CAST_LIKE)
        return n_in >= 2 ? in[1].dtype : GF_UNDEFINED;
    return (enum gf_dtype)gf_node_attr_int(n, "to", GF_UNDEFINED);
}

static enum gf_status cast_run(const struct gf_dev_ew *d, const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = ew_begin(a, &d->caps, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    if ((st = gf_cast_check(a)))
        return st;
    if (x->dtype == y->dtype)
        return copy_run(a);
    if (gf_dev_type_of(x->dtype) < 0 || gf_dev_type_of(y->dtype) < 0)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no %s cast from %s to %s", d->caps.name,
                               gf_dtype_name(x->dtype), gf_dtype_name(y->dtype));
    if ((st = gf_ew_check_count(a, x, y)))
        return st;
    return d->cast(a, x->dtype == GF_FLOAT && y->dtype == GF_BFLOAT16 &&
                          gf_node_opset(a->node) < 19);
}

static enum gf_status identity_run(const struct gf_dev_ew *d, const struct gf_kernel_args *a)
{
    bool empty;
    enum gf_status st = ew_begin(a, &d->caps, 1, &empty);
    if (st != GF_OK || empty)
        return st;
    return copy_run(a);
}

/* ---- the family's supports() and run() ---------------------------------------------------- */

bool gf_dev_ew_supports(const struct gf_dev_ew *d, const struct gf_node *n,
                        const struct gf_tview *in, size_t n_in)
{
    const struct gf_dev_caps *c = &d->caps;
    switch (n->op) {
    case GF_OP_IS_NAN:
    case GF_OP_IS_INF: /* float in, bool out */
        return n_in == 1 && gf_dev_fits(c, in[0].nelem) && gf_dev_float(c, in[0].dtype);
    case GF_OP_RELU_GRAD:
    case GF_OP_SIGMOID_GRAD:
    case GF_OP_TANH_GRAD:
    case GF_OP_GELU_GRAD:
        return n_in == 2 && gf_dev_float(c, in[0].dtype) && gf_dev_fits(c, in[0].nelem);
    case GF_OP_CLIP:
        return n_in >= 1 && gf_dev_float(c, in[0].dtype) && gf_dev_fits(c, in[0].nelem);
    case GF_OP_WHERE:
        return n_in == 3 && in[0].dtype == GF_BOOL && gf_dev_move_size(in[1].dtype) &&
               gf_dev_fits(c, in[0].nelem) && gf_dev_fits(c, in[1].nelem) &&
               gf_dev_fits(c, in[2].nelem);
    case GF_OP_CAST:
    case GF_OP_CAST_LIKE: {
        enum gf_dtype to = cast_target(n, in, n_in);
        return n_in >= 1 && gf_dev_fits(c, in[0].nelem) &&
               (in[0].dtype == to ? gf_dev_move_size(to) != 0
                                  : gf_dev_type_of(in[0].dtype) >= 0 && gf_dev_type_of(to) >= 0);
    }
    case GF_OP_IDENTITY:
        return n_in == 1 && gf_dev_move_size(in[0].dtype);
    default:
        if (binop_of(n->op))
            return bin_supports(c, n, in, n_in);
        return n_in == 1 && gf_dev_fits(c, in[0].nelem) && /* the unary ops */
               (n->op == GF_OP_NOT ? in[0].dtype == GF_BOOL : gf_dev_float(c, in[0].dtype));
    }
}

enum gf_status gf_dev_ew_run(const struct gf_dev_ew *d, const struct gf_kernel_args *a)
{
    switch (a->node->op) {
    case GF_OP_IS_NAN:
    case GF_OP_IS_INF: return isx_run(d, a);
    case GF_OP_CLIP: return clip_run(d, a);
    case GF_OP_WHERE: return where_run(d, a);
    case GF_OP_CAST:
    case GF_OP_CAST_LIKE: return cast_run(d, a);
    case GF_OP_IDENTITY: return identity_run(d, a);
    default: return binop_of(a->node->op) ? binary_run(d, a) : unary_run(d, a);
    }
}

/* ---- reductions ------------------------------------------------------------------- */

/* The float types of c's kernels, as messages list them. */
static const char *float_names(const struct gf_dev_caps *c)
{
    return c->half ? "float, float16 or bfloat16" : "float";
}

enum gf_status gf_dev_check_float_in(const struct gf_kernel_args *a, const struct gf_dev_caps *c,
                                     size_t i, const char *name)
{
    enum gf_status st = fu_check_in(a, i, name, i ? a->in[0].dtype : GF_UNDEFINED);
    if (st == GF_OK && !gf_dev_float(c, a->in[i].dtype))
        st = gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) is %s, expected %s", name, i,
                             gf_dtype_name(a->in[i].dtype), float_names(c));
    return st;
}

bool gf_dev_reduce_supports(const struct gf_dev_caps *c, const struct gf_node *n,
                            const struct gf_tview *in, size_t n_in)
{
    return n_in >= (n->op == GF_OP_SUM_TO_SHAPE ? 2u : 1u) && gf_dev_float(c, in[0].dtype) &&
           in[0].rank <= GF_MAX_RANK && gf_dev_host_or_empty(in, n_in, 1);
}

bool gf_dev_rows_supports(const struct gf_dev_caps *c, const struct gf_node *n,
                          const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 1 && gf_dev_float(c, in[0].dtype) && in[0].rank <= GF_MAX_RANK;
}

/* Reduce{Sum,Mean,Max}. */
static enum gf_status reduce_run(const struct gf_dev_reduce *d, const struct gf_kernel_args *a)
{
    enum gf_op o = a->node->op;
    bool red[GF_MAX_RANK];
    enum gf_status st = gf_dev_check_float_in(a, &d->caps, 0, "data");
    if (st == GF_OK)
        st = gf_dev_check_sizes(a, &d->caps);
    if (st == GF_OK)
        st = gf_reduce_axes(a, red);
    if (st != GF_OK)
        return st;
    return d->reduce(a, red, o == GF_OP_REDUCE_MEAN ? GF_DEV_RED_MEAN
                             : o == GF_OP_REDUCE_MAX ? GF_DEV_RED_MAX : GF_DEV_RED_SUM);
}

/* SumToShape(X, shape). */
static enum gf_status s2s_run(const struct gf_dev_reduce *d, const struct gf_kernel_args *a)
{
    const struct gf_dev_caps *c = &d->caps;
    bool red[GF_MAX_RANK];
    enum gf_status st = gf_dev_check_float_in(a, c, 0, "X");
    if (st == GF_OK && a->n_in < 2)
        st = gf_kernel_error(a, GF_ERR_INVALID, "input 1 is missing");
    if (st == GF_OK)
        st = gf_check_shape_input(a, 1);
    if (st == GF_OK)
        st = gf_dev_check_sizes(a, c);
    if (st != GF_OK)
        return st;
    const struct gf_tview *x = &a->in[0], *y = &a->out[0];
    int lead = x->rank - y->rank;
    bool fits = lead >= 0;
    for (int i = 0; fits && i < x->rank; i++) {
        int64_t td = i >= lead ? y->dims[i - lead] : 1;
        fits = td == x->dims[i] || td == 1;
        red[i] = i < lead || td != x->dims[i];
    }
    if (!fits)
        return gf_kernel_error(a, GF_ERR_INVALID, "input 0 of rank %d cannot be summed to the "
                               "rank-%d target shape", x->rank, y->rank);
    return d->reduce(a, red, GF_DEV_RED_SUM);
}

void gf_red_plan(const struct gf_tview *x, const bool *reduce, struct gf_red_plan *p)
{
    memset(p, 0, sizeof(*p));
    p->nout = p->nred = 1;
    int64_t stride = 1, kd[GF_MAX_RANK], ks[GF_MAX_RANK], rd[GF_MAX_RANK], rs[GF_MAX_RANK];
    int last = -1;
    for (int i = x->rank - 1; i >= 0; i--) { /* innermost first */
        int64_t d = x->dims[i];
        if (d == 1)
            continue;
        int r = reduce[i];
        int64_t *dims = r ? rd : kd, *strs = r ? rs : ks;
        int *cnt = r ? &p->nr : &p->nk;
        if (last == r) {
            dims[*cnt - 1] *= d;
        } else {
            dims[*cnt] = d;
            strs[(*cnt)++] = stride;
        }
        last = r;
        stride *= d;
        *(r ? &p->nred : &p->nout) *= d;
    }
    for (int i = 0; i < p->nk; i++) /* outermost first */
        p->kdim[i] = kd[p->nk - 1 - i], p->kstr[i] = ks[p->nk - 1 - i];
    for (int i = 0; i < p->nr; i++)
        p->rdim[i] = rd[p->nr - 1 - i], p->rstr[i] = rs[p->nr - 1 - i];
}

/* The rows along axis ax of x (coerce: the opset < 13 form). */
static void axis_rows(const struct gf_tview *x, int ax, bool coerce, struct gf_dev_rows *r)
{
    r->n = (size_t)x->dims[ax];
    r->inner = gf_dims_prod(x->dims, ax + 1, x->rank);
    if (coerce) {
        r->n *= r->inner;
        r->inner = 1;
    }
    r->rows = r->n ? x->nelem / r->n : 0;
}

/* Softmax LogSoftmax. */
static enum gf_status softmax_run(const struct gf_dev_reduce *d, const struct gf_kernel_args *a)
{
    const struct gf_dev_caps *c = &d->caps;
    const struct gf_tview *x = &a->in[0];
    bool old = gf_node_opset(a->node) < 13;
    struct gf_dev_rows r;
    int ax;
    enum gf_status st = gf_dev_check_float_in(a, c, 0, "input");
    if (st == GF_OK)
        st = gf_dev_check_sizes(a, c);
    if (st == GF_OK)
        st = gf_axis_attr(a, old ? 1 : -1, x->rank, &ax);
    if (st == GF_OK)
        st = gf_check_out_count(a, 0, x->dtype, x->nelem);
    if (st != GF_OK || x->nelem == 0)
        return st;
    axis_rows(x, ax, old, &r);
    return d->rows(a, &r);
}

/* SoftmaxGrad LogSoftmaxGrad(dY, Y). */
static enum gf_status softmax_grad_run(const struct gf_dev_reduce *d,
                                       const struct gf_kernel_args *a)
{
    const struct gf_dev_caps *c = &d->caps;
    const struct gf_tview *g = &a->in[0], *y = &a->in[1];
    struct gf_dev_rows r;
    int ax = 0;
    enum gf_status st = a->n_in < 2 ? gf_kernel_error(a, GF_ERR_INVALID, "input 1 is missing")
                                    : gf_dev_check_float_in(a, c, 0, "dY");
    if (st == GF_OK)
        st = gf_dev_check_float_in(a, c, 1, "Y");
    if (st == GF_OK)
        st = gf_dev_check_sizes(a, c);
    if (st == GF_OK)
        st = gf_axis_attr(a, -1, g->rank, &ax);
    if (st == GF_OK && !fu_same_shape(y, g->rank, g->dims))
        st = gf_kernel_error(a, GF_ERR_INVALID, "Y (input 1) and dY differ in shape");
    if (st == GF_OK)
        st = gf_check_out_count(a, 0, g->dtype, g->nelem);
    if (st != GF_OK || g->nelem == 0)
        return st;
    axis_rows(g, ax, false, &r);
    return d->rows(a, &r);
}

enum gf_status gf_dev_reduce_run(const struct gf_dev_reduce *d, const struct gf_kernel_args *a)
{
    switch (a->node->op) {
    case GF_OP_SUM_TO_SHAPE: return s2s_run(d, a);
    case GF_OP_SOFTMAX:
    case GF_OP_LOG_SOFTMAX: return softmax_run(d, a);
    case GF_OP_SOFTMAX_GRAD:
    case GF_OP_LOG_SOFTMAX_GRAD: return softmax_grad_run(d, a);
    default: return reduce_run(d, a);
    }
}

/* ---- the optimizer ops ----------------------------------------------------------- */

enum gf_status gf_dev_optim_run(const struct gf_dev_optim *d, const struct gf_kernel_args *a)
{
    struct gf_optim_args o;
    enum gf_status st = gf_optim_check(a, &o);
    if (st != GF_OK)
        return st;
    switch (a->node->op) {
    case GF_OP_GRAD_ACCUMULATE: {
        const struct gf_tview *y = &a->out[0];
        if (o.r.transpose && (y->dims[0] > INT32_MAX || y->dims[1] > INT32_MAX))
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "transpose: %s exceeds the kernel's "
                                   "int", FU_SHAPE(y));
        return y->nelem ? d->acc(a, &o) : GF_OK;
    }
    case GF_OP_GRAD_NORM: return d->norm(a);
    case GF_OP_SGD_STEP: {
        struct gf_sgd_scalars s;
        gf_sgd_scalars(o.hyper, &s);
        return a->in[0].nelem ? d->sgd(a, &o, &s) : GF_OK;
    }
    default: { /* AdamWStep */
        struct gf_adamw_scalars s;
        if (!a->in[0].nelem)
            return GF_OK;
        gf_adamw_scalars(o.hyper, &s);
        return d->adamw(a, &s);
    }
    }
}
