/* What the device backends' host code shares (device_common.h): the rules
 * of their supports(), the checks before a launch and its plan, once for
 * CUDA and OpenCL.  Messages name the backend from its caps. */
#include <float.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include "device_common.h"
#include "optim_ops.h"

/* ---- devices --------------------------------------------------------------------- */

/* Every open device backend: one per (ops, device), kept until exit. */
static struct {
    pthread_mutex_t mu;
    struct {
        const struct gf_backend_ops *ops;
        int dev;
        struct gf_backend *be;
    } open[2 * GF_DEV_MAX_OPEN];
    size_t n;
} opened = {PTHREAD_MUTEX_INITIALIZER, {{0}}, 0};

enum gf_status gf_dev_open_once(const struct gf_backend_ops *ops, const char *title, int dev,
                                enum gf_status (*open_dev)(struct gf_backend *be, int dev),
                                struct gf_backend **out)
{
    enum gf_status st = GF_OK;
    size_t mine = 0;
    *out = NULL;
    pthread_mutex_lock(&opened.mu);
    for (size_t i = 0; i < opened.n && !*out; i++)
        if (opened.open[i].ops == ops && (mine++, opened.open[i].dev == dev))
            *out = opened.open[i].be;
    size_t cap = sizeof(opened.open) / sizeof(opened.open[0]);
    if (!*out && mine < GF_DEV_MAX_OPEN && opened.n < cap) {
        struct gf_backend *be = calloc(1, sizeof(*be));
        st = be ? GF_OK : gf_error(GF_ERR_NOMEM, "out of memory opening the %s backend", title);
        if (st == GF_OK) {
            be->ops = ops;
            be->n_threads = 1;
            st = open_dev(be, dev);
        }
        if (st == GF_OK) {
            opened.open[opened.n].ops = ops;
            opened.open[opened.n].dev = dev;
            opened.open[opened.n++].be = *out = be;
        } else {
            free(be);
        }
    }
    pthread_mutex_unlock(&opened.mu);
    if (st == GF_OK && !*out)
        st = gf_error(GF_ERR_UNSUPPORTED, "backend '%s': too many open devices", ops->name);
    return st;
}

void gf_dev_name_list(char *names, size_t size, const char *name)
{
    size_t len = strlen(names);
    if (len + strlen(name) + 8 < size)
        snprintf(names + len, size - len, "%s'%s'", *names ? ", " : "", name);
}

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

/* ---- the layout family --------------------------------------------------------------- */

/* Inputs that hold shapes or axes (read on the host), as a bit mask. */
static unsigned host_slots(enum gf_op op)
{
    switch (op) {
    case GF_OP_SLICE: return 0x1e;
    case GF_OP_PAD: return 0xe; /* pads, constant_value, axes */
    case GF_OP_SLICE_GRAD: return 0x3e;
    case GF_OP_GATHER_GRAD: return 0x2;
    case GF_OP_TRANSPOSE: case GF_OP_FLATTEN: case GF_OP_CONCAT: case GF_OP_GATHER: return 0;
    default: return 0x2;
    }
}

bool gf_dev_layout_supports(const struct gf_dev_caps *c, const struct gf_node *n,
                            const struct gf_tview *in, size_t n_in)
{
    if (n_in < 1 || !gf_dev_move_size(in[0].dtype))
        return false;
    unsigned slots = host_slots(n->op);
    for (size_t i = 0; i < n_in; i++) {
        bool given = in[i].data || in[i].host;
        if (!gf_dev_fits(c, in[i].nelem))
            return false;
        bool index = !(n->op == GF_OP_PAD && i == 2); /* Pad's constant_value: data */
        if ((slots >> i & 1) && given && (!in[i].host || (index && !gf_is_index_type(in[i].dtype))))
            return false;
        if (i > 0 && n->op == GF_OP_CONCAT && in[i].dtype != in[0].dtype)
            return false;
    }
    if (n->op == GF_OP_GATHER || n->op == GF_OP_GATHER_GRAD) {
        size_t ix = n->op == GF_OP_GATHER ? 1 : 2;
        if (n_in <= ix || !gf_is_index_type(in[ix].dtype))
            return false;
    }
    return true;
}

enum gf_status gf_dev_view_run(const struct gf_kernel_args *a)
{
    int r;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_view_dims(a, &r, dims);
    if (st == GF_OK)
        st = gf_check_out_dims(a, 0, r, dims);
    if (st == GF_OK)
        st = gf_check_dtype(a, "output 0", a->out[0].dtype, a->in[0].dtype);
    if (st == GF_OK && a->out[0].nelem)
        st = a->backend->ops->copy(a->backend, a->out[0].data, a->in[0].data,
                                   gf_tview_bytes(&a->in[0]));
    return st;
}

enum gf_status gf_dev_transpose_walk(const struct gf_kernel_args *a, int64_t *dims, int64_t *sx)
{
    const struct gf_tview *x = &a->in[0];
    int r = x->rank, perm[GF_MAX_RANK];
    int64_t stride[GF_MAX_RANK];
    enum gf_status st = gf_transpose_perm(a, perm, dims);
    if (st || (st = gf_check_out_dims(a, 0, r, dims)))
        return st;
    gf_strides_of(r, x->dims, stride);
    for (int k = 0; k < r; k++)
        sx[k] = stride[perm[k]];
    return GF_OK;
}

enum gf_status gf_dev_slice_walk(const struct gf_kernel_args *a, int64_t *dims, int64_t *base,
                                 int64_t *sx)
{
    const struct gf_tview *x = &a->in[0];
    int r = x->rank;
    int64_t first[GF_MAX_RANK], step[GF_MAX_RANK], stride[GF_MAX_RANK];
    enum gf_status st = gf_require_inputs(a, 1);
    if (st || (st = gf_slice_plan(a, 1, r, x->dims, first, step, dims)) ||
        (st = gf_check_out_dims(a, 0, r, dims)))
        return st;
    gf_strides_of(r, x->dims, stride);
    *base = 0;
    for (int k = 0; k < r; k++) {
        *base += first[k] * stride[k];
        sx[k] = step[k] * stride[k];
    }
    return GF_OK;
}

enum gf_status gf_dev_expand_walk(const struct gf_kernel_args *a, int *rank, int64_t *dims,
                                  int64_t *sx)
{
    enum gf_status st = gf_expand_dims(a, rank, dims);
    if (st || (st = gf_check_out_dims(a, 0, *rank, dims)))
        return st;
    gf_bcast_strides(&a->in[0], &a->out[0], sx);
    return GF_OK;
}

enum gf_status gf_dev_pad_plan(const struct gf_kernel_args *a, struct gf_dev_pad *p)
{
    const struct gf_tview *x = &a->in[0];
    int r = x->rank;
    int64_t pb[GF_MAX_RANK], pe[GF_MAX_RANK], pads[GF_MAX_INTS], axes[GF_MAX_INTS];
    size_t np = 0, na = 0;
    bool given = false, has_axes = false;
    memset(p, 0, sizeof(*p));
    p->rank = r;
    enum gf_status st = gf_require_inputs(a, 1);
    if (st || (st = gf_int_list(a, 1, "pads", "pads", pads, &np, &given)) ||
        (st = gf_int_list(a, 3, NULL, "axes", axes, &na, &has_axes)) ||
        (st = gf_pad_plan(a, pads, np, axes, na, has_axes, &p->mode, pb, pe, p->dims)) ||
        (st = gf_check_out_dims(a, 0, r, p->dims)))
        return st;
    if (gf_has_input(a, 2) && a->in[2].nelem) {
        if (a->in[2].dtype != x->dtype || !a->in[2].host)
            return gf_kernel_error(a, GF_ERR_INVALID, "constant_value is %s, not the data's %s "
                                   "on the host", gf_dtype_name(a->in[2].dtype),
                                   gf_dtype_name(x->dtype));
        memcpy(&p->fill, a->in[2].host, gf_dtype_size(x->dtype));
    } else if (gf_node_attr(a->node, "value")) {
        if (x->dtype != GF_FLOAT)
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "attribute 'value' on %s data",
                                   gf_dtype_name(x->dtype));
        float v = gf_node_attr_float(a->node, "value", 0);
        memcpy(&p->fill, &v, sizeof(v));
    }
    gf_strides_of(r, x->dims, p->sx);
    for (int k = 0; k < r; k++) { /* negative pads crop */
        p->crop[k] = pb[k] < 0 ? -pb[k] : 0;
        p->lead[k] = pb[k] > 0 ? pb[k] : 0;
        p->keep[k] = x->dims[k] - p->crop[k] - (pe[k] < 0 ? -pe[k] : 0);
    }
    return GF_OK;
}

size_t gf_dev_gather_workspace(const struct gf_kernel_args *a)
{
    (void)a;
    return 64;
}

size_t gf_dev_gather_nd_workspace(const struct gf_kernel_args *a, size_t size)
{
    size_t t = 1;
    if (a->n_in >= 2)
        t = gf_dims_prod(a->in[1].dims, 0, a->in[1].rank > 0 ? a->in[1].rank - 1 : 0);
    return t * size > 64 ? t * size : 64;
}

size_t gf_dev_nd_tuple_offset(const struct gf_nd_plan *p, const struct gf_tview *x,
                              const struct gf_tview *ind, const int64_t *xs, size_t t)
{
    size_t o = p->per_batch ? t / p->per_batch * p->batch : 0;
    for (int j = 0; j < p->k; j++) {
        int64_t v = gf_int_at(ind, ind->host, t * (size_t)p->k + (size_t)j);
        int64_t d = x->dims[p->b + j];
        o += (size_t)((v < 0 ? v + d : v) * xs[p->b + j]);
    }
    return o;
}

enum gf_status gf_dev_gather_grad_plan(const struct gf_kernel_args *a,
                                       const struct gf_dev_caps *c,
                                       struct gf_dev_gather_grad *p)
{
    enum gf_status st = gf_require_inputs(a, 3);
    if (st || (st = gf_check_shape_input(a, 1)))
        return st;
    const struct gf_tview *g = &a->in[0], *o = &a->out[0], *ind = &a->in[2];
    if ((st = gf_check_dtype(a, "output 0", o->dtype, g->dtype)) ||
        (st = gf_norm_axis(a, "axis", gf_node_attr_int(a->node, "axis", 0), o->rank, &p->axis)))
        return st;
    if (!gf_dev_float(c, g->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "dY is %s, expected %s",
                               gf_dtype_name(g->dtype), float_names(c));
    if (!gf_is_index_type(ind->dtype))
        return gf_kernel_error(a, GF_ERR_INVALID, "indices (input 2) must be int32 or int64");
    int ax = p->axis;
    p->pre = gf_dims_prod(o->dims, 0, ax);
    p->n = (size_t)o->dims[ax];
    p->post = gf_dims_prod(o->dims, ax + 1, o->rank);
    p->ni = ind->nelem;
    if (g->nelem != p->pre * p->ni * p->post)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has %zu elements, expected %zu", g->nelem,
                               p->pre * p->ni * p->post);
    return ind->host ? gf_check_indices(a, ind, (int64_t)p->n, ax) : GF_OK;
}

size_t gf_dev_gather_grad_workspace(const struct gf_kernel_args *a, size_t size)
{
    if (a->n_in < 3 || a->n_out < 1)
        return 64;
    const struct gf_tview *o = &a->out[0];
    int64_t ax = gf_node_attr_int(a->node, "axis", 0);
    ax = ax < 0 ? ax + o->rank : ax;
    size_t n = ax >= 0 && ax < o->rank ? (size_t)o->dims[ax] : 0;
    size_t csr = (n + 1 + a->in[2].nelem) * size;
    return csr > 64 ? csr : 64;
}

int64_t *gf_dev_index_csr(const struct gf_tview *ind, size_t n)
{
    size_t ni = ind->nelem;
    int64_t *start = calloc(n + 1 + ni + 1, sizeof(int64_t));
    if (!start)
        return NULL;
    int64_t *order = start + n + 1;
    for (size_t i = 0; i < ni; i++) {
        int64_t k = gf_int_at(ind, ind->host, i);
        start[(k < 0 ? k + (int64_t)n : k) + 1]++;
    }
    for (size_t k = 0; k < n; k++)
        start[k + 1] += start[k];
    for (size_t i = 0; i < ni; i++) { /* start[k] walks to start[k + 1] */
        int64_t k = gf_int_at(ind, ind->host, i);
        k = k < 0 ? k + (int64_t)n : k;
        order[start[k]++] = (int64_t)i;
    }
    for (size_t k = n; k > 0; k--)
        start[k] = start[k - 1];
    start[0] = 0;
    return start;
}

enum gf_status gf_dev_slice_grad_plan(const struct gf_kernel_args *a, int64_t *first,
                                      int64_t *step, int64_t *dims)
{
    enum gf_status st = gf_require_inputs(a, 4);
    if (st || (st = gf_check_shape_input(a, 1)))
        return st;
    const struct gf_tview *g = &a->in[0], *o = &a->out[0];
    int r = o->rank;
    if ((st = gf_check_dtype(a, "output 0", o->dtype, g->dtype)))
        return st;
    if (g->rank != r)
        return gf_kernel_error(a, GF_ERR_INVALID, "dY has rank %d, the data %d", g->rank, r);
    if ((st = gf_slice_plan(a, 2, r, o->dims, first, step, dims)))
        return st;
    for (int d = 0; d < r; d++)
        if (dims[d] != g->dims[d])
            return gf_kernel_error(a, GF_ERR_INVALID, "the slice takes %lld elements on axis "
                                   "%d, dY has %lld", (long long)dims[d], d,
                                   (long long)g->dims[d]);
    return GF_OK;
}

/* ---- the optimizer ops ----------------------------------------------------------- */

/* hyper on the host: the gradient scale with the clipping of an N read on
 * the host (an N on the device is the kernel's); false: the update is
 * skipped. */
static bool host_scale(const struct gf_optim_args *o, float *scale)
{
    if (o->norm && !o->norm_host)
        return isfinite(*scale);
    return gf_clip_scale(*scale, o->norm_host, o->max_norm, scale);
}

/* A skipped update: output k takes input from[k]'s values (in place: nothing). */
static enum gf_status keep_inputs(const struct gf_kernel_args *a, const size_t *from,
                                  size_t n_out)
{
    enum gf_status st = GF_OK;
    for (size_t k = 0; k < n_out && st == GF_OK; k++)
        if (a->out[k].data && a->out[k].data != a->in[from[k]].data)
            st = a->backend->ops->copy(a->backend, a->out[k].data, a->in[from[k]].data,
                                       gf_tview_bytes(&a->out[k]));
    return st;
}

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
        if (!a->in[0].nelem)
            return GF_OK;
        if (!o.hyper)
            return d->sgd(a, &o, NULL);
        gf_sgd_scalars(o.hyper, &s);
        if (!host_scale(&o, &s.grad_scale))
            return keep_inputs(a, (const size_t[]){0, 3}, o.opt ? 2 : 1);
        return d->sgd(a, &o, &s);
    }
    default: { /* AdamWStep */
        struct gf_adamw_scalars s;
        if (!a->in[0].nelem)
            return GF_OK;
        if (!o.hyper)
            return d->adamw(a, &o, NULL);
        gf_adamw_scalars(o.hyper, &s);
        if (!host_scale(&o, &s.grad_scale))
            return keep_inputs(a, (const size_t[]){0, 2, 3}, 3);
        return d->adamw(a, &o, &s);
    }
    }
}
