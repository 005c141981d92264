/*
 * device_common.h — what the two device backends (kernels/cuda,
 * kernels/opencl) share on the host side (internal to kernels/): which
 * types, sizes and ops their kernels take (the supports() rules), the
 * checks a run makes before its launch, and the plans both launches start
 * from.  What every backend shares, the
 * CPU's included, is in checks.h.
 *
 *     static const struct gf_dev_caps caps = {.name = "OpenCL", .half = true,
 *                                             .int_index = true};
 *
 *     static bool ew_supports(const struct gf_node *n, const struct gf_tview *in,
 *                             size_t n_in)
 *     {
 *         return gf_dev_ew_supports(&caps, n, in, n_in);
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

/* ---- element types ------------------------------------------------------------ */

/* fp32, and fp16 / bf16 where c->half. */
bool gf_dev_float(const struct gf_dev_caps *c, enum gf_dtype t);
/* n elements are within the kernels' indexing. */
bool gf_dev_fits(const struct gf_dev_caps *c, size_t n);
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
/* ---- the elementwise family -------------------------------------------------------- */

/* The ops both device backends register as elementwise kernels:
 * X(OP, IMPL, RUN, DT): the backend's kernel impl "<prefix>_IMPL" runs with
 * its RUN_run for dtype GF_DT (the registry's filter); supports() is
 * gf_dev_ew_supports for every one. */
#define GF_DEV_EW_OPS(X)                                                                    \
    X(NEG, unary, un, UNDEFINED) X(SQRT, unary, un, UNDEFINED)                              \
    X(RECIPROCAL, unary, un, UNDEFINED) X(EXP, unary, un, UNDEFINED)                        \
    X(LOG, unary, un, UNDEFINED) X(TANH, unary, un, UNDEFINED) X(ABS, unary, un, UNDEFINED) \
    X(ERF, unary, un, UNDEFINED) X(SIN, unary, un, UNDEFINED) X(COS, unary, un, UNDEFINED)  \
    X(FLOOR, unary, un, UNDEFINED) X(CEIL, unary, un, UNDEFINED)                            \
    X(RELU, unary, un, UNDEFINED) X(SIGMOID, unary, un, UNDEFINED)                          \
    X(SOFTPLUS, unary, un, UNDEFINED) X(GELU, unary, un, UNDEFINED)                         \
    X(CLIP, clip, clip, UNDEFINED) X(NOT, unary, un, BOOL)                                  \
    X(IS_NAN, isx, isx, UNDEFINED) X(IS_INF, isx, isx, UNDEFINED)                           \
    X(ADD, binary, bin, UNDEFINED) X(SUB, binary, bin, UNDEFINED)                           \
    X(MUL, binary, bin, UNDEFINED) X(DIV, binary, bin, UNDEFINED)                           \
    X(POW, binary, bin, UNDEFINED) X(MAX, binary, bin, UNDEFINED)                           \
    X(MIN, binary, bin, UNDEFINED) X(EQUAL, binary, bin, UNDEFINED)                         \
    X(LESS, binary, bin, UNDEFINED) X(LESS_OR_EQUAL, binary, bin, UNDEFINED)                \
    X(GREATER, binary, bin, UNDEFINED) X(GREATER_OR_EQUAL, binary, bin, UNDEFINED)          \
    X(AND, binary, bin, UNDEFINED) X(OR, binary, bin, UNDEFINED)                            \
    X(XOR, binary, bin, UNDEFINED) X(WHERE, where, where, UNDEFINED)                        \
    X(CAST, cast, cast, UNDEFINED) X(CAST_LIKE, cast, cast, UNDEFINED)                      \
    X(IDENTITY, copy, identity, UNDEFINED) X(RELU_GRAD, act_grad, un, UNDEFINED)            \
    X(SIGMOID_GRAD, act_grad, un, UNDEFINED) X(TANH_GRAD, act_grad, un, UNDEFINED)          \
    X(GELU_GRAD, act_grad, un, UNDEFINED)

/* supports() of every op of GF_DEV_EW_OPS: the types (unary and the
 * activation gradients: float, Not bool; binary: one type the op has, but
 * a half Pow base with an fp32 exponent, integer Div's divisor on the host;
 * Where, Identity: any movable type; Cast: between gf_dev_types) and sizes
 * of c's kernels. */
bool gf_dev_ew_supports(const struct gf_dev_caps *c, const struct gf_node *n,
                        const struct gf_tview *in, size_t n_in);
/* gf_ew_begin, and an output within c's indexing. */
enum gf_status gf_dev_ew_begin(const struct gf_kernel_args *a, const struct gf_dev_caps *c,
                               size_t n_in, bool *empty);

/* The unary ops, and the activation gradients (dY, v) -> dX. */
enum gf_dev_unary { GF_DEV_NEG, GF_DEV_SQRT, GF_DEV_RECIP, GF_DEV_EXP, GF_DEV_LOG, GF_DEV_TANH,
                    GF_DEV_ABS, GF_DEV_ERF, GF_DEV_SIN, GF_DEV_COS, GF_DEV_FLOOR, GF_DEV_CEIL,
                    GF_DEV_RELU, GF_DEV_SIGMOID, GF_DEV_SOFTPLUS, GF_DEV_GELU,
                    GF_DEV_GELU_TANH, GF_DEV_NOT };
enum gf_dev_grad { GF_DEV_RELU_GRAD, GF_DEV_SIGMOID_GRAD, GF_DEV_TANH_GRAD, GF_DEV_GELU_GRAD,
                   GF_DEV_GELU_TANH_GRAD };
/* run()'s checks of a unary op (x -> y, one type) or an activation gradient
 * (two inputs of one type and size); *op: its gf_dev_unary or gf_dev_grad
 * (Gelu's by its approximate attribute); *empty: nothing to do. */
enum gf_status gf_dev_unary_check(const struct gf_kernel_args *a, const struct gf_dev_caps *c,
                                  bool *empty, int *op);
/* The function's name ("neg", "gelu_tanh"; grad: of the gf_dev_grad). */
const char *gf_dev_unary_name(int op, bool grad);
/* op is an activation gradient (its code a gf_dev_grad). */
bool gf_dev_is_act_grad(enum gf_op op);
/* IsNaN IsInf: run()'s checks (a float in, bool out of its size). */
enum gf_status gf_dev_isx_check(const struct gf_kernel_args *a, const struct gf_dev_caps *c,
                                bool *empty);

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
/* out = op(x, b) over the output, x and b broadcast to it (their strides
 * st[0] and st[1]; st[2] is 0); b may be Pow's fp32 exponent of a half x. */
typedef enum gf_status (*gf_dev_pair_fn)(const struct gf_kernel_args *a,
                                         const struct gf_dev_binop *op,
                                         const struct gf_tview *x, const struct gf_tview *b,
                                         const int64_t st[3][GF_MAX_RANK]);
/* The run of the binary ops and of variadic Max / Min: the checks, Max /
 * Min of one input copied, integer Div's divisor (on the host), then
 * pair(in 0, in 1) and pair(out, in k) for Max / Min of more, in order. */
enum gf_status gf_dev_binary_run(const struct gf_kernel_args *a, const struct gf_dev_caps *c,
                                 gf_dev_pair_fn pair);

/* Clip's bounds: a one-element tensor each when given (its data: *_t, read
 * by the kernel), else the attribute of opsets before 11, else +-FLT_MAX. */
struct gf_dev_clip {
    void *lo_t, *hi_t;
    float lo, hi;
};
enum gf_status gf_dev_clip_check(const struct gf_kernel_args *a, const struct gf_dev_caps *c,
                                 bool *empty, struct gf_dev_clip *b);
/* Where(C, X, Y): run()'s checks, the element size and the three operands'
 * strides over the output. */
enum gf_status gf_dev_where_check(const struct gf_kernel_args *a, const struct gf_dev_caps *c,
                                  bool *empty, size_t *size, int64_t st[3][GF_MAX_RANK]);
/* Cast CastLike: run()'s checks; *done: nothing left to launch (an empty
 * output, or one type: copied); else input 0 and output 0 are of
 * gf_dev_types and *trunc says fp32 -> bf16 truncates (opsets before 19). */
enum gf_status gf_dev_cast_check(const struct gf_kernel_args *a, const struct gf_dev_caps *c,
                                 bool *done, bool *trunc);
/* Identity: a device copy. */
enum gf_status gf_dev_identity_run(const struct gf_kernel_args *a, const struct gf_dev_caps *c);

#endif /* GF_DEVICE_COMMON_H */
