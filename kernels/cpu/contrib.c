/* CPU kernels of the ONNX Runtime contrib ops (and the opset-23 ops) that
 * `graphfuse optimize --target ort / onnx` writes, as adapters over the
 * fused kernels: each adapter describes the fused node the op stands for
 * (op, attributes, operand views) and runs the kernel registered for it.
 *
 *   SimplifiedLayerNormalization, RMSNormalization  X, scale    -> RMSNorm
 *   SkipSimplifiedLayerNormalization  input, skip, gamma        -> AddRMSNorm
 *   SkipLayerNormalization            input, skip, gamma, beta? -> AddLayerNorm
 *     (outputs: output -> Y, input_skip_bias_sum -> S; no bias input, no
 *      mean / inv_std_var outputs, skip of input's shape)
 *   Gelu, BiasGelu (erf), FastGelu (tanh), QuickGelu {alpha 1}  -> Gelu / SiLU
 *     (a bias [H] is added first, into the workspace, rounded to X's type)
 *   FusedMatMul {transA, transB, alpha}                         -> MatMulEpilogue
 *   RotaryEmbedding (com.microsoft and ONNX-23), rotate-half, full rotation
 *                                                               -> RoPE
 *     (the cache rows of each token's position are gathered into
 *      full-width cos / sin tables [B, S, H] in the workspace)
 *
 * Forms outside these (an attribute or output the fused op lacks) are
 * not supported: the node then has no kernel.
 */
#include "fused.h"

#define SH_ALIGN 64 /* the adapter's own workspace comes first, rounded up */

/* The fused node an op stands for, and the arguments of its kernel. */
struct shadow {
    struct gf_node node;
    struct gf_attr attrs[6];
    struct gf_tview in[4], out[2];
    struct gf_kernel_args args;
    size_t extra; /* bytes of the adapter's own workspace */
};

static void sh_begin(struct shadow *s, const struct gf_kernel_args *a, enum gf_op op)
{
    memset(s, 0, sizeof(*s));
    s->node = *a->node; /* name and op_type for messages */
    s->node.op = op;
    s->node.attrs = s->attrs;
    s->node.n_attrs = 0;
    s->args = *a;
    s->args.node = &s->node;
    s->args.in = s->in;
    s->args.out = s->out;
    s->args.n_in = s->args.n_out = 0;
    s->args.config = NULL;
}

static void sh_int(struct shadow *s, const char *name, int64_t v)
{
    s->attrs[s->node.n_attrs++] = (struct gf_attr){.name = name, .type = GF_ATTR_INT, .i = v};
}

static void sh_float(struct shadow *s, const char *name, float v)
{
    s->attrs[s->node.n_attrs++] = (struct gf_attr){.name = name, .type = GF_ATTR_FLOAT, .f = v};
}

static void sh_string(struct shadow *s, const char *name, const char *v)
{
    s->attrs[s->node.n_attrs++] = (struct gf_attr){
        .name = name, .type = GF_ATTR_STRING, .s = {(const uint8_t *)v, strlen(v)}};
}

/* Appends operand view t (NULL or beyond the op's operands: omitted). */
static void sh_in(struct shadow *s, const struct gf_kernel_args *a, size_t i)
{
    s->in[s->args.n_in++] = i < a->n_in ? a->in[i] : (struct gf_tview){0};
}

static void sh_out(struct shadow *s, const struct gf_kernel_args *a, size_t i)
{
    s->out[s->args.n_out++] = i < a->n_out ? a->out[i] : (struct gf_tview){0};
}

/* The fused kernel for s (NULL, with the error set, when none). */
static const struct gf_kernel *sh_kernel(const struct shadow *s, const struct gf_kernel_args *a)
{
    struct gf_backend *be = a->backend ? a->backend : gf_backend_get("cpu");
    const struct gf_kernel *k = be ? gf_kernel_find(be, &s->node, s->in, s->args.n_in) : NULL;
    if (!k)
        gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no %s kernel to run it with",
                        gf_op_get_info(s->node.op)->name);
    return k;
}

static size_t sh_extra(const struct shadow *s)
{
    return (s->extra + SH_ALIGN - 1) / SH_ALIGN * SH_ALIGN;
}

static size_t sh_workspace(struct shadow *s, const struct gf_kernel_args *a)
{
    const struct gf_kernel *k = sh_kernel(s, a);
    s->args.workspace = NULL;
    return sh_extra(s) + (k && k->workspace ? k->workspace(&s->args) : 0);
}

static enum gf_status sh_run(struct shadow *s, const struct gf_kernel_args *a)
{
    const struct gf_kernel *k = sh_kernel(s, a);
    if (!k)
        return GF_ERR_UNSUPPORTED;
    s->args.workspace = a->workspace ? (char *)a->workspace + sh_extra(s) : NULL;
    return k->run(&s->args);
}

/* Output i is wanted. */
static bool wanted(const struct gf_node *n, size_t i)
{
    return i < n->n_outputs && n->outputs[i];
}

static bool given(const struct gf_node *n, size_t i)
{
    return i < n->n_inputs && n->inputs[i];
}

/* ---- normalizations -------------------------------------------------------------- */

/* SimplifiedLayerNormalization / RMSNormalization -> RMSNorm; the Skip
 * ops -> AddRMSNorm / AddLayerNorm (epsilon defaults: 1e-5, Skip 1e-12). */
static void norm_shadow(struct shadow *s, const struct gf_kernel_args *a)
{
    enum gf_op op = a->node->op;
    bool skip = op == GF_OP_MS_SKIP_SIMPLIFIED_LAYER_NORM || op == GF_OP_MS_SKIP_LAYER_NORM;
    sh_begin(s, a, op == GF_OP_MS_SKIP_LAYER_NORM ? GF_OP_ADD_LAYER_NORM
                   : skip ? GF_OP_ADD_RMS_NORM : GF_OP_RMS_NORM);
    sh_int(s, "axis", skip ? -1 : gf_node_attr_int(a->node, "axis", -1));
    sh_float(s, "epsilon", gf_node_attr_float(a->node, "epsilon", skip ? 1e-12f : 1e-5f));
    for (size_t i = 0; i < (skip ? 3u : 2u); i++)
        sh_in(s, a, i); /* X, (R,) W */
    if (op == GF_OP_MS_SKIP_LAYER_NORM)
        sh_in(s, a, 3); /* beta */
    sh_out(s, a, 0);
    if (skip)
        sh_out(s, a, 3); /* input_skip_bias_sum */
}

static bool norm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    bool skip = n->op == GF_OP_MS_SKIP_SIMPLIFIED_LAYER_NORM || n->op == GF_OP_MS_SKIP_LAYER_NORM;
    size_t bias = n->op == GF_OP_MS_SKIP_LAYER_NORM ? 4 : 3;
    if (n_in < 2 || !fu_is_float(in[0].dtype) || wanted(n, 1) || (!skip && given(n, 2)))
        return false;
    if (skip && (wanted(n, 2) || given(n, bias) || n_in < 3 ||
                 !fu_same_shape(&in[1], in[0].rank, in[0].dims)))
        return false;
    return true;
}

static size_t norm_workspace(const struct gf_kernel_args *a)
{
    struct shadow s;
    norm_shadow(&s, a);
    return sh_workspace(&s, a);
}

static enum gf_status norm_run(const struct gf_kernel_args *a)
{
    struct shadow s;
    norm_shadow(&s, a);
    return sh_run(&s, a);
}

/* ---- GELUs ------------------------------------------------------------------------------- */

static bool gelu_has_bias(const struct gf_kernel_args *a)
{
    return a->node->op == GF_OP_MS_BIAS_GELU || fu_has(a, 1);
}

/* Gelu (erf) / FastGelu (tanh) / QuickGelu (alpha 1: SiLU) of X (+ bias,
 * summed into the workspace). */
static void gelu_shadow(struct shadow *s, const struct gf_kernel_args *a)
{
    enum gf_op op = a->node->op;
    sh_begin(s, a, op == GF_OP_MS_QUICK_GELU ? GF_OP_SILU : GF_OP_FUSED_GELU);
    if (op != GF_OP_MS_QUICK_GELU)
        sh_string(s, "approximate", op == GF_OP_MS_FAST_GELU ? "tanh" : "none");
    sh_in(s, a, 0);
    sh_out(s, a, 0);
    if (gelu_has_bias(a) && a->n_in)
        s->extra = gf_tview_bytes(&a->in[0]);
}

static bool gelu_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n_in < 1 || !fu_is_float(in[0].dtype))
        return false;
    if (n->op == GF_OP_MS_QUICK_GELU && gf_node_attr_float(n, "alpha", 1.702f) != 1.0f)
        return false;
    if (n_in < 2 || in[1].dtype == GF_UNDEFINED)
        return true;
    /* the bias: [H], H the last dim of X */
    return in[1].dtype == in[0].dtype && in[1].rank == 1 && in[0].rank >= 1 &&
           in[1].dims[0] == in[0].dims[in[0].rank - 1];
}

static size_t gelu_workspace(const struct gf_kernel_args *a)
{
    struct shadow s;
    gelu_shadow(&s, a);
    return sh_workspace(&s, a);
}

static enum gf_status gelu_run(const struct gf_kernel_args *a)
{
    struct shadow s;
    gelu_shadow(&s, a);
    if (gelu_has_bias(a)) {
        const struct gf_tview *x = &a->in[0], *b = &a->in[1];
        enum gf_status st = fu_check_in(a, 1, "bias", x->dtype);
        if (st != GF_OK)
            return st;
        if (!a->workspace && x->nelem)
            return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for X + bias");
        size_t h = b->nelem ? b->nelem : 1;
        for (size_t i = 0; i < x->nelem; i++)
            fu_put(a->workspace, x->dtype, i, fu_get(x, i) + fu_get(b, i % h));
        s.in[0].data = a->workspace;
    }
    return sh_run(&s, a);
}

/* ---- FusedMatMul ------------------------------------------------------------------------- */

static void mm_shadow(struct shadow *s, const struct gf_kernel_args *a)
{
    sh_begin(s, a, GF_OP_MATMUL_EPILOGUE);
    sh_int(s, "transA", gf_node_attr_int(a->node, "transA", 0));
    sh_int(s, "transB", gf_node_attr_int(a->node, "transB", 0));
    sh_float(s, "alpha", gf_node_attr_float(a->node, "alpha", 1.0f));
    sh_in(s, a, 0);
    sh_in(s, a, 1);
    sh_out(s, a, 0);
}

static bool mm_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return n_in == 2 && fu_is_float(in[0].dtype) && !gf_node_attr_int(n, "transBatchA", 0) &&
           !gf_node_attr_int(n, "transBatchB", 0);
}

static size_t mm_workspace(const struct gf_kernel_args *a)
{
    struct shadow s;
    mm_shadow(&s, a);
    return sh_workspace(&s, a);
}

static enum gf_status mm_run(const struct gf_kernel_args *a)
{
    struct shadow s;
    mm_shadow(&s, a);
    return sh_run(&s, a);
}

/* ---- RotaryEmbedding ------------------------------------------------------------------- */

/* The operands of either RotaryEmbedding: X [B, N, S, H] or [B, S, N*H]
 * (num_heads N), the caches [P, H/2] read at positions, or (ONNX, no
 * positions) [B, S, H/2]. */
struct rope_io {
    int x, pos, cos, sin; /* input slots; pos -1: none */
    int64_t b, s, n, h;   /* batch, sequence, heads, head size */
};

static struct rope_io rope_io(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    bool ms = n->op == GF_OP_MS_ROTARY_EMBEDDING;
    struct rope_io r = {0, ms ? 1 : 3, ms ? 2 : 1, ms ? 3 : 2, 0, 0, 0, 0};
    if (!ms && (n_in < 4 || in[3].dtype == GF_UNDEFINED))
        r.pos = -1;
    const struct gf_tview *x = &in[0];
    int64_t heads = gf_node_attr_int(n, "num_heads", 0);
    if (x->rank == 4) {
        r.b = x->dims[0], r.n = x->dims[1], r.s = x->dims[2], r.h = x->dims[3];
    } else if (x->rank == 3 && heads > 0 && x->dims[2] % heads == 0) {
        r.b = x->dims[0], r.s = x->dims[1], r.n = heads, r.h = x->dims[2] / heads;
    }
    return r;
}

/* Rotate-half, full rotation, the caches [.., H/2] of X's type. */
static bool rope_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    bool ms = n->op == GF_OP_MS_ROTARY_EMBEDDING;
    if (n_in < 3 || !fu_is_float(in[0].dtype) || (ms && n_in < 4))
        return false;
    struct rope_io r = rope_io(n, in, n_in);
    int64_t rd = gf_node_attr_int(n, "rotary_embedding_dim", 0);
    const struct gf_tview *c = &in[r.cos], *s = &in[r.sin];
    if (r.h <= 0 || r.h % 2 || (rd != 0 && rd != r.h) || gf_node_attr_int(n, "interleaved", 0) ||
        gf_node_attr_int(n, "is_packed_batching", 0) || gf_node_attr_float(n, "scale", 1) != 1)
        return false;
    if (c->dtype != in[0].dtype || s->dtype != in[0].dtype || c->rank != s->rank ||
        c->rank != (r.pos < 0 ? 3 : 2) || c->dims[c->rank - 1] != r.h / 2 ||
        !fu_same_shape(s, c->rank, c->dims))
        return false;
    return r.pos < 0 || in[r.pos].dtype == GF_INT64;
}

/* Row of the caches for token (b, t), or -1 when out of range. */
static int64_t rope_row(const struct gf_kernel_args *a, const struct rope_io *r, int64_t b,
                        int64_t t)
{
    const struct gf_tview *c = &a->in[r->cos];
    int64_t rows = c->rank == 3 ? c->dims[0] * c->dims[1] : c->dims[0], p;
    if (r->pos < 0)
        p = c->dims[0] == r->b && c->dims[1] == r->s ? b * r->s + t : -1;
    else if (a->in[r->pos].nelem == 1) /* an offset: positions p0 .. p0 + S - 1 */
        p = ((const int64_t *)a->in[r->pos].data)[0] + t;
    else if (a->in[r->pos].nelem == (size_t)(r->b * r->s))
        p = ((const int64_t *)a->in[r->pos].data)[b * r->s + t];
    else
        p = -1;
    return p >= 0 && p < rows ? p : -1;
}

/* Full-width tables [B, S, H] from the caches, into ws: each row the
 * cache row twice (the rotate-half form pairs j with j + H/2). */
static enum gf_status rope_tables(const struct gf_kernel_args *a, const struct rope_io *r,
                                  char *ws)
{
    size_t es = gf_dtype_size(a->in[0].dtype), half = (size_t)r->h / 2 * es;
    size_t tab = (size_t)(r->b * r->s * r->h) * es;
    for (int64_t b = 0; b < r->b; b++)
        for (int64_t t = 0; t < r->s; t++) {
            int64_t p = rope_row(a, r, b, t);
            if (p < 0)
                return gf_kernel_error(a, GF_ERR_INVALID, "token (%lld, %lld) has no row in the "
                                       "cos / sin caches %s", (long long)b, (long long)t,
                                       FU_SHAPE(&a->in[r->cos]));
            size_t o = (size_t)(b * r->s + t) * (size_t)r->h * es;
            for (int k = 0; k < 2; k++) {
                const char *src = (const char *)a->in[k ? r->sin : r->cos].data + (size_t)p * half;
                memcpy(ws + k * tab + o, src, half);
                memcpy(ws + k * tab + o + half, src, half);
            }
        }
    return GF_OK;
}

/* RoPE(X, Cos, Sin) with X [B, N, S, H] and tables [B, 1, S, H], or X
 * seen as [B, S, N, H] and tables [B, S, 1, H]. */
static void rope_shadow(struct shadow *s, const struct gf_kernel_args *a, struct rope_io *r)
{
    sh_begin(s, a, GF_OP_ROPE);
    *r = rope_io(a->node, a->in, a->n_in);
    bool three = a->in[0].rank == 3;
    int64_t xd[4] = {r->b, r->s, r->n, r->h}, td[4] = {r->b, 1, r->s, r->h};
    if (three)
        td[1] = r->s, td[2] = 1;
    sh_in(s, a, 0);
    sh_out(s, a, 0);
    if (three) {
        gf_tview_set_shape(&s->in[0], 4, xd);
        gf_tview_set_shape(&s->out[0], 4, xd);
    }
    for (int k = 0; k < 2; k++) {
        struct gf_tview *t = &s->in[s->args.n_in++];
        *t = (struct gf_tview){.dtype = a->in[0].dtype};
        gf_tview_set_shape(t, 4, td);
    }
    s->extra = 2 * gf_tview_bytes(&s->in[1]);
}

static size_t rope_workspace(const struct gf_kernel_args *a)
{
    struct shadow s;
    struct rope_io r;
    rope_shadow(&s, a, &r);
    return sh_workspace(&s, a);
}

static enum gf_status rope_run(const struct gf_kernel_args *a)
{
    struct shadow s;
    struct rope_io r;
    rope_shadow(&s, a, &r);
    if (a->in[0].nelem == 0)
        return sh_run(&s, a);
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the cos / sin tables");
    enum gf_status st = rope_tables(a, &r, a->workspace);
    s.in[1].data = a->workspace;
    s.in[2].data = (char *)a->workspace + gf_tview_bytes(&s.in[1]);
    return st == GF_OK ? sh_run(&s, a) : st;
}

/* ---- the table ------------------------------------------------------------------------- */

#define ADAPTER(OP, SUP, WS, RUN)                                                    \
    {.op = GF_OP_##OP, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "contrib-adapter", \
     .supports = SUP, .workspace = WS, .run = RUN}

static const struct gf_kernel kernels[] = {
    ADAPTER(SIMPLIFIED_LAYER_NORMALIZATION, norm_supports, norm_workspace, norm_run),
    ADAPTER(RMS_NORMALIZATION, norm_supports, norm_workspace, norm_run),
    ADAPTER(MS_SKIP_SIMPLIFIED_LAYER_NORM, norm_supports, norm_workspace, norm_run),
    ADAPTER(MS_SKIP_LAYER_NORM, norm_supports, norm_workspace, norm_run),
    ADAPTER(MS_GELU, gelu_supports, gelu_workspace, gelu_run),
    ADAPTER(MS_FAST_GELU, gelu_supports, gelu_workspace, gelu_run),
    ADAPTER(MS_BIAS_GELU, gelu_supports, gelu_workspace, gelu_run),
    ADAPTER(MS_QUICK_GELU, gelu_supports, gelu_workspace, gelu_run),
    ADAPTER(MS_FUSED_MATMUL, mm_supports, mm_workspace, mm_run),
    ADAPTER(MS_ROTARY_EMBEDDING, rope_supports, rope_workspace, rope_run),
    ADAPTER(ROTARY_EMBEDDING, rope_supports, rope_workspace, rope_run),
};

const struct gf_kernel_table gf_cpu_contrib_table = {kernels,
                                                     sizeof(kernels) / sizeof(kernels[0])};
