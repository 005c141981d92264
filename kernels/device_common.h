/*
 * device_common.h — what the two device backends (kernels/cuda,
 * kernels/opencl) share on the host side (internal to kernels/): which
 * types, sizes and ops their kernels take (the supports() rules), the
 * checks a run makes before its launch, and the plans both launches start
 * from (merged axes, reduction splits).  What every backend shares, the
 * CPU's included, is in checks.h.
 *
 *     static const struct gf_dev_ew cl_ew = {
 *         .caps = {.name = "OpenCL", .half = true, .int_index = true},
 *         .unary = un_launch, .isx = isx_launch, .binary = bin_launch, ...};
 *
 *     static enum gf_status ew_run(const struct gf_kernel_args *a)
 *     {
 *         return gf_dev_ew_run(&cl_ew, a); // the checks, then one of cl_ew's launches
 *     }
 *
 * The backends differ where their kernels do, and that is all a caps says.
 * The orders of the enums below are those of CUDA's launchers
 * (kernels/cuda/launch.h; kernels/cuda/elementwise.c asserts them), so CUDA
 * passes them as they are; OpenCL names its kernels from gf_dev_*_name.
 */
#ifndef GF_DEVICE_COMMON_H
#define GF_DEVICE_COMMON_H

#include "checks.h"

/* What a device backend's kernels take. */
struct gf_dev_caps {
    const char *name; /* "CUDA", "OpenCL": in messages */
    bool half;        /* the float ops take fp16 and bf16 storage, not only fp32 */
    bool int_index;   /* kernels index with int: tensors of fewer than 2^31 elements */
};

/* ---- devices --------------------------------------------------------------------- */

#define GF_DEV_MAX_OPEN 32 /* devices a backend keeps open at once */

/* The backend (ops) of its device `dev`: the one opened before, else a new
 * one (ops and n_threads 1 set) that open_dev opens, kept until exit.
 * Errors name the backend (title: "CUDA", and ops->name). */
enum gf_status gf_dev_open_once(const struct gf_backend_ops *ops, const char *title, int dev,
                                enum gf_status (*open_dev)(struct gf_backend *be, int dev),
                                struct gf_backend **out);
/* Appends 'name' to the list names[size] ("'A', 'B'") while it fits: the
 * devices a "no device matching" message offers. */
void gf_dev_name_list(char *names, size_t size, const char *name);

/* ---- element types ------------------------------------------------------------ */

/* fp32, and fp16 / bf16 where c->half. */
bool gf_dev_float(const struct gf_dev_caps *c, enum gf_dtype t);
/* n elements are within the kernels' indexing. */
bool gf_dev_fits(const struct gf_dev_caps *c, size_t n);
/* Every input and output of a is within the kernels' indexing; else
 * GF_ERR_UNSUPPORTED naming the first that is not. */
enum gf_status gf_dev_check_sizes(const struct gf_kernel_args *a, const struct gf_dev_caps *c);
/* Bytes of an element the type-generic kernels (copies, Where, layout)
 * move: 1, 2, 4 or 8; 0 for a type they cannot. */
size_t gf_dev_move_size(enum gf_dtype t);
/* That size as the suffix of a type-generic kernel's name ("1" .. "8"),
 * NULL for none. */
const char *gf_dev_size_sfx(enum gf_dtype t);
/* The types of the typed kernels (Cast, the binary ops). */
enum gf_dev_type { GF_DEV_F32, GF_DEV_F16, GF_DEV_BF16, GF_DEV_I64, GF_DEV_I32, GF_DEV_U8,
                   GF_DEV_B8, GF_DEV_N_TYPES };
/* t's gf_dev_type, -1 for one no kernel takes. */
int gf_dev_type_of(enum gf_dtype t);
/* Input i is absent, empty, or has a host copy (a shape-like input). */
bool gf_dev_host_or_empty(const struct gf_tview *in, size_t n_in, size_t i);

/* ---- merged axes ------------------------------------------------------------------ */

/* An N-d walk over dims[rank] for n (at most 4) operands whose element
 * strides are st[k][0..rank): size-1 axes dropped, an axis joined to the
 * one outside it when every operand is contiguous across the pair (so
 * same-shape operands give one axis).  The merged axes go to mdims[0..r),
 * the operands' strides to mst[k][0..r), outermost first; returns r, 1
 * with mdims[0] = 1 and strides 0 when every axis has size 1. */
int gf_nd_merge(int rank, const int64_t *dims, int n, const int64_t st[][GF_MAX_RANK],
                int64_t *mdims, int64_t mst[][GF_MAX_RANK]);

/* ---- the elementwise family -------------------------------------------------------- */

/* The unary ops, and the activation gradients (dY, v) -> dX. */
enum gf_dev_unary { GF_DEV_NEG, GF_DEV_SQRT, GF_DEV_RECIP, GF_DEV_EXP, GF_DEV_LOG, GF_DEV_TANH,
                    GF_DEV_ABS, GF_DEV_ERF, GF_DEV_SIN, GF_DEV_COS, GF_DEV_FLOOR, GF_DEV_CEIL,
                    GF_DEV_RELU, GF_DEV_SIGMOID, GF_DEV_SOFTPLUS, GF_DEV_GELU,
                    GF_DEV_GELU_TANH, GF_DEV_NOT };
enum gf_dev_grad { GF_DEV_RELU_GRAD, GF_DEV_SIGMOID_GRAD, GF_DEV_TANH_GRAD, GF_DEV_GELU_GRAD,
                   GF_DEV_GELU_TANH_GRAD };
/* op is an activation gradient (its code a gf_dev_grad). */
bool gf_dev_is_act_grad(enum gf_op op);
/* The function's name ("neg", "gelu_tanh"; grad: of the gf_dev_grad). */
const char *gf_dev_unary_name(int op, bool grad);

/* The binary ops (comparisons and logic write bool). */
enum gf_dev_binary { GF_DEV_ADD, GF_DEV_SUB, GF_DEV_MUL, GF_DEV_DIV, GF_DEV_POW, GF_DEV_MAX,
                     GF_DEV_MIN, GF_DEV_EQ, GF_DEV_LT, GF_DEV_LE, GF_DEV_GT, GF_DEV_GE,
                     GF_DEV_AND, GF_DEV_OR, GF_DEV_XOR };
struct gf_dev_binop {
    enum gf_op op;
    enum gf_dev_binary code;
    const char *name; /* "add", "eq" */
    unsigned types;   /* 1: the float types, 2: int64 and int32, 4: bool */
    bool bool_out;    /* the others are arithmetic (float flat kernels on OpenCL) */
};
/* The kernel type (gf_dev_type) op computes operands of type t in, -1 when
 * it has none for t (every float type is GF_DEV_F32). */
int gf_dev_bin_type(const struct gf_dev_caps *c, const struct gf_dev_binop *op,
                    enum gf_dtype t);

/* Clip's bounds: a one-element tensor each when given (its data: *_t, read
 * by the kernel), else the attribute of opsets before 11, else +-FLT_MAX. */
struct gf_dev_clip {
    void *lo_t, *hi_t;
    float lo, hi;
};

/* A device backend's elementwise kernels: its caps and its launches, each
 * called once the node has passed the checks (gf_dev_ew_run) with a
 * non-empty output; x is input 0, y output 0. */
struct gf_dev_ew {
    struct gf_dev_caps caps;
    /* y = f(x), f the gf_dev_unary op; or, with two inputs, the activation
     * gradient dX = dY * f'(v), f the gf_dev_grad op */
    enum gf_status (*unary)(const struct gf_kernel_args *a, int op);
    /* IsNaN, IsInf (attributes detect_negative, detect_positive): bool y */
    enum gf_status (*isx)(const struct gf_kernel_args *a);
    /* y = op(x, b), both broadcast to y (their strides st[0] and st[1]; st[2]
     * is 0); x may be y itself (Max / Min of more than two), b Pow's fp32
     * exponent of a half x */
    enum gf_status (*binary)(const struct gf_kernel_args *a, const struct gf_dev_binop *op,
                             const struct gf_tview *x, const struct gf_tview *b,
                             const int64_t st[3][GF_MAX_RANK]);
    enum gf_status (*clip)(const struct gf_kernel_args *a, const struct gf_dev_clip *b);
    /* Where(C, X, Y): elements of `size` bytes, the operands' strides st */
    enum gf_status (*where)(const struct gf_kernel_args *a, size_t size,
                            const int64_t st[3][GF_MAX_RANK]);
    /* y = (y's type) x, both gf_dev_types, of different types; trunc: fp32 ->
     * bf16 truncates (opsets before 19) */
    enum gf_status (*cast)(const struct gf_kernel_args *a, bool trunc);
};

/* The ops a device backend registers as elementwise kernels, X(OP, IMPL,
 * DT): impl "<prefix>_IMPL" for dtype GF_DT (the registry's filter); every
 * one with supports gf_dev_ew_supports and run gf_dev_ew_run. */
#define GF_DEV_EW_OPS(X)                                                                    \
    X(NEG, unary, UNDEFINED) X(SQRT, unary, UNDEFINED) X(RECIPROCAL, unary, UNDEFINED)      \
    X(EXP, unary, UNDEFINED) X(LOG, unary, UNDEFINED) X(TANH, unary, UNDEFINED)             \
    X(ABS, unary, UNDEFINED) X(ERF, unary, UNDEFINED) X(SIN, unary, UNDEFINED)              \
    X(COS, unary, UNDEFINED) X(FLOOR, unary, UNDEFINED) X(CEIL, unary, UNDEFINED)           \
    X(RELU, unary, UNDEFINED) X(SIGMOID, unary, UNDEFINED) X(SOFTPLUS, unary, UNDEFINED)    \
    X(GELU, unary, UNDEFINED) X(CLIP, clip, UNDEFINED) X(NOT, unary, BOOL)                  \
    X(IS_NAN, isx, UNDEFINED) X(IS_INF, isx, UNDEFINED) X(ADD, binary, UNDEFINED)           \
    X(SUB, binary, UNDEFINED) X(MUL, binary, UNDEFINED) X(DIV, binary, UNDEFINED)           \
    X(POW, binary, UNDEFINED) X(MAX, binary, UNDEFINED) X(MIN, binary, UNDEFINED)           \
    X(EQUAL, binary, UNDEFINED) X(LESS, binary, UNDEFINED)                                  \
    X(LESS_OR_EQUAL, binary, UNDEFINED) X(GREATER, binary, UNDEFINED)                       \
    X(GREATER_OR_EQUAL, binary, UNDEFINED) X(AND, binary, UNDEFINED)                        \
    X(OR, binary, UNDEFINED) X(XOR, binary, UNDEFINED) X(WHERE, where, UNDEFINED)           \
    X(CAST, cast, UNDEFINED) X(CAST_LIKE, cast, UNDEFINED) X(IDENTITY, copy, UNDEFINED)     \
    X(RELU_GRAD, act_grad, UNDEFINED) X(SIGMOID_GRAD, act_grad, UNDEFINED)                  \
    X(TANH_GRAD, act_grad, UNDEFINED) X(GELU_GRAD, act_grad, UNDEFINED)

/* supports() of every op of GF_DEV_EW_OPS: the types (unary and the
 * activation gradients: float, Not bool; binary: one type the op has, but
 * a half Pow base with an fp32 exponent, integer Div's divisor on the host;
 * Where, Identity: any movable type; Cast: between gf_dev_types) and sizes
 * of d's kernels. */
bool gf_dev_ew_supports(const struct gf_dev_ew *d, const struct gf_node *n,
                        const struct gf_tview *in, size_t n_in);
/* run() of every op of GF_DEV_EW_OPS: the checks (messages as the CPU's),
 * nothing more for an empty output, then d's launch (Identity, Cast to
 * the same type, Max / Min of one input: a device copy; Max / Min of more:
 * binary on in 0 and in 1, then on the output and in k, in order). */
enum gf_status gf_dev_ew_run(const struct gf_dev_ew *d, const struct gf_kernel_args *a);

/* ---- reductions ------------------------------------------------------------------- */

/* Input i (`name` in messages) is present, with data, and of the op's float
 * type: input 0's, one c's kernels take. */
enum gf_status gf_dev_check_float_in(const struct gf_kernel_args *a, const struct gf_dev_caps *c,
                                     size_t i, const char *name);
/* Reduce{Sum,Mean,Max} SumToShape: a float input 0 of at most GF_MAX_RANK
 * axes, its axes (shape) input on the host. */
bool gf_dev_reduce_supports(const struct gf_dev_caps *c, const struct gf_node *n,
                            const struct gf_tview *in, size_t n_in);
/* Softmax LogSoftmax and their Grads: a float input 0 of at most
 * GF_MAX_RANK axes. */
bool gf_dev_rows_supports(const struct gf_dev_caps *c, const struct gf_node *n,
                          const struct gf_tview *in, size_t n_in);

/* The reductions of the kernels, in the order both take them. */
enum gf_dev_red { GF_DEV_RED_SUM, GF_DEV_RED_MEAN, GF_DEV_RED_MAX };
/* x seen as kept x reduced axes: runs of adjacent axes of one kind merged,
 * size-1 axes dropped; outermost first, element strides of x.  Each of the
 * nout outputs reduces nred inputs. */
struct gf_red_plan {
    int nk, nr;
    int64_t kdim[GF_MAX_RANK], kstr[GF_MAX_RANK], rdim[GF_MAX_RANK], rstr[GF_MAX_RANK];
    int64_t nout, nred;
};
void gf_red_plan(const struct gf_tview *x, const bool *reduce, struct gf_red_plan *p);

/* Rows along one axis: rows of n elements `inner` apart. */
struct gf_dev_rows {
    size_t n, inner, rows;
};

/* A device backend's reductions: its caps and its launches, each called
 * once the node has passed the checks (gf_dev_reduce_run). */
struct gf_dev_reduce {
    struct gf_dev_caps caps;
    /* Reduce{Sum,Mean,Max} SumToShape: output 0 = the gf_dev_red op of
     * input 0 over the axes red (output 0 not yet checked) */
    enum gf_status (*reduce)(const struct gf_kernel_args *a, const bool *red, int op);
    /* Softmax LogSoftmax (Y from X), SoftmaxGrad LogSoftmaxGrad (dX from
     * dY, Y) along the rows r of input 0, which has elements */
    enum gf_status (*rows)(const struct gf_kernel_args *a, const struct gf_dev_rows *r);
};
/* run() of Reduce{Sum,Mean,Max} (the axes: input 1 on the host, or the
 * attribute), SumToShape (X summed over its leading axes and those where
 * the target is 1), Softmax LogSoftmax (before opset 13 along the coerced
 * [prod(dims[:axis]), prod(dims[axis:])]) and their Grads: the checks,
 * then d's launch. */
enum gf_status gf_dev_reduce_run(const struct gf_dev_reduce *d, const struct gf_kernel_args *a);

/* ---- the layout family --------------------------------------------------------------- */

/* The layout ops' supports() but for the backward ops' types and each
 * backend's own rules: input 0 of a movable type, every input within c's
 * indexing, shape-like inputs (Reshape's shape, Slice's starts ..., Pad's
 * pads and axes, SliceGrad's and GatherGrad's shape) with a host copy of
 * an index type, Concat's inputs of one type, the indices of Gather and
 * GatherGrad ints. */
bool gf_dev_layout_supports(const struct gf_dev_caps *c, const struct gf_node *n,
                            const struct gf_tview *in, size_t n_in);
/* Reshape Flatten Squeeze Unsqueeze: the output's shape and type checked,
 * then a device copy. */
enum gf_status gf_dev_view_run(const struct gf_kernel_args *a);

/* Transpose, Slice, Expand as one strided walk: output 0 (dims[rank],
 * checked) reads input 0 from element base with strides sx. */
enum gf_status gf_dev_transpose_walk(const struct gf_kernel_args *a, int64_t *dims, int64_t *sx);
enum gf_status gf_dev_slice_walk(const struct gf_kernel_args *a, int64_t *dims, int64_t *base,
                                 int64_t *sx);
enum gf_status gf_dev_expand_walk(const struct gf_kernel_args *a, int *rank, int64_t *dims,
                                  int64_t *sx);

/* Pad: output element i on axis d reads the input at crop[d] + (i - lead[d])
 * where that is inside [0, keep[d]) (strides sx), else by mode (PAD_*:
 * constant fill, reflect, edge, wrap). */
struct gf_dev_pad {
    int rank, mode;
    int64_t dims[GF_MAX_RANK], lead[GF_MAX_RANK], crop[GF_MAX_RANK];
    int64_t keep[GF_MAX_RANK], sx[GF_MAX_RANK];
    uint64_t fill; /* the fill value's bytes: constant_value (on the host), or the
                    * float attribute `value` of old opsets */
};
enum gf_status gf_dev_pad_plan(const struct gf_kernel_args *a, struct gf_dev_pad *p);

/* Gather's workspace: the flag word the kernel sets for a bad index when
 * the indices have no host copy (declared either way, so the size does not
 * depend on what the executor has on the host). */
size_t gf_dev_gather_workspace(const struct gf_kernel_args *a);
/* GatherND's workspace: a data offset of `size` bytes per index tuple (64
 * bytes at least), and the offset of tuple t (the indices read on the
 * host, checked by gf_gather_nd_plan). */
size_t gf_dev_gather_nd_workspace(const struct gf_kernel_args *a, size_t size);
size_t gf_dev_nd_tuple_offset(const struct gf_nd_plan *p, const struct gf_tview *x,
                              const struct gf_tview *ind, const int64_t *xs, size_t t);

/* GatherGrad(dY, shape, indices) -> output [pre, n, post] from dY [pre,
 * ni, post]: the checks (dY of a float type c's kernels take; the indices
 * too where they are on the host). */
struct gf_dev_gather_grad {
    int axis;
    size_t pre, n, post, ni;
};
enum gf_status gf_dev_gather_grad_plan(const struct gf_kernel_args *a,
                                       const struct gf_dev_caps *c,
                                       struct gf_dev_gather_grad *p);
/* GatherGrad's workspace: the indices' CSR (n + 1 + ni entries of `size`
 * bytes), 64 bytes at least (room for a flag word). */
size_t gf_dev_gather_grad_workspace(const struct gf_kernel_args *a, size_t size);
/* The CSR of indices on the host for an axis of n: start[n + 1] (the first
 * position in order[] of each value), then order[ni] (the positions of
 * each value in increasing order); malloc'd, NULL when out of memory. */
int64_t *gf_dev_index_csr(const struct gf_tview *ind, size_t n);

/* SliceGrad(dY, shape, starts, ends, axes?, steps?) -> the data's shape:
 * the checks, and per axis the slice's first element, step and count
 * (dY's dims). */
enum gf_status gf_dev_slice_grad_plan(const struct gf_kernel_args *a, int64_t *first,
                                      int64_t *step, int64_t *dims);

/* ---- the fused activations ---------------------------------------------------------- */

/* The fused activations both device backends register, X(OP, KIND, RUN):
 * impl "<prefix>KIND" run by the backend's RUN (glu_run, glu_grad_run,
 * rope_run; checks: gf_glu_check, gf_glu_grad_check, gf_rope_check). */
#define GF_DEV_ACT_OPS(X)                                                                   \
    X(SWIGLU, elementwise, glu_run) X(GEGLU, elementwise, glu_run)                          \
    X(SILU, elementwise, glu_run) X(FUSED_GELU, elementwise, glu_run)                       \
    X(SWIGLU_GRAD, elementwise, glu_grad_run) X(GEGLU_GRAD, elementwise, glu_grad_run)      \
    X(ROPE, rows, rope_run) X(ROPE_GRAD, rows, rope_run)

/* ---- the optimizer ops ----------------------------------------------------------- */

struct gf_sgd_scalars;
struct gf_adamw_scalars;

/* A device backend's optimizer kernels (kernels/optim_ops.h), each called
 * once the node has passed gf_optim_check (o) and has elements to update.
 * The updates get the scalars computed on the host (s), whose grad_scale
 * already holds the clipping of an N read on the host; s is NULL when
 * hyper is device memory only (o->hyper NULL: the kernel computes them on
 * the device when it runs), and an N without a host copy (o->norm,
 * o->norm_host NULL) is applied on the device (gf_clip_scale there; a
 * backend whose supports() asks for host copies never sees either).  An
 * update the host knows to skip is not called: the outputs keep the
 * inputs' values. */
struct gf_dev_optim {
    /* GradAccumulate: Y = (Acc where o->opt, else 0) + G * scale, G read
     * transposed with o->r.transpose (dims within int) */
    enum gf_status (*acc)(const struct gf_kernel_args *a, const struct gf_optim_args *o);
    /* GradNorm: output 0 = the norm of input 0 (empty: 0; called for it too) */
    enum gf_status (*norm)(const struct gf_kernel_args *a);
    /* SGDStep, with a momentum buffer where o->opt */
    enum gf_status (*sgd)(const struct gf_kernel_args *a, const struct gf_optim_args *o,
                          const struct gf_sgd_scalars *s);
    enum gf_status (*adamw)(const struct gf_kernel_args *a, const struct gf_optim_args *o,
                            const struct gf_adamw_scalars *s);
};
/* run() of GradAccumulate GradNorm SGDStep AdamWStep: the checks, then d's
 * kernel. */
enum gf_status gf_dev_optim_run(const struct gf_dev_optim *d, const struct gf_kernel_args *a);

#endif /* GF_DEVICE_COMMON_H */
