/*
 * checks.h — what every backend's kernels share (internal to kernels/):
 * checks of a kernel's inputs and outputs that end in a GF_ERR_INVALID
 * naming the node, broadcasting strides, and the per-op attribute and shape
 * checks (checks.c, layout_checks.c), so that every backend accepts and
 * rejects the same nodes with the same messages.  The rules shape inference
 * shares live one level down, in graph/opcheck.h.
 */
#ifndef GF_CHECKS_H
#define GF_CHECKS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "opcheck.h"

/* ---- broadcasting ------------------------------------------------------ */

/* Element strides of `in` aligned to `out`'s rank per ONNX (numpy)
 * broadcasting: 0 where `in` has size 1 (or lacks the axis). */
static inline void gf_bcast_strides(const struct gf_tview *in, const struct gf_tview *out,
                                    int64_t *strides)
{
    int64_t s = 1;
    for (int i = out->rank - 1, j = in->rank - 1; i >= 0; i--, j--) {
        if (j >= 0 && in->dims[j] != 1) {
            strides[i] = s;
            s *= in->dims[j];
        } else {
            strides[i] = 0;
            if (j >= 0)
                s *= in->dims[j];
        }
    }
}

/* ---- shapes, inputs, outputs ---------------------------------------------------------- */

/* "[2,3,4]" for messages. */
static inline const char *fu_shape_str(char *buf, size_t len, int rank, const int64_t *dims)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
    return buf;
}

#define FU_SHAPE(t) fu_shape_str((char[128]){0}, 128, (t)->rank, (t)->dims)
#define FU_DIMS(rank, dims) fu_shape_str((char[128]){0}, 128, rank, dims)

static inline bool fu_same_shape(const struct gf_tview *t, int rank, const int64_t *dims)
{
    if (t->rank != rank)
        return false;
    for (int i = 0; i < rank; i++)
        if (t->dims[i] != dims[i])
            return false;
    return true;
}

/* Input i is given (an omitted optional input has no dtype). */
static inline bool fu_has(const struct gf_kernel_args *a, size_t i)
{
    return i < a->n_in && a->in[i].dtype != GF_UNDEFINED;
}

/* Output i is wanted. */
static inline bool fu_has_out(const struct gf_kernel_args *a, size_t i)
{
    return i < a->n_out && a->out[i].dtype != GF_UNDEFINED;
}

/* Input i (named `name` in messages) is present and has the element type
 * `dt` (GF_UNDEFINED: any); its data may be absent (workspace sizing). */
static inline enum gf_status fu_check_given(const struct gf_kernel_args *a, size_t i,
                                            const char *name, enum gf_dtype dt)
{
    if (!fu_has(a, i))
        return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) is missing", name, i);
    const struct gf_tview *t = &a->in[i];
    if (dt != GF_UNDEFINED && t->dtype != dt)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) is %s, expected %s", name, i,
                               gf_dtype_name(t->dtype), gf_dtype_name(dt));
    return GF_OK;
}

/* Input i (named `name` in messages) is present, holds data, and has the
 * element type `dt`. */
static inline enum gf_status fu_check_in(const struct gf_kernel_args *a, size_t i,
                                         const char *name, enum gf_dtype dt)
{
    if (fu_has(a, i) && a->in[i].nelem && !a->in[i].data)
        return gf_kernel_error(a, GF_ERR_INVALID, "%s (input %zu) has no data", name, i);
    return fu_check_given(a, i, name, dt);
}

/* Output i exists (unless optional and omitted) with dtype dt and shape
 * dims[rank]. */
static inline enum gf_status fu_check_out(const struct gf_kernel_args *a, size_t i,
                                          enum gf_dtype dt, int rank, const int64_t *dims)
{
    if (!fu_has_out(a, i))
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu is missing", i);
    const struct gf_tview *o = &a->out[i];
    if (o->dtype != dt)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu is %s, expected %s", i,
                               gf_dtype_name(o->dtype), gf_dtype_name(dt));
    if (!fu_same_shape(o, rank, dims))
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has shape %s, expected %s", i,
                               FU_SHAPE(o), FU_DIMS(rank, dims));
    if (o->nelem && !o->data)
        return gf_kernel_error(a, GF_ERR_INVALID, "output %zu has no buffer", i);
    return GF_OK;
}

/* t broadcasts (numpy rules) to shape dims[rank] without enlarging it. */
static inline bool fu_bcasts_to(const struct gf_tview *t, int rank, const int64_t *dims)
{
    for (int i = 1; i <= t->rank; i++) {
        int64_t d = t->dims[t->rank - i];
        if (d != 1 && (i > rank || d != dims[rank - i]))
            return false;
    }
    return true;
}

/* Element strides of t over shape dims[rank] (0 along broadcast axes);
 * t must broadcast to it (fu_bcasts_to). */
static inline void fu_strides(const struct gf_tview *t, int rank, const int64_t *dims,
                              int64_t *st)
{
    struct gf_tview shape = {.dtype = t->dtype};
    gf_tview_set_shape(&shape, rank, dims);
    gf_bcast_strides(t, &shape, st);
}

/* Offset, under strides st, of element `flat` of shape dims[rank]. */
static inline size_t fu_offset(int rank, const int64_t *dims, const int64_t *st, size_t flat)
{
    size_t off = 0;
    for (int i = rank - 1; i >= 0 && flat; i--) {
        size_t d = (size_t)dims[i];
        off += flat % d * (size_t)st[i];
        flat /= d;
    }
    return off;
}

/* Resolves a possibly negative axis against rank; false when out of range. */
static inline bool fu_axis(int64_t axis, int rank, int *out)
{
    if (axis < -rank || axis >= rank)
        return false;
    *out = (int)(axis < 0 ? axis + rank : axis);
    return true;
}

/* ---- elementwise (checks.c) ----------------------------------------------- */

/* Output 0 and inputs 0..n_in-1 are there; *empty: output 0 has no
 * elements (nothing to do, nothing else checked). */
enum gf_status gf_ew_begin(const struct gf_kernel_args *a, size_t n_in, bool *empty);
/* Input k is there (data, or no elements). */
enum gf_status gf_ew_check_in(const struct gf_kernel_args *a, size_t k);
/* Input k is there and of type dt (a variadic op's operand, "input k"). */
enum gf_status gf_ew_check_operand(const struct gf_kernel_args *a, size_t k, enum gf_dtype dt);
/* Input k (t) broadcasts to out's shape (numpy rules); its strides into st. */
enum gf_status gf_ew_bcast(const struct gf_kernel_args *a, int k, const struct gf_tview *t,
                           const struct gf_tview *out, int64_t *st);
/* "%s has type %s, expected %s" unless got == want. */
enum gf_status gf_ew_check_dtype(const struct gf_kernel_args *a, const char *what,
                                 enum gf_dtype got, enum gf_dtype want);
/* x (input 0) and y (output 0) have as many elements. */
enum gf_status gf_ew_check_count(const struct gf_kernel_args *a, const struct gf_tview *x,
                                 const struct gf_tview *y);
/* Where: the condition is bool, X, Y and the output of one type. */
enum gf_status gf_where_check(const struct gf_kernel_args *a);
/* Clip's bound k (1: min, 2: max), when given: a scalar of input 0's type. */
enum gf_status gf_clip_bound_check(const struct gf_kernel_args *a, size_t k, const char *name);
/* Cast: the output has the type of attribute `to`. */
enum gf_status gf_cast_check(const struct gf_kernel_args *a);

/* ---- axes, reductions (checks.c) ---------------------------------------- */

/* The "axis" attribute (default dflt) resolved against rank. */
enum gf_status gf_axis_attr(const struct gf_kernel_args *a, int64_t dflt, int rank, int *ax);
/* red[i]: axis i of input 0 is reduced (Reduce*: axes from input 1 on the
 * host, or the attribute; noop_with_empty_axes). */
enum gf_status gf_reduce_axes(const struct gf_kernel_args *a, bool *red);
/* Output i has dtype dt and nelem elements (and a buffer if any). */
enum gf_status gf_check_out_count(const struct gf_kernel_args *a, size_t i, enum gf_dtype dt,
                                  size_t nelem);

/* ---- the fused ops (checks.c; their rules: graph/opcheck.h) --------------- */

/* Input i is int32 / int64 labels ("label T"). */
enum gf_status gf_check_labels_in(const struct gf_kernel_args *a, size_t i);
/* Input i is int32 / int64 labels of shape dims[rank]. */
enum gf_status fu_check_label_shape(const struct gf_kernel_args *a, size_t i, int rank,
                                    const int64_t *dims);
/* The rules' shapes of a view; the dims of a known shape (returns the rank). */
void gf_shape_of_view(const struct gf_tview *t, struct gf_shape *s);
int gf_shape_dims(const struct gf_shape *s, int64_t *dims);
/* Elements of a known shape. */
size_t gf_shape_numel(const struct gf_shape *s);
/* The fused ops' checks come in two: their inputs' types and shapes and
 * the rule (all that a workspace size may depend on: no data needed), then
 * at run time the inputs' data and the outputs (_check_run). */
/* SoftmaxCrossEntropy(L, T, Wc?) -> Loss, LogP?, G?. */
enum gf_status gf_sce_check(const struct gf_kernel_args *a, struct gf_sce_rule *r);
enum gf_status gf_sce_check_run(const struct gf_kernel_args *a, const struct gf_sce_rule *r);
/* LinearCrossEntropy(H, W, T, Bias?) -> Loss (gf_loss_check_out), dH?, dW?,
 * dBias? (gf_lce_train_check: reduction mean or sum; float). */
enum gf_status gf_lce_check(const struct gf_kernel_args *a, struct gf_lce_rule *r);
enum gf_status gf_lce_train_check(const struct gf_kernel_args *a, const struct gf_lce_rule *r);
/* The inputs' data; output 0, the loss: the positions' shape with
 * reduction none, else a scalar. */
enum gf_status gf_loss_check_run(const struct gf_kernel_args *a, enum gf_reduction red,
                                 const struct gf_shape *pos);
/* CrossEntropyGrad(dLoss, G) -> dL: inputs, rule and output. */
enum gf_status gf_ce_grad_check(const struct gf_kernel_args *a, struct gf_ceg_rule *r);
/* JSD(X, Y, T?) -> Loss; JSDGrad(dLoss, X, Y, T?) -> dX?, dY?: inputs,
 * outputs, beta and ignore_index. */
enum gf_status gf_jsd_check(const struct gf_kernel_args *a, float *beta, int64_t *ii);
enum gf_status gf_jsd_grad_check(const struct gf_kernel_args *a, float *beta, int64_t *ii);
/* A cross-entropy node's labels as the kernels read them. */
struct gf_labels {
    const struct gf_tview *t;
    size_t slot;     /* their input index */
    bool has_ii;     /* ignore_index given */
    int64_t ii;
    size_t classes;
    size_t s1;       /* S - 1 with shift=1, 0 without: position p = b*(S-1) + s
                      * uses element b*S + s + 1 */
};
void gf_labels_init(struct gf_labels *l, const struct gf_tview *t, size_t slot,
                    const struct gf_ce_attrs *ce, size_t classes, size_t s1);
/* The element of the labels position p uses. */
size_t gf_label_index(const struct gf_labels *l, size_t p);
/* "NAME (input SLOT) element I is V: outside [0, C)" (" and not ignore_index
 * II" when given). */
enum gf_status gf_label_error(const struct gf_kernel_args *a, const char *name,
                              const struct gf_labels *l, size_t i, int64_t v);
/* The labels n_pos positions use, each a class or ignore_index; read at p
 * (their bytes on the host; NULL: nothing checked). */
enum gf_status gf_check_labels(const struct gf_kernel_args *a, const char *name,
                               const struct gf_labels *l, const void *p, size_t n_pos);
/* SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss (scores, labels,
 * weights?) -> loss, log_prob?, and their Grad ops (dLoss, scores | shape,
 * labels, weights?) -> dScores, at run time: the inputs (types, data;
 * NLLLossGrad's shape input against output 0), the rule (graph/opcheck.h;
 * NLLLossGrad's scores are output 0's shape), the outputs, and the labels'
 * values where they are on the host; *l the labels. */
enum gf_status gf_nll_check(const struct gf_kernel_args *a, struct gf_loss_rule *r,
                            struct gf_labels *l);
/* Attention (qi 0) -> O, or AttentionGrad (qi 1) -> dQ?, dK?, dV?. */
enum gf_status gf_attn_check(const struct gf_kernel_args *a, size_t qi, struct gf_attn_rule *r);
enum gf_status gf_attn_check_run(const struct gf_kernel_args *a, size_t qi,
                                 const struct gf_attn_rule *r);

/* Normalizations (the rule: graph/opcheck.h).  Input slots of the forward
 * ops: X R W B, -1 where the op has none. */
struct gf_norm_slots {
    int r, w, b;
};
struct gf_norm_slots gf_norm_slots_of(enum gf_op op);
/* Input slot (or -1), or NULL where the op or the node has none. */
const struct gf_tview *gf_opt_in(const struct gf_kernel_args *a, int slot);
/* RMSNorm AddRMSNorm LayerNorm AddLayerNorm: inputs and rule; then the
 * data and the outputs (Y, S, Mean and InvStdDev in the compute type). */
enum gf_status gf_norm_check(const struct gf_kernel_args *a, struct gf_norm_rule *r);
enum gf_status gf_norm_check_run(const struct gf_kernel_args *a, const struct gf_norm_rule *r);
/* The 16-bit type of a norm's mixed form, GF_UNDEFINED for another node:
 * AddRMSNorm / AddLayerNorm with an fp32 X and an fp16 / bf16 R (Y then
 * has R's type; S, W, B X's), RMSNormGrad / LayerNormGrad with an fp32 X
 * and an fp16 / bf16 dY (dX, dW, dB X's type).  The precision pass's
 * residual adds of 16-bit products (docs/precision.md); computed in fp32,
 * Y rounded once, as the Casts around the fp32 form. */
enum gf_dtype gf_norm_low_type(const struct gf_node *n, const struct gf_tview *in, size_t n_in);
/* RMSNormGrad LayerNormGrad: inputs and rule; then the data and dX, dW?, dB?
 * (RMSNormGrad: dX, dW?, dXl?, its G? added to dX; dXl dX in dY's type). */
enum gf_status gf_norm_grad_check(const struct gf_kernel_args *a, struct gf_norm_rule *r);
enum gf_status gf_norm_grad_check_run(const struct gf_kernel_args *a,
                                      const struct gf_norm_rule *r);

/* SwiGLU GeGLU SiLU Gelu -> Y: inputs, rule (the activation), Y's shape
 * (G and U broadcast), output.  SwiGLUGrad GeGLUGrad -> dG?, dU?.  RoPE,
 * RoPEGrad -> Y (dX).  The rules: graph/opcheck.h. */
enum gf_status gf_glu_check(const struct gf_kernel_args *a, enum gf_act *act, int *rank,
                            int64_t *dims);
enum gf_status gf_glu_grad_check(const struct gf_kernel_args *a, enum gf_act *act);
enum gf_status gf_rope_check(const struct gf_kernel_args *a);
/* RoPE / RoPEGrad inputs with a 16-bit X (dY) and fp32 Cos and Sin (allowed
 * besides all of one type; computed in fp32, Y rounded once). */
bool gf_rope_wide_tables(const struct gf_tview *in, size_t n_in);

/* A' x B' of inputs 0 and 1 (MatMulEpilogue; OpenCL's MatMul and Gemm):
 * a 1-D A is [1, K], a 1-D B [K, 1]. */
struct gf_mm {
    int64_t m, n, k;
    int64_t lda, ldb;            /* row strides of A and B as stored */
    int brank;                   /* broadcast batch dims; 0: one product */
    int64_t bdims[GF_MAX_RANK];
    int64_t sa[GF_MAX_RANK], sb[GF_MAX_RANK]; /* elements a batch step moves (0: broadcast) */
    int64_t count;               /* products */
    int yrank;
    int64_t ydims[GF_MAX_RANK];
};
/* The product's rule (graph/opcheck.h) and geometry, transposed by ta, tb. */
enum gf_status gf_mm_plan(const struct gf_kernel_args *a, bool ta, bool tb, struct gf_mm *m);
/* A device kernel's integer Div (int64 / int32): the divisor B read from its
 * host copy (none: GF_ERR_UNSUPPORTED), no element 0.  Other nodes: OK. */
enum gf_status gf_check_int_divisor(const struct gf_kernel_args *a, const struct gf_tview *b);
/* Gemm(A, B, C?) -> Y: the rule (A, B 2-D, K, C broadcast to [M, N]) and
 * the product's geometry; C given (fu_has) is checked, types are not. */
enum gf_status gf_gemm_check(const struct gf_kernel_args *a, struct gf_gemm_rule *r,
                             struct gf_mm *m);
/* MatMulEpilogue(A, B, Bias?, Res?) -> Y: inputs, rule, geometry, Y. */
enum gf_status gf_mme_check(const struct gf_kernel_args *a, struct gf_mme_rule *r,
                            struct gf_mm *m);

/* MatMulEpilogueGrad(dY, Z) -> dZ, dBias?: inputs, rule, outputs. */
enum gf_status gf_mme_grad_check(const struct gf_kernel_args *a, struct gf_mme_grad_rule *r);

/* ---- the optimizer ops (checks.c; their rule: graph/opcheck.h) ---------- */

/* GradAccumulate GradNorm SGDStep AdamWStep at run time: the rule, fp32
 * operands, the outputs (GradNorm's one float64) into o. */
struct gf_optim_args {
    struct gf_optim_rule r;
    const double *hyper; /* the steps': GF_OPTIM_HYPER doubles on the host; NULL when
                          * hyper is backend memory only (read on the device) */
    const struct gf_tview *norm; /* the steps' N (GradNorm's output), NULL: omitted */
    const double *norm_host;     /* its host copy, if any */
    float max_norm;              /* the steps' attribute max_norm (0: no clipping) */
    bool opt;            /* the optional operand is there, with data (an empty view
                          * without data is omitted): GradAccumulate's Acc,
                          * SGDStep's momentum buffer (Buf and Buf'; momentum needs it) */
};
enum gf_status gf_optim_check(const struct gf_kernel_args *a, struct gf_optim_args *o);
/* supports() of the optimizer ops: fp32 operands (GradAccumulate's Acc
 * when given), a 2-D gradient for GradAccumulate's transpose, the steps'
 * float64 hyper (and N), with their host copies where host_hyper (a device
 * backend that reads them on the host). */
bool gf_optim_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                       bool host_hyper);

/* ---- the layout ops (layout_checks.c) ---------------------------------- */

#define GF_MAX_INTS (2 * GF_MAX_RANK) /* longest int list read (Pad's pads) */

/* int32 or int64 (indices). */
bool gf_is_index_type(enum gf_dtype t);
/* Input i is given: data, a host copy, or an empty tensor (which may have none). */
bool gf_has_input(const struct gf_kernel_args *a, size_t i);
/* Inputs 0..n-1 are given; else "input %zu is missing". */
enum gf_status gf_require_inputs(const struct gf_kernel_args *a, size_t n);
/* t's bytes readable on the host: its host copy, or its data on a backend
 * of host memory; NULL when neither. */
const void *gf_host_bytes(const struct gf_kernel_args *a, const struct gf_tview *t);
/* Element i of integer tensor t whose bytes are at p. */
int64_t gf_int_at(const struct gf_tview *t, const void *p, size_t i);
/* Product of dims[from..to). */
size_t gf_dims_prod(const int64_t *dims, int from, int to);
/* Row-major element strides of dims[rank]. */
void gf_strides_of(int rank, const int64_t *dims, int64_t *stride);
/* Output k has shape dims[rank] and a buffer. */
enum gf_status gf_check_out_dims(const struct gf_kernel_args *a, size_t k, int rank,
                                 const int64_t *dims);
/* "%s is %s, expected %s" unless got == want. */
enum gf_status gf_check_dtype(const struct gf_kernel_args *a, const char *what,
                              enum gf_dtype got, enum gf_dtype want);
/* An int list (at most GF_MAX_INTS values) from input `slot` when given
 * (0: none; read on the host), else from attribute `attr` (the form older
 * opsets use; NULL: none).  *given: either was there. */
enum gf_status gf_int_list(const struct gf_kernel_args *a, size_t slot, const char *attr,
                           const char *what, int64_t *buf, size_t *n, bool *given);
/* The model's ai.onnx opset (the newest when it imports none). */
int64_t gf_node_opset(const struct gf_node *n);
/* axis in [-rank, rank) made non-negative; an error naming `what` otherwise. */
enum gf_status gf_norm_axis(const struct gf_kernel_args *a, const char *what, int64_t axis,
                            int rank, int *out);
/* Reshape's target dims from `shape` (0 copies, one -1 inferred). */
enum gf_status gf_reshape_dims(const struct gf_kernel_args *a, const int64_t *shape, size_t n,
                               int64_t *dims);
/* Squeeze / Unsqueeze axes normalized against rank, no repeats, marked in hit. */
enum gf_status gf_axes_mask(const struct gf_kernel_args *a, const int64_t *axes, size_t n,
                            int rank, bool hit[GF_MAX_RANK]);
/* Output shape of Reshape, Flatten, Squeeze or Unsqueeze of input 0. */
enum gf_status gf_view_dims(const struct gf_kernel_args *a, int *rank, int64_t *dims);
/* Transpose's permutation (perm, default reversed) and output dims. */
enum gf_status gf_transpose_perm(const struct gf_kernel_args *a, int *perm, int64_t *dims);
/* Slice of data dims xdims[r] (starts, ends, axes, steps at inputs base..
 * base + 3, or the attributes): per axis the first element, the step (1
 * where at most one element is taken) and the count. */
enum gf_status gf_slice_plan(const struct gf_kernel_args *a, size_t base, int r,
                             const int64_t *xdims, int64_t *first, int64_t *step,
                             int64_t *dims);
/* Expand's output dims: input 0 broadcast with the shape input. */
enum gf_status gf_expand_dims(const struct gf_kernel_args *a, int *rank, int64_t *dims);
/* Pad's modes, from its `mode` attribute (PAD_BAD: none of these). */
enum pad_mode { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP, PAD_BAD };
enum pad_mode gf_pad_mode_of(const struct gf_node *n);
/* Pad from its pads list (np entries) and axes (na, when has_axes): the
 * mode, pads per axis (begin pb, end pe; negative crops) and the output
 * dims, checked. */
enum gf_status gf_pad_plan(const struct gf_kernel_args *a, const int64_t *pads, size_t np,
                           const int64_t *axes, size_t na, bool has_axes, int *mode,
                           int64_t *pb, int64_t *pe, int64_t *dims);
/* Concat: the axis and the output dims, inputs and output 0 checked. */
enum gf_status gf_concat_dims(const struct gf_kernel_args *a, int *axis, int64_t *dims);
/* Split: the axis, every output size checked against input 0. */
enum gf_status gf_split_axis(const struct gf_kernel_args *a, int *axis);
/* Size of Split output j along an axis of size dim. */
enum gf_status gf_split_size(const struct gf_kernel_args *a, int64_t dim, size_t j,
                             int64_t *size);
/* Split output j: its dims, checked unless *omitted (no buffer, no elements). */
enum gf_status gf_split_out(const struct gf_kernel_args *a, int axis, size_t j, int64_t *dims,
                            bool *omitted);
/* Copies `height` rows of `width` bytes: row i from byte soff + i * spitch
 * of src to byte doff + i * dpitch of dst (a backend's buffers). */
typedef enum gf_status (*gf_copy2d_fn)(const struct gf_kernel_args *a, void *dst, size_t doff,
                                       size_t dpitch, const void *src, size_t soff,
                                       size_t spitch, size_t width, size_t height);
/* Concat and Split as such copies, after their checks: each input of
 * Concat into its block of output 0, each wanted output of Split from its
 * block of input 0, in order. */
enum gf_status gf_concat_blocks(const struct gf_kernel_args *a, gf_copy2d_fn copy);
enum gf_status gf_split_blocks(const struct gf_kernel_args *a, gf_copy2d_fn copy);
/* "indices element 4 (value 9) is out of range [-3, 2] for data axis 1". */
enum gf_status gf_index_error(const struct gf_kernel_args *a, const char *what, size_t pos,
                              int64_t v, int64_t dim, int axis);
/* Every index of `ind` in [-dim, dim), when its values are on the host. */
enum gf_status gf_check_indices(const struct gf_kernel_args *a, const struct gf_tview *ind,
                                int64_t dim, int axis);
/* Gather: the axis and the output dims, checked (the indices too when on
 * the host). */
enum gf_status gf_gather_dims(const struct gf_kernel_args *a, int *axis, int64_t *dims);
/* GatherND / ScatterND: indices [B..., N..., k] address slices of data
 * [B..., D0..Dk-1, S...] (B: batch_dims axes shared by both). */
struct gf_nd_plan {
    int b, k;
    int rank;                       /* of the gathered slices */
    int64_t dims[GF_MAX_RANK];      /* their dims (when rank <= GF_MAX_RANK) */
    size_t tuples, per_batch;       /* index tuples in all, in one batch */
    size_t slice, batch;            /* data elements of a slice, of a batch */
};
/* The plan with b batch axes; the indices checked (on the host). */
enum gf_status gf_nd_plan(const struct gf_kernel_args *a, int b, struct gf_nd_plan *p);
/* GatherND's plan (batch_dims), output 0 checked. */
enum gf_status gf_gather_nd_plan(const struct gf_kernel_args *a, struct gf_nd_plan *p);
/* Input i is a 1-D int64 shape equal to output 0's (the backward ops). */
enum gf_status gf_check_shape_input(const struct gf_kernel_args *a, size_t i);

#endif /* GF_CHECKS_H */
