/*
 * grad_rules.h — internal to passes/: the autodiff pass (autodiff.c) and
 * its gradient rules (grad_rules*.c).
 *
 * A rule builds the gradients of one forward node's inputs from the
 * gradients of its outputs, as ordinary nodes appended to the graph, with
 * the builder below.  The builder has a sticky error: once a call fails,
 * every later call returns NULL without doing anything, and the rule just
 * returns gf_ad_status(ad) at the end.  See autodiff.c for how to add a rule.
 */
#ifndef GF_GRAD_RULES_H
#define GF_GRAD_RULES_H

#include <stdint.h>

#include "gf_passes.h"

struct gf_ad; /* the pass state (autodiff.c) */

/* What a rule receives.  dy[k] is d loss / d output k (NULL: that output
 * has no gradient, i.e. zero); need[i] says which inputs want one; the
 * rule sets dx[i] (NULL: contributes nothing) for those, each of input i's
 * own shape and dtype. */
struct gf_grad_args {
    struct gf_ad *ad;
    struct gf_node *n;
    struct gf_value *const *dy; /* [n->n_outputs] */
    const bool *need;           /* [n->n_inputs] */
    struct gf_value **dx;       /* [n->n_inputs], NULL on entry */
};

typedef enum gf_status (*gf_grad_fn)(struct gf_grad_args *a);

/* One entry of the rule table, indexed by enum gf_op. */
struct gf_grad_rule {
    gf_grad_fn fn;   /* NULL: no rule (an error when on a differentiable path) */
    uint32_t inputs; /* input slots the rule differentiates (bit i: slot i; bit 31
                        covers slots 31 and up); a float input outside the mask
                        that needs a gradient is an error */
};

#define GF_GRAD_ALL 0xffffffffu

extern const struct gf_grad_rule gf_grad_rules[GF_OP_COUNT];

/* The rule of piecewise-constant ops (Floor, Sign, ...): their outputs
 * carry no gradient, so nothing upstream of them gets one. */
enum gf_status gf_grad_zero(struct gf_grad_args *a);

/* The rule of fused ops (graphfuse domain) that have no rule of their own
 * yet (autodiff.c): their model-local function body, recomputed from the
 * call's inputs, differentiated with the standard rules. */
enum gf_status gf_grad_inline(struct gf_grad_args *a);

/* Rules of grad_rules_nn.c (layout, indexing, softmax, norms, losses). */
enum gf_status gf_grad_transpose(struct gf_grad_args *a);
enum gf_status gf_grad_reshape(struct gf_grad_args *a); /* Flatten Squeeze Unsqueeze too */
enum gf_status gf_grad_expand(struct gf_grad_args *a);
enum gf_status gf_grad_concat(struct gf_grad_args *a);
enum gf_status gf_grad_split(struct gf_grad_args *a);
enum gf_status gf_grad_slice(struct gf_grad_args *a);
enum gf_status gf_grad_gather(struct gf_grad_args *a);
enum gf_status gf_grad_gather_elements(struct gf_grad_args *a);
enum gf_status gf_grad_gather_nd(struct gf_grad_args *a);
enum gf_status gf_grad_scatter(struct gf_grad_args *a); /* ScatterND ScatterElements */
enum gf_status gf_grad_tile(struct gf_grad_args *a);
enum gf_status gf_grad_pad(struct gf_grad_args *a);
enum gf_status gf_grad_trilu(struct gf_grad_args *a);
enum gf_status gf_grad_cumsum(struct gf_grad_args *a);
enum gf_status gf_grad_top_k(struct gf_grad_args *a);
enum gf_status gf_grad_einsum(struct gf_grad_args *a);
enum gf_status gf_grad_softmax(struct gf_grad_args *a); /* LogSoftmax too */
enum gf_status gf_grad_layer_norm(struct gf_grad_args *a);
enum gf_status gf_grad_sce_loss(struct gf_grad_args *a);
enum gf_status gf_grad_nll_loss(struct gf_grad_args *a);

/* Rules of grad_rules_fused.c (fused ops with a backward op of their own). */
enum gf_status gf_grad_rms_norm(struct gf_grad_args *a); /* AddRMSNorm too */
enum gf_status gf_grad_glu(struct gf_grad_args *a);      /* SwiGLU, GeGLU */
enum gf_status gf_grad_rope(struct gf_grad_args *a);
enum gf_status gf_grad_fused_layer_norm(struct gf_grad_args *a); /* AddLayerNorm too */
enum gf_status gf_grad_matmul_epilogue(struct gf_grad_args *a);
enum gf_status gf_grad_fused_sce(struct gf_grad_args *a);
enum gf_status gf_grad_fused_lce(struct gf_grad_args *a);
enum gf_status gf_grad_fused_jsd(struct gf_grad_args *a);
enum gf_status gf_grad_fused_attention(struct gf_grad_args *a);

/* ---- the builder (autodiff.c) -------------------------------------------- */

enum gf_status gf_ad_status(const struct gf_ad *ad);
/* Records an error (GF_ERR_UNSUPPORTED / GF_ERR_INVALID ...) naming the
 * forward node being differentiated; returns it. */
enum gf_status gf_ad_fail(struct gf_ad *ad, enum gf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int64_t gf_ad_opset(const struct gf_ad *ad); /* ai.onnx opset of the model */

/* A node of op `op` ("" domain unless it is a graphfuse backward op, which
 * the table knows) reading in[0..n_in) (NULL: omitted optional input) with
 * n_out fresh outputs written to out[] (NULL out: one output returned). */
struct gf_value *gf_ad_node(struct gf_ad *ad, const char *op, size_t n_in,
                            struct gf_value *const *in, size_t n_out, struct gf_value **out);
struct gf_value *gf_ad_op1(struct gf_ad *ad, const char *op, struct gf_value *x);
struct gf_value *gf_ad_op2(struct gf_ad *ad, const char *op, struct gf_value *a,
                           struct gf_value *b);
struct gf_value *gf_ad_op3(struct gf_ad *ad, const char *op, struct gf_value *a,
                           struct gf_value *b, struct gf_value *c);
/* Attributes on the producer of v; v returned (NULL stays NULL). */
struct gf_value *gf_ad_attr_int(struct gf_ad *ad, struct gf_value *v, const char *name,
                                int64_t i);
struct gf_value *gf_ad_attr_float(struct gf_ad *ad, struct gf_value *v, const char *name,
                                  float f);
struct gf_value *gf_ad_attr_ints(struct gf_ad *ad, struct gf_value *v, const char *name,
                                 size_t n, const int64_t *ints);
struct gf_value *gf_ad_attr_string(struct gf_ad *ad, struct gf_value *v, const char *name,
                                   const char *s);
/* Copies attribute `name` of the forward node (when it has it) onto v's producer. */
struct gf_value *gf_ad_attr_copy(struct gf_ad *ad, struct gf_value *v, const char *name);

/* Constants: a rank-0 initializer of dtype dt holding x; an int64 1-D
 * initializer of n elements. */
struct gf_value *gf_ad_scalar(struct gf_ad *ad, enum gf_dtype dt, double x);
struct gf_value *gf_ad_ints(struct gf_ad *ad, size_t n, const int64_t *v);
/* Shape(x) (one node per value). */
struct gf_value *gf_ad_shape(struct gf_ad *ad, struct gf_value *x);
/* Zeros shaped like x, of x's dtype: ConstantOfShape(Shape(x)). */
struct gf_value *gf_ad_zeros_like(struct gf_ad *ad, struct gf_value *x);
/* g, whose shape is like's, summed down to x's shape: SumToShape(g,
 * Shape(x)), or g itself when like and x provably have the same shape. */
struct gf_value *gf_ad_sum_to(struct gf_ad *ad, struct gf_value *g, const struct gf_value *like,
                              struct gf_value *x);
/* x reshaped to y's shape: Reshape(x, Shape(y)), or x when provably equal. */
struct gf_value *gf_ad_reshape_like(struct gf_ad *ad, struct gf_value *x,
                                    const struct gf_value *x_like, struct gf_value *y);
/* Unsqueeze / ReduceSum with constant axes, in the form the opset wants
 * (attribute before 13, input from 13). */
struct gf_value *gf_ad_unsqueeze(struct gf_ad *ad, struct gf_value *x, size_t n,
                                 const int64_t *axes);
struct gf_value *gf_ad_reduce_sum(struct gf_ad *ad, struct gf_value *x, size_t n,
                                  const int64_t *axes, bool keepdims);
/* Transpose with perm (n entries). */
struct gf_value *gf_ad_transpose(struct gf_ad *ad, struct gf_value *x, size_t n,
                                 const int64_t *perm);

/* ---- facts about forward values ---------------------------------------- */

enum gf_dtype gf_ad_dtype(const struct gf_value *v); /* GF_UNDEFINED if unknown */
int gf_ad_rank(const struct gf_value *v);            /* -1 if unknown */
/* True when the inferred shapes of a and b are provably the same. */
bool gf_ad_same_shape(const struct gf_value *a, const struct gf_value *b);
/* The elements of a constant int tensor (initializer or Constant), at most
 * max of them; false when not constant. */
bool gf_ad_const_ints(const struct gf_value *v, int64_t *out, size_t max, size_t *n);
/* The value of a constant scalar (one element) float or int tensor. */
bool gf_ad_const_scalar(const struct gf_value *v, double *x);

/* Forward nodes: replaces n by a copy with n_out outputs (the old ones kept,
 * fresh values added after them), e.g. to get Dropout's mask. */
struct gf_node *gf_ad_widen_outputs(struct gf_ad *ad, struct gf_node *n, size_t n_out);

#endif
