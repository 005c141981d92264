/* CUDA kernels of the fused activations and their gradients (device code:
 * fused_act.cu), fp32, fp16 and bf16 storage (computed in fp32, every
 * operand of one type, as the shared checks ask):
 *
 *   SwiGLU GeGLU   G, U -> Y        same shapes: float4 grid-stride; broadcast G / U:
 *   SiLU Gelu      X -> Y           an element-strided kernel over merged axes
 *   SwiGLUGrad GeGLUGrad  dY, G, U -> dG?, dU?   (GeGLU's in double, as the CPU)
 *   RoPE           X, Cos, Sin -> Y      RoPEGrad  dY, Cos, Sin -> dX
 *
 * GeGLU and Gelu: approximate "none" (erf) and "tanh".  The rules follow
 * kernels/opencl/fused_act.c (MatMulEpilogueGrad: matmul.c); checks and
 * messages are the shared ones (kernels/checks.h).
 */
#include "cu.h"
#include "device_common.h"
#include "launch_fused.h"

static bool aligned(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

/* The launchers' type (gf_cu_type) of a float dtype: gf_dev_type's order. */
static int cu_type(enum gf_dtype t)
{
    return gf_dev_type_of(t);
}

/* ---- SwiGLU GeGLU SiLU Gelu ---------------------------------------------------- */

static enum gf_status glu_run(const struct gf_kernel_args *a)
{
    enum gf_op op = a->node->op;
    int gated = op == GF_OP_SWIGLU || op == GF_OP_GEGLU;
    const struct gf_tview *g = &a->in[0], *y = &a->out[0];
    enum gf_act act;
    int rank;
    int64_t dims[GF_MAX_RANK];
    enum gf_status st = gf_glu_check(a, &act, &rank, dims); /* kernels/checks.c */
    if (st != GF_OK || y->nelem == 0)
        return st;
    const struct gf_tview *u = gated ? &a->in[1] : NULL;
    bool dense = fu_same_shape(g, rank, dims) && (!gated || fu_same_shape(u, rank, dims));
    struct gf_cu_nd nd = {0};
    if (!dense) {
        int64_t sts[2][GF_MAX_RANK] = {{0}};
        fu_strides(g, rank, dims, sts[0]);
        if (gated)
            fu_strides(u, rank, dims, sts[1]);
        gf_cu_nd_init(&nd, rank, dims, 2, sts);
    }
    int vec = aligned(g->data) && aligned(y->data) && (!gated || aligned(u->data));
    cudaError_t e = gf_cu_glu(gf_cu_stream(a), (int)act, gated, cu_type(g->dtype), g->data,
                              gated ? u->data : NULL, y->data, &nd, (int64_t)y->nelem, dense, vec);
    return gf_cu_check(a, e, "gated activation kernel");
}

/* ---- SwiGLUGrad GeGLUGrad -------------------------------------------------------- */

static enum gf_status glu_grad_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *dy = &a->in[0];
    enum gf_act act;
    enum gf_status st = gf_glu_grad_check(a, &act); /* kernels/checks.c */
    void *dg = fu_has_out(a, 0) ? a->out[0].data : NULL;
    void *du = fu_has_out(a, 1) ? a->out[1].data : NULL;
    if (st != GF_OK || dy->nelem == 0 || (!dg && !du))
        return st;
    const void *ps[] = {dy->data, a->in[1].data, a->in[2].data, dg, du};
    int vec = 1;
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
        vec = vec && aligned(ps[i]);
    cudaError_t e = gf_cu_glu_grad(gf_cu_stream(a), (int)act, cu_type(dy->dtype), dy->data,
                                   a->in[1].data, a->in[2].data, dg, du, (int64_t)dy->nelem, vec);
    return gf_cu_check(a, e, "gated activation gradient kernel");
}

/* ---- RoPE RoPEGrad ------------------------------------------------------------------ */

static enum gf_status rope_run(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    enum gf_status st = gf_rope_check(a); /* kernels/checks.c */
    if (st != GF_OK || x->nelem == 0)
        return st;
    int64_t sc[GF_MAX_RANK], ss[GF_MAX_RANK], lead_st[2][GF_MAX_RANK] = {{0}};
    fu_strides(&a->in[1], x->rank, x->dims, sc);
    fu_strides(&a->in[2], x->rank, x->dims, ss);
    int lr = x->rank - 1;
    memcpy(lead_st[0], sc, sizeof(int64_t) * (size_t)lr);
    memcpy(lead_st[1], ss, sizeof(int64_t) * (size_t)lr);
    struct gf_cu_nd lead = {0};
    if (lr > 0) {
        gf_cu_nd_init(&lead, lr, x->dims, 2, lead_st);
    }
    int64_t d = x->dims[x->rank - 1], h = d / 2;
    cudaError_t e = gf_cu_rope(gf_cu_stream(a), a->node->op == GF_OP_ROPE_GRAD,
                               cu_type(x->dtype), cu_type(a->in[1].dtype), x->data,
                               a->in[1].data, a->in[2].data,
                               a->out[0].data,
                               (int64_t)x->nelem / d, h, &lead, sc[lr], ss[lr]);
    return gf_cu_check(a, e, "RoPE kernel");
}

/* ---- the table ------------------------------------------------------------------- */

/* Every operand of one float type: fp32, fp16 or bf16 (the kernels'); RoPE's
 * Cos and Sin may be fp32 with a 16-bit X. */
static bool act_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n_in < 1 || (in[0].dtype != GF_FLOAT && in[0].dtype != GF_FLOAT16 &&
                     in[0].dtype != GF_BFLOAT16))
        return false;
    bool wide = (n->op == GF_OP_ROPE || n->op == GF_OP_ROPE_GRAD) &&
                gf_rope_wide_tables(in, n_in); /* fp32 Cos, Sin */
    for (size_t i = 0; i < n_in; i++)
        if ((in[i].dtype != in[0].dtype && !(wide && i)) || in[i].rank > GF_MAX_RANK)
            return false;
    return true;
}

#define KERNEL(OP, KIND, RUN)                                                             \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "cu_" #KIND,     \
     .supports = act_supports, .run = RUN},

static const struct gf_kernel kernels[] = {GF_DEV_ACT_OPS(KERNEL)};

const struct gf_kernel_table gf_cuda_fused_act_table = {kernels,
                                                        sizeof(kernels) / sizeof(kernels[0])};
