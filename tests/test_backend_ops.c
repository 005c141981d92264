/*
 * test_backend_ops.c — one op test harness for every backend (ggml's
 * test-backend-ops is the model).  Each op, fused op, gradient op and
 * optimizer op is described once in `cases` below: its attributes, its
 * inputs (dtype, shape, how the values are made), its outputs (shapes by
 * the project's shape inference on a one-node graph), tolerances and the
 * float types to run it in.  Every case runs on every backend besides the
 * CPU that is available here (tests/backend_util.h) and is compared with
 * the CPU kernel on the same inputs; fp16 / bf16 runs compare with the
 * CPU's own half kernel where it has one, else with the CPU's fp32 kernel
 * on the inputs widened to fp32 (tests/backend_half.h).  A case whose op
 * the backend has no kernel for is "not supported" (summed up at the end,
 * not failed).  A new backend inherits the whole table.
 *
 * Coverage is a test too (test_coverage, last): every op a backend under
 * test registers a kernel for (gf_kernel_list) must have a case here, and
 * one of its cases must have run on that backend, else it fails naming
 * the op ("new kernel without a harness case").
 *
 * The thorough per-family tests (odd shapes by the dozen, attribute
 * variants, config sweeps, error paths, in-place runs) are the
 * test_backend_*.c files, on every backend too; this table is the
 * catalogue.  Its shapes are theirs where it can (7 x 33, 1000, 4099,
 * 7 x 1000 ...), so that on PoCL the compiled programs are shared.
 *
 * Adding a case: one line in `cases` (docs/backends.md, "Testing a
 * backend").  Inputs are a space-separated list of tokens:
 *
 *     T[d0,d1,...]            random values in [-2, 2) (ints: [0, 4), bool: 0/1)
 *     T[dims]~lo,hi           random values in [lo, hi) (ints: integers)
 *     T[dims]~lo,hi!          ... with NaN, +Inf, -Inf among them
 *     T[dims]=v0,v1,...       these values, host-visible (shape-like inputs:
 *                             Reshape's shape, Slice's starts; an initializer
 *                             for shape inference)
 *     T[dims]@...             host-visible random values
 *     -                       an omitted optional input
 *
 * T: f the case's float type (f32, then f16 / bf16 when the case asks),
 * F float32, h float16, B bfloat16, d float64, l int64, i int32, u uint8,
 * b bool.  Outputs: NULL is one output; else one character per output,
 * 'y' present and '-' omitted.  Attributes: "name=i:5 name=f:1e-5
 * name=s:tanh name=I:1,0" (int, float, string, ints).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend_util.h"
#include "backend_half.h"

enum { F32 = 1, F16 = 2, BF16 = 4, HALF = F16 | BF16 };

struct tcase {
    const char *op, *domain;
    const char *attrs;
    const char *ins;
    const char *outs; /* NULL: one output */
    double rtol, atol;
    unsigned dtypes;  /* F32 | F16 | BF16 (0: F32) */
};

#define GF "graphfuse"
#define T_EW 2e-6, 1e-6   /* elementwise: a few ulp */
#define T_RED 1e-5, 1e-5  /* reductions and rows */
#define T_MM 1e-5, 2e-5   /* products over K <= 1000 */

/* An attention mask [Sq 5, Sk 6] whose query row 0 sees no key and row 3
 * one (zero_masked_rows: row 0 gives 0s). */
#define MASK_ROWS                                                                          \
    "f[5,6]=-inf,-inf,-inf,-inf,-inf,-inf,0,0,-inf,0,0,0,0,0,0,0,0,0,-inf,-inf,-inf,-inf,"  \
    "-inf,0,0,-inf,0,-inf,0,-inf"

static const struct tcase cases[] = {
    /* ---- elementwise, binary: broadcasting, odd sizes, every type the ops take */
    {"Add", "", NULL, "f[7,33] f[33]", NULL, T_EW, F32 | HALF},
    {"Add", "", NULL, "f[4099] f[4099]", NULL, T_EW, F32},
    {"Add", "", NULL, "l[7,33] l[33]", NULL, 0, 0, 0},
    {"Add", "", NULL, "f[1] f[]", NULL, T_EW, F32},
    {"Sub", "", NULL, "f[3,1,129] f[7,1]", NULL, T_EW, F32 | HALF},
    {"Sub", "", NULL, "i[1000] i[]", NULL, 0, 0, 0},
    {"Mul", "", NULL, "f[1000] f[1000]", NULL, T_EW, F32 | HALF},
    {"Mul", "", NULL, "f[5,3,16] f[5,1,1]", NULL, T_EW, F32 | HALF},
    {"Add", "", NULL, "f[7,64] f[64]", NULL, T_EW, F32 | HALF},
    {"Mul", "", NULL, "l[7,33] l[7,1]", NULL, 0, 0, 0},
    {"Div", "", NULL, "f[7,33] f[33]~0.5,2", NULL, T_EW, F32 | HALF},
    {"Div", "", NULL, "l[7,33]~-50,50 l[33]~1,9", NULL, 0, 0, 0},
    {"Pow", "", NULL, "f[7,33]~0.5,2 f[33]", NULL, 4e-6, 1e-6, F32 | HALF},
    {"And", "", NULL, "b[7,33] b[33]", NULL, 0, 0, 0},
    {"Or", "", NULL, "b[7,33] b[7,1]", NULL, 0, 0, 0},
    {"Xor", "", NULL, "b[1000] b[1000]", NULL, 0, 0, 0},
    {"Equal", "", NULL, "l[7,33] l[33]", NULL, 0, 0, 0},
    {"Equal", "", NULL, "f[7,33] f[33]", NULL, 0, 0, F32},
    {"Less", "", NULL, "f[7,33] f[33]", NULL, 0, 0, F32 | HALF},
    {"LessOrEqual", "", NULL, "l[1000] l[]", NULL, 0, 0, 0},
    {"Greater", "", NULL, "f[3,1,129] f[7,1]", NULL, 0, 0, F32},
    {"GreaterOrEqual", "", NULL, "i[7,33] i[33]", NULL, 0, 0, 0},
    {"Max", "", NULL, "f[7,33] f[33]", NULL, 0, 0, F32 | HALF},
    {"Min", "", NULL, "f[7,33] f[7,1]", NULL, 0, 0, F32},
    {"Sum", "", NULL, "f[7,33] f[33] f[7,1]", NULL, T_EW, F32 | HALF},
    {"Sum", "", NULL, "f[1000]", NULL, 0, 0, F32},
    /* ---- elementwise, unary */
    {"Sqrt", "", NULL, "f[1000]~0,50", NULL, T_EW, F32 | HALF},
    {"Reciprocal", "", NULL, "f[1000]~0.1,9", NULL, T_EW, F32},
    {"Neg", "", NULL, "f[4099]", NULL, 0, 0, F32 | HALF},
    {"Neg", "", NULL, "l[7,33]~-9,9", NULL, 0, 0, 0},
    {"Abs", "", NULL, "f[1000]", NULL, 0, 0, F32},
    {"Exp", "", NULL, "f[1000]~-6,6", NULL, T_EW, F32 | HALF},
    {"Log", "", NULL, "f[1000]~0.001,50", NULL, T_EW, F32},
    {"Sin", "", NULL, "f[1000]~-6,6", NULL, T_EW, F32},
    {"Cos", "", NULL, "f[1000]~-6,6", NULL, T_EW, F32},
    {"Tanh", "", NULL, "f[1000]~-6,6", NULL, T_EW, F32 | HALF},
    {"Sigmoid", "", NULL, "f[1000]~-90,90", NULL, T_EW, F32 | HALF},
    {"Relu", "", NULL, "f[7,33]", NULL, 0, 0, F32 | HALF},
    {"Softplus", "", NULL, "f[1000]~-6,6", NULL, T_EW, F32},
    {"Erf", "", NULL, "f[1000]~-6,6", NULL, T_EW, F32},
    {"Gelu", "", NULL, "f[1000]~-6,6", NULL, T_EW, F32 | HALF},
    {"Gelu", "", "approximate=s:tanh", "f[1000]~-6,6", NULL, T_EW, F32},
    {"Floor", "", NULL, "f[1000]~-6,6", NULL, 0, 0, F32},
    {"Ceil", "", NULL, "f[1000]~-6,6", NULL, 0, 0, F32},
    {"Not", "", NULL, "b[33]", NULL, 0, 0, 0},
    {"IsNaN", "", NULL, "f[1000]~-6,6!", NULL, 0, 0, F32 | HALF},
    {"IsInf", "", NULL, "f[1000]~-6,6!", NULL, 0, 0, F32},
    {"IsInf", "", "detect_negative=i:0", "f[33]~-6,6!", NULL, 0, 0, F32},
    {"Clip", "", NULL, "f[7,33] f[]=-1 f[]=1.5", NULL, 0, 0, F32 | HALF},
    {"Clip", "", NULL, "f[1000] - f[]=0.5", NULL, 0, 0, F32},
    {"Where", "", NULL, "b[7,33] f[7,33] f[33]", NULL, 0, 0, F32 | HALF},
    {"Where", "", NULL, "b[33] l[7,33] l[]", NULL, 0, 0, 0},
    /* ---- types and plumbing */
    {"Cast", "", "to=i:10", "F[7,33]", NULL, 0, 0, 0},
    {"Cast", "", "to=i:16", "F[1000]", NULL, 0, 0, 0},
    {"Cast", "", "to=i:1", "h[1000]", NULL, 0, 0, 0},
    {"Cast", "", "to=i:7", "F[7,33]~-50,50", NULL, 0, 0, 0},
    {"Cast", "", "to=i:1", "l[7,33]~-50,50", NULL, 0, 0, 0},
    {"Cast", "", "to=i:9", "F[7,33]~-1,1", NULL, 0, 0, 0},
    {"Cast", "", "to=i:6", "b[33]", NULL, 0, 0, 0},
    {"CastLike", "", NULL, "F[7,33] B[1]", NULL, 0, 0, 0},
    {"Identity", "", NULL, "f[7,33]", NULL, 0, 0, F32 | HALF},
    /* ---- matrix products: odd sizes, broadcast batches, transposes, epilogues */
    {"MatMul", "", NULL, "f[17,33] f[33,65]", NULL, T_MM, F32 | HALF},
    {"MatMul", "", NULL, "f[2,1,5,7] f[3,7,9]", NULL, T_MM, F32 | HALF},
    {"MatMul", "", NULL, "f[7,1000] f[1000,3]", NULL, 1e-5, 1e-4, F32},
    {"MatMul", "", NULL, "f[1,1] f[1,1]", NULL, T_MM, F32},
    {"Gemm", "", "transB=i:1 alpha=f:0.5 beta=f:-2", "f[17,33] f[65,33] f[65]", NULL, T_MM,
     F32 | HALF},
    {"Gemm", "", "transA=i:1", "f[33,17] f[33,65]", NULL, T_MM, F32 | HALF},
    {"MatMulEpilogue", GF, "activation=s:gelu", "f[17,33] f[33,65] f[65] f[17,65]", NULL,
     T_MM, F32 | HALF},
    {"MatMulEpilogue", GF, "transB=i:1 alpha=f:0.5 beta=f:2 activation=s:silu",
     "f[3,9,40] f[21,40] f[21] -", NULL, T_MM, F32 | HALF},
    {"MatMulEpilogue", GF, NULL, "f[2,9,40] f[40,24] - f[2,9,24]", NULL, T_MM, F32 | HALF},
    /* ---- layout */
    {"Transpose", "", "perm=I:1,2,0", "f[3,7,33]", NULL, 0, 0, F32 | HALF},
    {"Transpose", "", NULL, "l[7,33]", NULL, 0, 0, 0},
    {"Reshape", "", NULL, "f[7,33] l[2]=33,-1", NULL, 0, 0, F32 | HALF},
    {"Flatten", "", "axis=i:2", "f[3,7,11]", NULL, 0, 0, F32},
    {"Squeeze", "", NULL, "f[7,1,33] l[1]=1", NULL, 0, 0, F32},
    {"Unsqueeze", "", NULL, "f[7,33] l[2]=0,-1", NULL, 0, 0, F32},
    {"Concat", "", "axis=i:1", "f[7,33] f[7,5] f[7,1]", NULL, 0, 0, F32 | HALF},
    {"Concat", "", "axis=i:0", "l[3,33] l[7,33]", NULL, 0, 0, 0},
    {"Split", "", "axis=i:1", "f[7,33] l[2]=10,23", "yy", 0, 0, F32 | HALF},
    {"Split", "", "axis=i:0 num_outputs=i:3", "f[7,33]", "yyy", 0, 0, F32},
    {"Slice", "", NULL, "f[7,33] l[1]=1 l[1]=30 l[1]=1 l[1]=2", NULL, 0, 0, F32 | HALF},
    {"Slice", "", NULL, "f[3,7,33] l[2]=-1,0 l[2]=-8,5 l[2]=1,2 l[2]=-1,1", NULL, 0, 0, F32},
    {"Gather", "", "axis=i:0", "f[37,19] l[2,65]~-37,37", NULL, 0, 0, F32 | HALF},
    {"Gather", "", "axis=i:1", "f[3,33,5] i[4]~0,33", NULL, 0, 0, F32},
    {"GatherND", "", NULL, "f[5,7,33] l[4,2]@~0,5", NULL, 0, 0, F32 | HALF},
    {"Expand", "", NULL, "f[7,1] l[3]=2,7,33", NULL, 0, 0, F32 | HALF},
    {"Pad", "", NULL, "f[7,33] l[4]=1,0,2,3 f[]=0.5", NULL, 0, 0, F32 | HALF},
    {"Pad", "", "mode=s:edge", "f[3,7] l[4]=0,2,1,1", NULL, 0, 0, F32},
    /* ---- reductions, softmax, normalization, losses */
    {"ReduceMean", "", "keepdims=i:1", "f[7,33,5] l[1]=1", NULL, T_RED, F32 | HALF},
    {"ReduceSum", "", "keepdims=i:0", "f[1000,33] l[1]=0", NULL, 1e-5, 1e-4, F32 | HALF},
    {"ReduceSum", "", NULL, "f[3,129]", NULL, 1e-5, 1e-4, F32},
    {"ReduceMax", "", NULL, "f[7,129] l[1]=-1", NULL, 0, 0, F32 | HALF},
    {"ReduceMean", "", NULL, "f[1,1] l[1]=1", NULL, T_RED, F32},
    {"Softmax", "", "axis=i:-1", "f[7,1000]~-8,8", NULL, T_RED, F32 | HALF},
    {"Softmax", "", "axis=i:1", "f[3,33,5]~-8,8", NULL, T_RED, F32},
    {"LogSoftmax", "", NULL, "f[7,33]~-8,8", NULL, T_RED, F32 | HALF},
    {"LayerNormalization", "", "epsilon=f:1e-5", "f[7,1000] f[1000] f[1000]", "yyy", T_RED,
     F32 | HALF},
    {"LayerNormalization", "", "axis=i:1", "f[3,7,33] f[7,33] -", NULL, T_RED, F32 | HALF},
    {"LayerNormalization", "", "axis=i:1", "f[3,7,33] f[1,33] f[33]", NULL, T_RED, F32 | HALF},
    {"SoftmaxCrossEntropyLoss", "", NULL, "f[7,33]~-4,4 l[7]~0,33", NULL, T_RED, F32 | HALF},
    {"SoftmaxCrossEntropyLoss", "", "reduction=s:none ignore_index=i:2",
     "f[7,33,5]~-4,4 l[7,5]~0,33 f[33]~0.5,2", "yy", T_RED, F32},
    {"NegativeLogLikelihoodLoss", "", "reduction=s:sum", "f[7,33]~-4,0 l[7]~0,33 f[33]~0.5,2",
     NULL, T_RED, F32 | HALF},
    /* ---- fused ops (graphfuse) */
    {"RMSNorm", GF, "epsilon=f:1e-5", "f[7,1000] f[1000]~0.5,1.5", NULL, T_RED, F32 | HALF},
    {"RMSNorm", GF, "eps_outside=i:1 weight_offset=f:1", "f[7,33] f[33]", NULL, T_RED,
     F32 | HALF},
    {"RMSNorm", GF, NULL, "f[4,1] f[1]", NULL, T_RED, F32},
    {"AddRMSNorm", GF, "epsilon=f:1e-5", "f[7,1000] f[7,1000] f[1000]", "yy", T_RED,
     F32 | HALF},
    {"LayerNorm", GF, "epsilon=f:1e-5", "f[7,1000]~-2,3 f[1000] f[1000]", "yyy", T_RED,
     F32 | HALF},
    {"AddLayerNorm", GF, "epsilon=f:1e-5", "f[7,33] f[7,33] f[33] f[33]", "yy--", T_RED,
     F32 | HALF},
    {"SwiGLU", GF, NULL, "f[7,33]~-6,6 f[7,33]", NULL, T_EW, F32 | HALF},
    {"SwiGLU", GF, NULL, "f[3,1,5]~-4,4 f[4,1]", NULL, T_EW, F32 | HALF},
    {"GeGLU", GF, "approximate=s:tanh", "f[7,33]~-6,6 f[33]", NULL, T_EW, F32 | HALF},
    {"SiLU", GF, NULL, "f[7,33]~-6,6", NULL, T_EW, F32 | HALF},
    {"Gelu", GF, NULL, "f[7,33]~-6,6", NULL, T_EW, F32 | HALF},
    {"RoPE", GF, NULL, "f[2,3,5,16] f[5,16]~-1,1 f[5,16]~-1,1", NULL, T_RED, F32 | HALF},
    {"RoPE", GF, NULL, "f[2,3,7,8] f[2,1,7,8]~-1,1 f[2,1,7,8]~-1,1", NULL, T_RED,
     F32 | HALF},
    {"SoftmaxCrossEntropy", GF, "reduction=s:mean", "f[7,33]~-8,8 l[7]~0,33", "yyy", T_RED,
     F32 | HALF},
    {"SoftmaxCrossEntropy", GF, "reduction=s:none shift=i:1",
     "f[2,9,33]~-8,8 i[2,9]~0,33 f[33]~0.5,2", "y-y", T_RED, F32},
    {"LinearCrossEntropy", GF, "reduction=s:mean", "f[7,33]~-1,1 f[33,1000]~-1,1 l[7]~0,1000",
     NULL, 1e-4, 1e-4, F32 | HALF},
    {"LinearCrossEntropy", GF, "reduction=s:mean chunk_rows=i:3",
     "f[7,33]~-1,1 f[33,1000]~-1,1 l[7]~0,1000", "yyy", 1e-4, 1e-4, F32 | HALF},
    {"LinearCrossEntropy", GF, "reduction=s:none transB=i:1 chunk_rows=i:3",
     "f[7,33]~-1,1 f[300,33]~-1,1 i[7]~0,300 f[300]", NULL, 1e-4, 1e-4, F32},
    {"JSD", GF, "beta=f:0.5", "f[7,33]~-6,-0.1 f[7,33]~-6,-0.1", NULL, T_RED, F32 | HALF},
    {"Attention", GF, NULL, "f[2,3,7,16]~-1,1 f[2,3,16,33]~-1,1 f[2,3,33,16]~-1,1", NULL,
     T_RED, F32 | HALF},
    {"Attention", GF, "transB=i:1 scale=f:0.25",
     "f[3,33,17]~-1,1 f[3,7,17]~-1,1 f[3,7,5]~-1,1 f[33,7]", NULL, T_RED, F32},
    {"Attention", GF, "transB=i:1 zero_masked_rows=i:1",
     "f[2,5,8]~-1,1 f[2,6,8]~-1,1 f[2,6,4]~-1,1 " MASK_ROWS, NULL, T_RED, F32},
    /* ---- gradient ops */
    {"SumToShape", GF, NULL, "f[1000,33] l[1]=33", NULL, 1e-5, 1e-4, F32 | HALF},
    {"SumToShape", GF, NULL, "f[2,3,4,5] l[3]=3,1,5", NULL, 1e-5, 1e-5, F32},
    {"SoftmaxGrad", GF, "axis=i:-1", "f[7,1000] f[7,1000]~0,1", NULL, T_RED, F32 | HALF},
    {"LogSoftmaxGrad", GF, "axis=i:-1", "f[7,33] f[7,33]~-6,0", NULL, T_RED, F32 | HALF},
    {"ReluGrad", GF, NULL, "f[1000] f[1000]", NULL, 0, 0, F32 | HALF},
    {"SigmoidGrad", GF, NULL, "f[1000] f[1000]~0,1", NULL, T_EW, F32 | HALF},
    {"TanhGrad", GF, NULL, "f[1000] f[1000]~-1,1", NULL, T_EW, F32},
    {"GeluGrad", GF, NULL, "f[1000] f[1000]~-6,6", NULL, 1e-5, 1e-6, F32 | HALF},
    {"GatherGrad", GF, NULL, "f[2,65,19] l[2]=37,19 l[2,65]~-37,37", NULL, 0, 0, F32 | HALF},
    {"GatherGrad", GF, "axis=i:1", "f[3,4,5] l[3]=3,6,5 i[4]@~-6,6", NULL, 0, 0, F32},
    {"SliceGrad", GF, NULL, "f[7,15] l[2]=7,33 l[1]=1 l[1]=30 l[1]=1 l[1]=2", NULL, 0, 0,
     F32 | HALF},
    {"LayerNormalizationGrad", GF, NULL, "f[7,1000] f[7,1000] f[1000]", "yyy", 1e-5, 1e-4,
     F32 | HALF},
    {"SoftmaxCrossEntropyLossGrad", GF, NULL, "f[] f[7,33]~-4,4 l[7]~0,33", NULL, T_RED,
     F32 | HALF},
    {"SoftmaxCrossEntropyLossGrad", GF, "reduction=s:none ignore_index=i:3",
     "f[7] f[7,33]~-4,4 l[7]~0,33 f[33]~0.5,2", NULL, T_RED, F32},
    {"NLLLossGrad", GF, NULL, "f[] l[2]=7,33 l[7]~0,33", NULL, T_RED, F32 | HALF},
    {"RMSNormGrad", GF, "epsilon=f:1e-5", "f[7,1000]~-1,1 f[7,1000] f[1000]~0.5,1.5", "yy", 1e-5,
     5e-5, F32 | HALF},
    {"RMSNormGrad", GF, "epsilon=f:1e-5", "f[7,33]~-1,1 f[7,33] f[33]~0.5,1.5", "yy", 1e-5,
     5e-5, F32 | HALF},
    {"SwiGLUGrad", GF, NULL, "f[7,33]~-1,1 f[7,33]~-6,6 f[7,33]", "yy", 1e-5, 4e-6, F32 | HALF},
    {"GeGLUGrad", GF, "approximate=s:tanh", "f[7,33]~-1,1 f[7,33]~-6,6 f[7,33]", "yy", 1e-5,
     4e-6, F32 | HALF},
    {"RoPEGrad", GF, NULL, "f[2,3,5,16] f[5,16]~-1,1 f[5,16]~-1,1", NULL, T_RED, F32 | HALF},
    {"LayerNormGrad", GF, "epsilon=f:1e-5", "f[7,1000]~-1,1 f[7,1000]~-2,3 f[1000]", "yyy",
     1e-5, 5e-5, F32 | HALF},
    {"MatMulEpilogueGrad", GF, "activation=s:gelu beta=f:0.5", "f[2,7,33]~-1,1 f[2,7,33]~-5,5",
     "yy", 1e-5, 5e-5, F32 | HALF},
    {"CrossEntropyGrad", GF, "reduction=s:mean", "f[] f[7,33]~-1,1", NULL, T_RED, F32 | HALF},
    {"JSDGrad", GF, "beta=f:0.5", "f[1]~0.5,2 f[7,33]~-6,0 f[7,33]~-6,0", "yy", T_RED,
     F32 | HALF},
    {"AttentionGrad", GF, NULL,
     "f[2,3,7,16]~-1,1 f[2,3,7,16]~-1,1 f[2,3,16,33]~-1,1 f[2,3,33,16]~-1,1 - "
     "f[2,3,7,16]~-1,1",
     "yyy", 1e-4, 1e-5, F32 | HALF},
    {"AttentionGrad", GF, "transB=i:1 zero_masked_rows=i:1",
     "f[2,5,4]~-1,1 f[2,5,8]~-1,1 f[2,6,8]~-1,1 f[2,6,4]~-1,1 " MASK_ROWS " f[2,5,4]~-1,1",
     "yyy", 1e-4, 1e-5, F32},
    /* ---- optimizer ops (fp32 state; hyper float64 on the host: kernels/optim_ops.h) */
    {"GradAccumulate", GF, "scale=f:0.5", "F[1000] F[1000]", NULL, 0, 0, 0},
    {"GradAccumulate", GF, "transpose=i:1", "F[33,7] F[7,33]", NULL, 0, 0, 0},
    {"GradAccumulate", GF, NULL, "F[4099]", NULL, 0, 0, 0},
    {"GradNorm", GF, NULL, "F[4099]", NULL, 1e-12, 0, 0},
    {"SGDStep", GF, NULL, "F[1000] F[1000] d[7]=0.1,0,0,0,0,3,1", "y-", 0, 0, 0},
    {"SGDStep", GF, NULL, "F[1000] F[1000] d[7]=0.1,0.9,0.1,0.01,0,3,0.5 F[1000]", "yy", 0, 0,
     0},
    {"SGDStep", GF, NULL, "F[1000] F[1000] d[7]=0.1,0.9,0,0,1,0,1 F[1000]", "yy", 0, 0, 0},
    {"AdamWStep", GF, NULL, "F[1000] F[1000] F[1000] F[1000]~0,1 d[7]=1e-3,0.9,0.999,1e-8,0.01,3,1",
     "yyy", 0, 0, 0},
    {"AdamWStep", GF, NULL, "F[33] F[33] F[33] F[33]~0,1 d[7]=1e-2,0.9,0.99,1e-6,0,0,0.25",
     "yyy", 0, 0, 0},
    /* N (GradNorm's output): clipped to max_norm; N or the scale not finite: no update */
    {"SGDStep", GF, "max_norm=f:2", "F[1000] F[1000] d[7]=0.1,0.9,0,0,1,3,1 F[1000] d[1]=7.5",
     "yy", 0, 0, 0},
    {"AdamWStep", GF, "max_norm=f:0.5",
     "F[1000] F[1000] F[1000] F[1000]~0,1 d[7]=1e-3,0.9,0.999,1e-8,0.01,3,1 d[1]=3", "yyy", 0, 0,
     0},
    {"AdamWStep", GF, "max_norm=f:0.5",
     "F[33] F[33] F[33] F[33]~0,1 d[7]=1e-3,0.9,0.999,1e-8,0.01,3,1 d[1]=inf", "yyy", 0, 0, 0},
    {"SGDStep", GF, NULL, "F[33] F[33] d[7]=0.1,0,0,0,0,3,nan", "y-", 0, 0, 0},
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* ---- one case: its graph, inputs and outputs --------------------------------------- */

static struct gf_model *model;
static void *bufs[64];
static size_t n_bufs;

static void *keep(void *p)
{
    assert_non_null(p);
    assert_true(n_bufs < 64);
    return bufs[n_bufs++] = p;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < n_bufs; i++)
        free(bufs[i]);
    n_bufs = 0;
    gf_model_free(model);
    model = NULL;
    bt_case_name[0] = 0;
    return 0;
}

static enum gf_dtype dtype_of(char c, enum gf_dtype fl)
{
    switch (c) {
    case 'f': return fl;
    case 'F': return GF_FLOAT;
    case 'h': return GF_FLOAT16;
    case 'B': return GF_BFLOAT16;
    case 'd': return GF_DOUBLE;
    case 'l': return GF_INT64;
    case 'i': return GF_INT32;
    case 'u': return GF_UINT8;
    case 'b': return GF_BOOL;
    default: fail_msg("bad dtype '%c' in a case", c);
    }
    return GF_UNDEFINED;
}

static bool is_float(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_DOUBLE || bth_is(t);
}

/* Writes value v as element i of a buffer of type t. */
static void put(enum gf_dtype t, void *p, size_t i, double v)
{
    switch (t) {
    case GF_FLOAT: ((float *)p)[i] = (float)v; break;
    case GF_DOUBLE: ((double *)p)[i] = v; break;
    case GF_FLOAT16: ((uint16_t *)p)[i] = gf_float_to_half((float)v); break;
    case GF_BFLOAT16: ((uint16_t *)p)[i] = gf_float_to_bf16((float)v); break;
    case GF_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case GF_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case GF_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case GF_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: fail_msg("no generator for %s", gf_dtype_name(t));
    }
}

/* One input token of a case (the grammar at the top), parsed and its
 * values made: *host set for host-visible ones, *absent for "-". */
static struct gf_tview make_input(const char *tok, enum gf_dtype fl, unsigned seed, bool *host,
                                  bool *absent)
{
    struct gf_tview v = {0};
    *host = *absent = false;
    if (strcmp(tok, "-") == 0) {
        *absent = true;
        return v;
    }
    enum gf_dtype t = dtype_of(tok[0], fl);
    const char *p = strchr(tok, '[');
    if (!p)
        fail_msg("input '%s': no shape", tok);
    int64_t dims[GF_MAX_RANK];
    int rank = 0;
    for (p++; *p && *p != ']';) {
        char *end;
        dims[rank++] = strtoll(p, &end, 10);
        p = *end == ',' ? end + 1 : end;
    }
    v = bt_view(t, NULL, rank, dims);
    p++;
    void *d = keep(calloc(1, gf_dtype_bytes(t, v.nelem) + 8));
    v.data = d;
    v.host = d;
    if (*p == '=') { /* given values */
        *host = true;
        char *end;
        for (size_t i = 0; i < v.nelem; i++, p = end) {
            double x = strtod(p + 1, &end);
            if (end == p + 1)
                fail_msg("input '%s': %zu values for %zu elements", tok, i, v.nelem);
            put(t, d, i, x);
        }
        return v;
    }
    double lo = is_float(t) ? -2 : 0, hi = is_float(t) ? 2 : 4;
    bool specials = false;
    if (*p == '@') {
        *host = true;
        p++;
    }
    if (*p == '~') {
        char *end;
        lo = strtod(p + 1, &end);
        hi = strtod(end + 1, &end);
        specials = *end == '!';
    }
    float *f = malloc(v.nelem * sizeof(float) + 4);
    bt_fill(f, v.nelem, (float)lo, (float)hi, seed);
    for (size_t i = 0; i < v.nelem; i++) {
        double x = f[i];
        if (t == GF_BOOL)
            x = f[i] >= 0.5f * (float)(lo + hi);
        else if (!is_float(t))
            x = floor(x);
        else if (specials && i % 7 == 3)
            x = (i / 7) % 3 == 0 ? NAN : (i / 7) % 3 == 1 ? INFINITY : -INFINITY;
        put(t, d, i, x);
    }
    free(f);
    return v;
}

static void set_attrs(struct gf_node *n, const char *attrs)
{
    char buf[512];
    if (!attrs)
        return;
    snprintf(buf, sizeof(buf), "%s", attrs);
    for (char *save, *a = strtok_r(buf, " ", &save); a; a = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(a, '=');
        if (!eq || eq[1] == 0 || eq[2] != ':')
            fail_msg("bad attribute '%s'", a);
        *eq = 0;
        const char *val = eq + 3;
        enum gf_status st = GF_OK;
        switch (eq[1]) {
        case 'i': st = gf_node_set_attr_int(n, a, strtoll(val, NULL, 10)); break;
        case 'f': st = gf_node_set_attr_float(n, a, strtof(val, NULL)); break;
        case 's': st = gf_node_set_attr_string(n, a, val); break;
        case 'I': {
            int64_t v[GF_MAX_RANK];
            size_t k = 0;
            for (char *end; *val && k < GF_MAX_RANK; val = *end ? end + 1 : end)
                v[k++] = strtoll(val, &end, 10);
            st = gf_node_set_attr_ints(n, a, k, v);
            break;
        }
        default: fail_msg("bad attribute type in '%s'", a);
        }
        assert_int_equal(st, GF_OK);
    }
}

/* The case's node in a fresh one-node model, its inputs made (float type
 * fl for 'f'), its outputs shaped by shape inference. */
static struct gf_node *build(const struct tcase *c, enum gf_dtype fl, struct gf_tview *in,
                             size_t *n_in, unsigned *host_mask, struct gf_tview *out,
                             size_t *n_out)
{
    gf_model_free(model);
    model = gf_model_new(8, "t");
    assert_non_null(model);
    assert_int_equal(gf_model_set_opset(model, "", 18), GF_OK);
    assert_int_equal(gf_model_set_opset(model, GF, 1), GF_OK);
    struct gf_graph *g = model->graph;
    struct gf_value *ins[BT_MAX] = {0}, *outs[BT_MAX] = {0};
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", c->ins);
    *n_in = 0;
    *host_mask = 0;
    for (char *save, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        size_t i = (*n_in)++;
        assert_true(i < BT_MAX);
        bool host, absent;
        in[i] = make_input(tok, fl, (unsigned)(i * 31 + strlen(c->ins)), &host, &absent);
        if (absent)
            continue;
        *host_mask |= host ? 1u << i : 0;
        char name[32];
        snprintf(name, sizeof(name), "in%u", (unsigned)i);
        if (host) {
            struct gf_tensor *t = gf_tensor_new(model, name, in[i].dtype, in[i].rank,
                                                in[i].dims, in[i].data);
            ins[i] = gf_graph_add_initializer(g, name, t);
        } else {
            struct gf_dim dims[GF_MAX_RANK];
            for (int k = 0; k < in[i].rank; k++)
                dims[k] = (struct gf_dim){.value = in[i].dims[k]};
            ins[i] = gf_graph_new_value(g, name, NULL);
            assert_non_null(ins[i]);
            gf_value_set_tensor_type(ins[i], in[i].dtype, in[i].rank, dims);
            assert_int_equal(gf_graph_add_input(g, ins[i]), GF_OK);
        }
        assert_non_null(ins[i]);
    }
    const char *o = c->outs ? c->outs : "y";
    *n_out = strlen(o);
    assert_true(*n_out <= BT_MAX);
    for (size_t k = 0; k < *n_out; k++)
        if (o[k] == 'y') {
            outs[k] = gf_graph_new_value(g, NULL, "out");
            assert_int_equal(gf_graph_add_output(g, outs[k]), GF_OK);
        }
    struct gf_node *n = gf_graph_add_node(g, c->op, c->domain, "n0", *n_in, ins, *n_out, outs);
    assert_non_null(n);
    if (n->op == GF_OP_UNKNOWN)
        fail_msg("case %s: no such op in graph/ops.def", bt_case_name);
    set_attrs(n, c->attrs);
    if (gf_graph_infer_shapes(g) != GF_OK)
        fail_msg("case %s: shape inference: %s", bt_case_name, gf_last_error());
    for (size_t k = 0; k < *n_out; k++) {
        out[k] = (struct gf_tview){0};
        if (!outs[k])
            continue;
        const struct gf_type *t = &outs[k]->type;
        int64_t dims[GF_MAX_RANK];
        if (t->kind != GF_TYPE_TENSOR || t->rank < 0)
            fail_msg("case %s: shape inference left output %zu untyped", bt_case_name, k);
        for (int d = 0; d < t->rank; d++) {
            if (t->dims[d].value < 0)
                fail_msg("case %s: output %zu has an unknown dim", bt_case_name, k);
            dims[d] = t->dims[d].value;
        }
        out[k] = bt_view(t->dtype, NULL, t->rank, dims);
    }
    return n;
}

/* ---- running the table -------------------------------------------------------------- */

/* per backend index: (case, dtype) runs compared, not supported */
static unsigned n_passed[BT_MAX_BACKENDS], n_unsupported[BT_MAX_BACKENDS];
static unsigned dtypes_run; /* bits: dtypes of input 0 that ran somewhere */

static const enum gf_dtype float_types[3] = {GF_FLOAT, GF_FLOAT16, GF_BFLOAT16};

static void run_case(void **state)
{
    const struct tcase *c = *state;
    need_backend();
    unsigned want = c->dtypes ? c->dtypes : F32;
    for (int ti = 0; ti < 3; ti++) {
        if (!(want & (1u << ti)))
            continue;
        enum gf_dtype fl = float_types[ti];
        struct gf_tview in[BT_MAX], out[BT_MAX];
        size_t n_in, n_out;
        unsigned host;
        snprintf(bt_case_name, sizeof(bt_case_name), "[%s%s%s (%s) %s]", c->op,
                 c->attrs ? " " : "", c->attrs ? c->attrs : "", gf_dtype_name(fl), c->ins);
        struct gf_node *n = build(c, fl, in, &n_in, &host, out, &n_out);
        double rtol = c->rtol, atol = c->atol;
        enum gf_status st;
        if (fl != GF_FLOAT)
            rtol = fmax(rtol, bth_ulp(fl));
        if (fl == GF_FLOAT || gf_kernel_find(gf_backend_get("cpu"), n, in, n_in)) {
            st = bt_compare(n, in, n_in, host, out, n_out, rtol, atol);
        } else { /* the CPU has this op in fp32 only */
            unsigned before = bt_unsupported[bt_cur_index];
            bth_compare_wide(n, in, n_in, host, out, n_out, NULL, rtol, fmax(atol, BTH_ATOL));
            st = bt_unsupported[bt_cur_index] != before ? GF_ERR_UNSUPPORTED : GF_OK;
        }
        if (st == GF_OK) {
            n_passed[bt_cur_index]++;
            dtypes_run |= 1u << (n_in ? in[0].dtype : 0);
        } else {
            n_unsupported[bt_cur_index]++;
        }
    }
}

/* Every op a backend under test has a kernel for has a case, and one of
 * its cases ran there. */
static void test_coverage(void **state)
{
    (void)state;
    need_backend();
    bool in_table[GF_OP_COUNT] = {0};
    for (size_t i = 0; i < N_CASES; i++)
        in_table[gf_op_lookup(cases[i].domain, cases[i].op)] = true;
    char missing[2048] = "", declined[2048] = "";
    size_t ops = 0;
    for (int op = 1; op < GF_OP_COUNT; op++) {
        size_t nk;
        gf_kernel_list(bt_name(), (enum gf_op)op, &nk);
        if (!nk)
            continue;
        ops++;
        const struct gf_op_info *info = gf_op_get_info((enum gf_op)op);
        char name[96];
        snprintf(name, sizeof(name), " %s%s%s", *info->domain ? info->domain : "",
                 *info->domain ? "." : "", info->name);
        if (!in_table[op])
            strncat(missing, name, sizeof(missing) - strlen(missing) - 1);
        else if (!bt_used[bt_cur_index][op])
            strncat(declined, name, sizeof(declined) - strlen(declined) - 1);
    }
    printf("%s: %zu ops with kernels, each with a case\n", bt_name(), ops);
    if (*missing)
        fail_msg("new kernel without a harness case on %s:%s (add one to tests/"
                 "test_backend_ops.c)", bt_name(), missing);
    if (*declined)
        fail_msg("%s has kernels for%s, but declined every case of them", bt_name(), declined);
}

int main(void)
{
    static struct CMUnitTest tests[N_CASES + 1];
    static char names[N_CASES][160];
    for (size_t i = 0; i < N_CASES; i++) {
        const struct tcase *c = &cases[i];
        snprintf(names[i], sizeof(names[i]), "%s%s%s %s", c->op, c->attrs ? " " : "",
                 c->attrs ? c->attrs : "", c->ins);
        tests[i] = (struct CMUnitTest){.name = names[i], .test_func = run_case,
                                       .teardown_func = teardown, .initial_state = (void *)c};
    }
    tests[N_CASES] = (struct CMUnitTest){.name = "coverage", .test_func = test_coverage};
    int rc = bt_run_group("backend ops", tests, N_CASES + 1, NULL, NULL);

    /* the summary: ops x dtypes x backends */
    bool op_seen[GF_OP_COUNT] = {0};
    size_t n_ops = 0, n_runs = 0;
    for (size_t i = 0; i < N_CASES; i++) {
        enum gf_op op = gf_op_lookup(cases[i].domain, cases[i].op);
        n_ops += !op_seen[op];
        op_seen[op] = true;
        unsigned w = cases[i].dtypes ? cases[i].dtypes : F32;
        n_runs += (size_t)__builtin_popcount(w);
    }
    struct gf_backend *bes[BT_MAX_BACKENDS];
    size_t nb = bt_backends(bes, NULL), n_all = 0;
    for (size_t i = 0; gf_backend_name(i); i++)
        n_all += strcmp(gf_backend_name(i), "cpu") != 0;
    unsigned passed = 0, unsup = 0;
    for (size_t b = 0; b < nb; b++) {
        printf("backend ops on %s: %u passed, %u not supported (of %zu case runs)\n",
               bes[b]->ops->name, n_passed[b], n_unsupported[b], n_runs);
        passed += n_passed[b];
        unsup += n_unsupported[b];
    }
    printf("backend ops: %zu ops, %zu cases, %d dtypes x %zu backends: %u passed, "
           "%u unsupported, %zu skipped (%zu backends not available here)\n",
           n_ops, N_CASES, __builtin_popcount(dtypes_run), nb, passed, unsup,
           (n_all - nb) * n_runs, n_all - nb);
    return rc;
}
