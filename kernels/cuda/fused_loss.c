/* CUDA kernels of the fused losses (device code: fused_loss.cu), fp32 (and
 * LinearCrossEntropy of bf16 H, W: see struct lce):
 *
 *   SoftmaxCrossEntropy  L, T, Wc? -> Loss, LogP?, G?   one block (or one
 *                        cluster of blocks, the row in shared memory) per
 *                        position; G in the same pass (over L in place)
 *   CrossEntropyGrad     dLoss, G -> dL             G times dLoss
 *   LinearCrossEntropy   H, W, T, Bias? -> Loss, dH?, dW?, dBias?   chunks of R
 *                        rows: the chunk's logits z [R, V] by cuBLASLt (Bias
 *                        broadcast first), the rows' losses and, training,
 *                        their gradient in place of z; then dH = z W'^T,
 *                        dW += Hc^T z (or z^T Hc), dBias += column sums of
 *                        z (double): the whole logits never exist
 *   SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss (ONNX) -> loss, log_prob?
 *   SoftmaxCrossEntropyLossGrad NLLLossGrad  dLoss, scores | shape, labels,
 *                        weights? -> dX     the rows with dLoss's scale; a
 *                        scatter of -coef for NLL
 *   JSD                  X, Y, T? -> Loss   one block per row, batchmean
 *   JSDGrad              dLoss, X, Y, T? -> dX?, dY?   elementwise
 *
 * Semantics, checks and messages are the CPU's (kernels/cpu/fused_loss.c,
 * fused_grad.c, grad.c, reduce.c) through the shared checks; the output
 * lists are theirs.  Labels are checked on the host when they have a host
 * copy, else on the device: the smallest bad position goes to a slot of the
 * executor's deferred checks during a session's run (read after the run:
 * nothing waits, a CUDA graph may hold the node), else to the workspace,
 * read back after the kernels (one sync).  Per-position (loss, weight) pairs go to the
 * workspace and one block sums them in a fixed order.
 */
#include <limits.h>

#include "cu.h"
#include "device_common.h"
#include "launch_mla.h"

/* knobs: threads per position (0: automatic), cluster blocks per position
 * (0: automatic, 1: off), LinearCrossEntropy's rows per chunk (0: auto) */
enum { K_BLOCK, K_CLUSTER, K_CHUNK };
static const int block_values[] = {0, 128, 256, 512, 1024};
static const int cluster_values[] = {0, 1, 2, 4, 8, 16};
static const int chunk_values[] = {0, 256, 512, 1024, 2048, 4096};
static const struct gf_config_knob knobs[] = {
    {"block", 5, block_values},
    {"cluster", 6, cluster_values},
    {"chunk_rows", 6, chunk_values},
};
/* automatic chunk: fp32 logits of about this size (256 MiB: 2048 rows of a 32000
 * vocabulary, what `train --autotune` picks for the 160M Llama's lm head in bf16;
 * its GEMMs run faster than at 1024 rows, for 128 MiB more workspace) */
#define LCE_BYTES ((size_t)256 << 20)
#define LCE_MAX_ROWS 4096

static int knob(const struct gf_kernel_args *a, int k)
{
    return a->config ? a->config[k] : 0;
}

#define A256(x) (((x) + 255) & ~(size_t)255)

/* Workspace: [lpart: 2 doubles a position][gsum: double][bad: int]. */
struct lossws {
    size_t lpart, gsum, bad, end;
};

static void lossws_layout(struct lossws *w, size_t start, size_t n_pos)
{
    w->lpart = start;
    w->gsum = w->lpart + A256(2 * n_pos * sizeof(double));
    w->bad = w->gsum + 256;
    w->end = w->bad + 256;
}

static void *ws_at(const struct gf_kernel_args *a, size_t off)
{
    return (char *)a->workspace + off;
}

/* The message of bad label position p (read from the device; the stream
 * has finished). */
static enum gf_status label_error_at(const struct gf_kernel_args *a, const struct gf_labels *l,
                                     const char *name, int p)
{
    size_t i = gf_label_index(l, (size_t)p), es = l->t->dtype == GF_INT32 ? 4 : 8;
    int64_t v = 0;
    int32_t v32 = 0;
    cudaError_t e = cudaMemcpy(es == 4 ? (void *)&v32 : (void *)&v,
                               (const char *)l->t->data + i * es, es, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return gf_cu_check(a, e, "reading a label");
    return gf_label_error(a, name, l, i, es == 4 ? v32 : v);
}

/* A deferred label check: the labels' view and rule, copied. */
struct label_check {
    struct gf_tview t;
    struct gf_labels l;
    char name[16];
};

static enum gf_status label_report(const struct gf_kernel_args *a, const struct gf_cu_check *c,
                                   int pos)
{
    struct label_check k;
    memcpy(&k, c->ctx, sizeof(k));
    k.l.t = &k.t;
    return label_error_at(a, &k.l, k.name, pos);
}

/* Before the kernels: the labels checked on the host; else *bad, the word
 * the kernels flag the first bad position in: a slot of the executor's
 * deferred checks (*deferred: read after the run, nothing waits), or the
 * workspace's word `ws`, set to INT_MAX. */
static enum gf_status labels_begin(const struct gf_kernel_args *a, const struct gf_labels *l,
                                   const char *name, size_t n_pos, int *ws, int **bad,
                                   bool *deferred)
{
    *bad = NULL;
    *deferred = false;
    if (gf_host_bytes(a, l->t))
        return gf_check_labels(a, name, l, gf_host_bytes(a, l->t), n_pos);
    struct label_check k = {.t = *l->t, .l = *l};
    snprintf(k.name, sizeof(k.name), "%s", name);
    if (n_pos && (*bad = gf_cu_defer_check(a, 0, label_report, &k, sizeof(k)))) {
        *deferred = true;
        return GF_OK;
    }
    *bad = ws;
    int v = INT_MAX;
    return gf_cu_check(a, cudaMemcpyAsync(ws, &v, sizeof(v), cudaMemcpyHostToDevice,
                                          gf_cu_stream(a)), "label check");
}

/* After the kernels: the bad label the device found, if any (one sync;
 * none for a deferred check). */
static enum gf_status labels_end(const struct gf_kernel_args *a, const struct gf_labels *l,
                                 const char *name, const int *bad, bool deferred)
{
    if (!bad || deferred)
        return GF_OK;
    int p = INT_MAX;
    cudaStream_t s = gf_cu_stream(a);
    cudaError_t e = cudaMemcpyAsync(&p, bad, sizeof(p), cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    if (e != cudaSuccess || p == INT_MAX)
        return gf_cu_check(a, e, "reading the label check");
    return label_error_at(a, l, name, p);
}

/* Cluster size for c: the knob, else (automatic) the smallest of 2, 4, 8
 * whose slices fit 64 KiB when an fp32 row exceeds 32 KiB.  16-bit rows
 * take the rows kernel: 1.31 ms against 1.68 ms (cluster 4) for bf16
 * 4096 x 128256 on an H100, where the fp32 cluster of 8 beats the rows
 * 2.15 ms to 2.48 ms (tests/bench_cuda_loss_attn). */
static int pick_cluster(const struct gf_kernel_args *a, const struct gf_cu_ce *c)
{
    int k = knob(a, K_CLUSTER);
    if (k == 1)
        return 0;
    if (k > 1)
        return gf_cu_ce_cluster_ok(c, k) ? k : 0;
    if (c->type != GF_CU_F32 || c->c * 4 <= (32 << 10))
        return 0;
    for (int cl = 2; cl <= 8; cl *= 2)
        if ((c->c + cl - 1) / cl * 4 <= (64 << 10) && gf_cu_ce_cluster_ok(c, cl))
            return cl;
    return 0;
}

/* ==== SoftmaxCrossEntropy ============================================================== */

struct sce {
    enum gf_reduction red;
    bool shift;
    struct gf_labels lab;
    size_t n_pos, c, d;
    struct lossws ws;
};

static enum gf_status sce_check(const struct gf_kernel_args *a, bool outs, struct sce *c)
{
    const struct gf_tview *x = &a->in[0];
    struct gf_sce_rule r;
    enum gf_status st = gf_sce_check(a, &r);
    if (st == GF_OK && outs)
        st = gf_sce_check_run(a, &r);
    if (st != GF_OK)
        return st;
    c->red = r.ce.red;
    c->shift = r.ce.shift;
    c->c = (size_t)r.c.value;
    c->d = r.ce.shift ? 1 : gf_dims_prod(x->dims, 2, x->rank);
    c->n_pos = gf_shape_numel(&r.pos);
    gf_labels_init(&c->lab, &a->in[1], 1, &r.ce, c->c, r.ce.shift ? (size_t)x->dims[1] - 1 : 0);
    lossws_layout(&c->ws, 0, c->n_pos);
    return GF_OK;
}

static size_t sce_workspace(const struct gf_kernel_args *a)
{
    struct sce c;
    return sce_check(a, false, &c) == GF_OK ? c.ws.end : 0;
}

static void ce_init(const struct gf_kernel_args *a, struct gf_cu_ce *k, const struct gf_labels *l,
                    size_t n_pos, size_t classes, size_t d, int *bad)
{
    memset(k, 0, sizeof(*k));
    k->t = l->t->data;
    k->t64 = l->t->dtype == GF_INT64;
    k->n_pos = (int64_t)n_pos;
    k->c = (int64_t)classes;
    k->d = (int64_t)d;
    k->s1 = (int64_t)l->s1;
    k->has_ii = l->has_ii;
    k->ii = l->ii;
    k->softmax = 1;
    k->gscale = 1.0f;
    k->bad = bad; /* NULL: checked on the host */
    (void)l->t;
    k->block = knob(a, K_BLOCK);
}

static enum gf_status sce_run(const struct gf_kernel_args *a)
{
    struct sce c;
    enum gf_status st = sce_check(a, true, &c);
    const struct gf_tview *x = &a->in[0];
    bool grad = fu_has_out(a, 2) && a->out[2].nelem;
    if (st != GF_OK || (c.red == GF_RED_NONE && c.n_pos == 0 && !grad))
        return st;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the losses");
    int *bad;
    bool deferred;
    double *gsum = ws_at(a, c.ws.gsum), *lpart = ws_at(a, c.ws.lpart);
    if ((st = labels_begin(a, &c.lab, "label T", c.n_pos, ws_at(a, c.ws.bad), &bad,
                           &deferred)) != GF_OK)
        return st;
    cudaStream_t s = gf_cu_stream(a);
    struct gf_cu_ce k;
    ce_init(a, &k, &c.lab, c.n_pos, c.c, c.d, bad);
    k.type = gf_dev_type_of(x->dtype); /* gf_cu_type's order */
    k.x = x->data;
    k.w = fu_has(a, 2) ? a->in[2].data : NULL;
    k.loss = c.red == GF_RED_NONE ? a->out[0].data : NULL;
    k.lpart = c.red == GF_RED_NONE ? NULL : lpart;
    k.logp = fu_has_out(a, 1) ? a->out[1].data : NULL;
    k.g = grad ? a->out[2].data : NULL;
    cudaError_t e = cudaSuccess;
    if (grad && c.red == GF_RED_MEAN && c.n_pos) {
        k.gsum = gsum;
        e = gf_cu_ce_weights(s, &k, gsum);
    }
    k.cluster = pick_cluster(a, &k);
    if (e == cudaSuccess)
        e = gf_cu_ce(s, &k);
    if (e == cudaSuccess && grad && c.shift) /* S = 1 too: then every row (s1 is 0) */
        e = gf_cu_ce_zero_rows(s, a->out[2].data, k.type != GF_CU_F32, x->dims[0], x->dims[1],
                               x->dims[2]);
    if (e == cudaSuccess && c.red != GF_RED_NONE)
        e = gf_cu_loss_reduce(s, lpart, (int64_t)c.n_pos, c.red == GF_RED_MEAN, a->out[0].data,
                              k.type);
    if ((st = gf_cu_check(a, e, "SoftmaxCrossEntropy")) != GF_OK || !c.n_pos)
        return st;
    return labels_end(a, &c.lab, "label T", bad, deferred);
}

/* ==== CrossEntropyGrad ================================================================== */

static enum gf_status ceg_run(const struct gf_kernel_args *a)
{
    struct gf_ceg_rule r;
    enum gf_status st = gf_ce_grad_check(a, &r);
    const struct gf_tview *g = &a->in[1];
    if (st != GF_OK || g->nelem == 0)
        return st;
    bool none = r.ce.red == GF_RED_NONE;
    int64_t sd = none && r.ce.shift ? g->dims[1] : 0;
    int64_t d = none && !r.ce.shift ? (int64_t)gf_dims_prod(g->dims, 2, g->rank) : 1;
    int64_t c = g->dims[sd ? 2 : 1];
    return gf_cu_check(a, gf_cu_ce_scale(gf_cu_stream(a), g->data, a->in[0].data,
                                         a->out[0].data, (int64_t)g->nelem, none, c, d, sd),
                       "CrossEntropyGrad");
}

/* ==== SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss (ONNX) ========================== */

static size_t nll_workspace(const struct gf_kernel_args *a)
{
    struct lossws w;
    size_t n = a->n_in > 1 ? a->in[1].nelem : 0;
    lossws_layout(&w, 0, n);
    return w.end;
}

static enum gf_status nll_run(const struct gf_kernel_args *a)
{
    struct gf_loss_rule r;
    struct gf_labels l;
    enum gf_status st = gf_nll_check(a, &r, &l);
    if (st != GF_OK)
        return st;
    const struct gf_tview *x = &a->in[r.si];
    size_t n_pos = a->in[r.ti].nelem;
    bool none = r.ce.red == GF_RED_NONE;
    if (n_pos == 0 && none)
        return GF_OK;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the losses");
    struct lossws w;
    lossws_layout(&w, 0, n_pos);
    double *lpart = ws_at(a, w.lpart);
    struct gf_labels lh = l;
    lh.t = &a->in[r.ti];
    int *bad = NULL;
    bool deferred = false;
    cudaStream_t s = gf_cu_stream(a);
    /* (gf_nll_check checked labels on the host) */
    if (!gf_host_bytes(a, l.t) &&
        (st = labels_begin(a, &lh, "labels", n_pos, ws_at(a, w.bad), &bad, &deferred)) != GF_OK)
        return st;
    struct gf_cu_ce k;
    ce_init(a, &k, &l, n_pos, l.classes, x->dims[0] ? n_pos / (size_t)x->dims[0] : 1, bad);
    k.x = x->data;
    k.w = fu_has(a, r.wi) ? a->in[r.wi].data : NULL;
    k.softmax = a->node->op == GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS;
    k.loss = none ? a->out[0].data : NULL;
    k.lpart = none ? NULL : lpart;
    k.logp = k.softmax && fu_has_out(a, 1) ? a->out[1].data : NULL;
    cudaError_t e = gf_cu_ce(s, &k);
    if (e == cudaSuccess && !none)
        e = gf_cu_loss_reduce(s, lpart, (int64_t)n_pos, r.ce.red == GF_RED_MEAN, a->out[0].data,
                              GF_CU_F32);
    if ((st = gf_cu_check(a, e, a->node->op_type)) != GF_OK || !n_pos)
        return st;
    return labels_end(a, &lh, "labels", bad, deferred);
}

static bool nll_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    (void)n;
    return n_in >= 2 && in[0].dtype == GF_FLOAT && in[0].rank >= 2 && in[0].dims[1] > 0 &&
           (in[1].dtype == GF_INT64 || in[1].dtype == GF_INT32) &&
           (n_in < 3 || in[2].dtype == GF_UNDEFINED || in[2].dtype == GF_FLOAT);
}

/* ==== SoftmaxCrossEntropyLossGrad, NLLLossGrad (ONNX) ===================================== */

/* dX [N, C, d...] (like the scores) of the ONNX losses for dLoss (scalar,
 * or per position with reduction none): SoftmaxCrossEntropyLossGrad runs
 * the cross-entropy rows with the upstream scale (G written once, the
 * scores read twice); NLLLossGrad zeros dX and writes -coef at each
 * counted position's label.  ws = [-][gsum][bad]. */
static size_t nllg_workspace(const struct gf_kernel_args *a)
{
    struct lossws w;
    (void)a;
    lossws_layout(&w, 0, 0);
    return w.end;
}

static enum gf_status nllg_run(const struct gf_kernel_args *a)
{
    struct gf_loss_rule r;
    struct gf_labels l;
    enum gf_status st = gf_nll_check(a, &r, &l);
    if (st != GF_OK)
        return st;
    bool sce = a->node->op == GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS_GRAD;
    const struct gf_tview *x = sce ? &a->in[1] : &a->out[0], *o = &a->out[0];
    size_t n_pos = l.t->nelem;
    if (n_pos == 0 && o->nelem == 0)
        return GF_OK;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the losses");
    struct lossws w;
    lossws_layout(&w, 0, 0);
    double *gsum = ws_at(a, w.gsum);
    int *bad = NULL;
    bool deferred = false;
    cudaStream_t s = gf_cu_stream(a);
    cudaError_t e = cudaSuccess;
    /* (gf_nll_check checked labels on the host) */
    if (!gf_host_bytes(a, l.t) && n_pos &&
        (st = labels_begin(a, &l, "labels", n_pos, ws_at(a, w.bad), &bad, &deferred)) != GF_OK)
        return st;
    struct gf_cu_ce k;
    ce_init(a, &k, &l, n_pos, l.classes, x->dims[0] ? n_pos / (size_t)x->dims[0] : 1, bad);
    k.w = fu_has(a, 3) ? a->in[3].data : NULL;
    bool per_pos = r.ce.red == GF_RED_NONE;
    if (e == cudaSuccess && r.ce.red == GF_RED_MEAN && n_pos) {
        k.gsum = gsum;
        e = gf_cu_ce_weights(s, &k, gsum);
    }
    if (e == cudaSuccess && sce) {
        k.x = x->data;
        k.g = o->data;
        e = gf_cu_ce_dl(s, &k, a->in[0].data, per_pos);
    } else if (e == cudaSuccess) {
        k.softmax = 0;
        if (o->nelem)
            e = cudaMemsetAsync(o->data, 0, gf_tview_bytes(o), s);
        if (e == cudaSuccess)
            e = gf_cu_nll_grad(s, &k, a->in[0].data, per_pos, o->data);
    }
    if ((st = gf_cu_check(a, e, a->node->op_type)) != GF_OK || !n_pos)
        return st;
    return labels_end(a, &l, "labels", bad, deferred);
}

/* fp32 dLoss, scores and weights; int32 / int64 labels; NLLLossGrad's
 * shape on the host (gf_check_shape_input reads it there). */
static bool nllg_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n_in < 3 || in[0].dtype != GF_FLOAT || (in[2].dtype != GF_INT64 &&
                                                in[2].dtype != GF_INT32) ||
        (n_in > 3 && in[3].dtype != GF_UNDEFINED && in[3].dtype != GF_FLOAT))
        return false;
    if (n->op == GF_OP_SOFTMAX_CROSS_ENTROPY_LOSS_GRAD)
        return in[1].dtype == GF_FLOAT && in[1].rank >= 2 && in[1].rank <= GF_MAX_RANK;
    return in[1].nelem == 0 || in[1].host;
}

/* ==== LinearCrossEntropy ================================================================ */

/* bf16 H and W (the precision pass's lm head, docs/precision.md; `supports`
 * takes bf16 only, the code reads any 16-bit type): the logits chunk z is
 * computed in fp32 from the 16-bit operands (no rounding to 16 bits), the
 * loss is fp32; in training the chunk's gradient is rounded once
 * to zb in H's type for the two gradient GEMMs on the tensor cores (as autocast
 * rounds the logits' gradient), dH is rounded once per row, and dW is summed
 * over the chunks in fp32 (dwacc) and rounded once at the end. */
struct lce {
    enum gf_reduction red;
    struct gf_labels lab;
    bool tb, train;
    enum gf_dtype dt; /* H's and W's: float, float16 or bfloat16 */
    size_t k, v, n_pos, rows, groups;
    size_t z, part, acc; /* workspace: z [R, V] floats, dBias partials, dBias sums */
    size_t zb, dwacc;    /* 16-bit H: zb [R, V] of dt, dW's fp32 sums [K, V] */
    struct lossws ws;
};

static bool lce_half(const struct lce *c)
{
    return c->dt == GF_FLOAT16 || c->dt == GF_BFLOAT16;
}

static enum gf_status lce_check(const struct gf_kernel_args *a, bool outs, struct lce *c)
{
    struct gf_lce_rule r;
    memset(c, 0, sizeof(*c));
    c->train = fu_has_out(a, 1) || fu_has_out(a, 2) || fu_has_out(a, 3);
    enum gf_status st = gf_lce_check(a, &r);
    if (st == GF_OK && outs)
        st = gf_loss_check_run(a, r.ce.red, &r.pos);
    if (st == GF_OK && outs && c->train)
        st = gf_lce_train_check(a, &r);
    if (st != GF_OK)
        return st;
    c->red = r.ce.red;
    c->tb = r.tb;
    c->dt = a->in[0].dtype;
    c->k = (size_t)r.k.value;
    c->v = (size_t)r.v.value;
    c->n_pos = gf_shape_numel(&r.pos);
    gf_labels_init(&c->lab, &a->in[2], 2, &r.ce, c->v,
                   r.ce.shift ? (size_t)a->in[0].dims[1] - 1 : 0);
    int64_t chunk = gf_node_attr_int(a->node, "chunk_rows", 0);
    if (chunk < 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "chunk_rows %lld is negative",
                               (long long)chunk);
    size_t fit = LCE_BYTES / (sizeof(float) * (c->v ? c->v : 1));
    fit = fit < 1 ? 1 : fit > LCE_MAX_ROWS ? LCE_MAX_ROWS : fit;
    c->rows = knob(a, K_CHUNK) > 0 ? (size_t)knob(a, K_CHUNK) : chunk ? (size_t)chunk : fit;
    c->rows = c->rows < c->n_pos ? c->rows : c->n_pos ? c->n_pos : 1;
    c->groups = (size_t)gf_cu_colsum_groups((int64_t)c->rows);
    c->z = 0;
    c->part = A256(c->rows * c->v * sizeof(float));
    c->acc = c->part + (fu_has_out(a, 3) ? A256(c->groups * c->v * sizeof(double)) : 0);
    size_t end = c->acc + (fu_has_out(a, 3) ? A256(c->v * sizeof(double)) : 0);
    bool half = lce_half(c);
    c->zb = end;
    end += half && c->train ? A256(c->rows * c->v * gf_dtype_size(c->dt)) : 0;
    c->dwacc = end;
    end += half && fu_has_out(a, 2) ? A256(c->k * c->v * sizeof(float)) : 0;
    lossws_layout(&c->ws, end, c->n_pos);
    return GF_OK;
}

static size_t lce_workspace(const struct gf_kernel_args *a)
{
    struct lce c;
    return lce_check(a, false, &c) == GF_OK ? c.ws.end : 0;
}

/* Positions [p0, p0 + n) on H rows [r0, r0 + n) (one batch's with shift);
 * or, with segs > 0 (shift), the positions of `segs` whole batches (n =
 * segs * S1) on their H rows [r0, r0 + segs (S1 + 1) - 1): one GEMM of
 * logits for all, the rows of no position (each batch's last) zeroed
 * before the gradient's GEMMs, so that dW's fp32 sums are read and
 * written once per `segs` batches instead of once per batch. */
static enum gf_status lce_chunk(const struct gf_kernel_args *a, const struct lce *c,
                                struct gf_cu_ce *k, size_t p0, size_t r0, size_t n, bool first,
                                size_t segs)
{
    cudaStream_t s = gf_cu_stream(a);
    size_t es = gf_dtype_size(c->dt), s1 = segs ? c->lab.s1 : 0;
    const void *h = (const char *)a->in[0].data + r0 * c->k * es, *w = a->in[1].data;
    float *z = ws_at(a, c->z);
    int64_t K = (int64_t)c->k, V = (int64_t)c->v;
    int64_t R = segs ? (int64_t)(segs * (s1 + 1) - 1) : (int64_t)n; /* H rows */
    bool bias = fu_has(a, 3) && a->in[3].nelem, half = lce_half(c);
    enum gf_status st = GF_OK;
    if (bias) { /* z = Bias broadcast over the rows, then z += h W' */
        int64_t dims[2] = {R, V}, bst[1][GF_MAX_RANK] = {{0, 1}};
        struct gf_cu_nd nd;
        gf_cu_nd_init(&nd, 2, dims, 1, bst);
        st = gf_cu_check(a, gf_cu_copy_nd(s, 4, a->in[3].data, z, &nd, R * V), "Bias");
    }
    if (st == GF_OK)
        st = gf_cu_gemm_t(a, c->dt, GF_FLOAT, false, c->tb, R, V, K, 1.0f, h, K, w,
                          c->tb ? K : V, bias ? 1.0f : 0.0f, z);
    if (st != GF_OK)
        return st;
    /* the chunk's positions: labels from element label_index(p0) on, consecutive
     * (segs: the batches' label rows from their first element, shifted by one) */
    size_t ls = c->lab.t->dtype == GF_INT32 ? 4 : 8;
    k->t = (const char *)c->lab.t->data + (gf_label_index(&c->lab, p0) - (segs ? 1 : 0)) * ls;
    k->s1 = (int64_t)s1;
    k->n_pos = (int64_t)n;
    k->pos0 = (int64_t)p0;
    k->x = z;
    k->loss = c->red == GF_RED_NONE ? (float *)a->out[0].data + p0 : NULL;
    k->lpart = c->red == GF_RED_NONE ? NULL : (double *)ws_at(a, c->ws.lpart) + 2 * p0;
    /* bf16 without dBias (which sums the fp32 gradient): the rows kernel
     * writes the gradient rounded to bf16 into zb itself, the bits a Cast
     * of its fp32 gradient would give */
    bool direct = half && c->dt == GF_BFLOAT16 && !fu_has_out(a, 3);
    k->g = c->train && !direct ? z : NULL;
    k->gb = c->train && direct ? ws_at(a, c->zb) : NULL;
    k->cluster = pick_cluster(a, k);
    if ((st = gf_cu_check(a, gf_cu_ce(s, k), "LinearCrossEntropy rows")) != GF_OK || !c->train)
        return st;
    if (segs && (st = gf_cu_check(a, gf_cu_ce_zero_rows(s, direct ? (void *)k->gb : (void *)z,
                                                        direct, (int64_t)segs,
                                                        (int64_t)s1 + 1, V),
                                  "LinearCrossEntropy rows")) != GF_OK)
        return st; /* each batch's last row: logits, no position, no gradient */
    const void *g = z; /* the chunk's gradient, in H's type */
    if (half) {
        g = ws_at(a, c->zb);
        if (!direct)
            st = gf_cu_check(a, gf_cu_cast(s, GF_CU_F32, gf_dev_type_of(c->dt), z, ws_at(a, c->zb),
                                           R * V, false), "the gradient's rounding");
    }
    if (st == GF_OK && fu_has_out(a, 1)) /* dH rows = z W'^T */
        st = gf_cu_gemm_t(a, c->dt, c->dt, false, !c->tb, R, K, V, 1.0f, g, V, w,
                          c->tb ? K : V, 0.0f, (char *)a->out[1].data + r0 * c->k * es);
    if (st == GF_OK && fu_has_out(a, 2)) { /* dW += h^T z, or z^T h */
        void *dw = half ? ws_at(a, c->dwacc) : a->out[2].data;
        if (c->tb)
            st = gf_cu_gemm_t(a, c->dt, GF_FLOAT, true, false, V, K, R, 1.0f, g, V, h, K,
                              first ? 0.0f : 1.0f, dw);
        else
            st = gf_cu_gemm_t(a, c->dt, GF_FLOAT, true, false, K, V, R, 1.0f, h, K, g, V,
                              first ? 0.0f : 1.0f, dw);
    }
    if (st == GF_OK && fu_has_out(a, 3)) {
        double *part = ws_at(a, c->part), *acc = ws_at(a, c->acc);
        cudaError_t e = gf_cu_colsum_part(s, z, part, R, V);
        if (e == cudaSuccess)
            e = gf_cu_colsum_finish(s, part, gf_cu_colsum_groups(R), V, first ? NULL : acc, acc,
                                    a->out[3].data, 1.0f);
        st = gf_cu_check(a, e, "dBias");
    }
    return st;
}

static enum gf_status lce_run(const struct gf_kernel_args *a)
{
    struct lce c;
    enum gf_status st = lce_check(a, true, &c);
    if (st != GF_OK || (c.n_pos == 0 && c.red == GF_RED_NONE && !c.train))
        return st;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the chunks");
    cudaStream_t s = gf_cu_stream(a);
    int *bad;
    bool deferred;
    double *gsum = ws_at(a, c.ws.gsum);
    if ((st = labels_begin(a, &c.lab, "label T", c.n_pos, ws_at(a, c.ws.bad), &bad,
                           &deferred)) != GF_OK)
        return st;
    struct gf_cu_ce k;
    ce_init(a, &k, &c.lab, c.n_pos, c.v, 1, bad);
    cudaError_t e = cudaSuccess;
    if (c.train && c.red == GF_RED_MEAN && c.n_pos) {
        e = gf_cu_ce_weights(s, &k, gsum);
        k.gsum = gsum;
    }
    k.s1 = 0; /* chunks are consecutive rows with consecutive labels (or whole batches) */
    if (c.train && fu_has_out(a, 1) && c.lab.s1 && e == cudaSuccess) /* the rows of no position */
        e = cudaMemsetAsync(a->out[1].data, 0, gf_tview_bytes(&a->out[1]), s);
    if (c.train && fu_has_out(a, 2) && c.n_pos == 0 && e == cudaSuccess)
        e = cudaMemsetAsync(a->out[2].data, 0, gf_tview_bytes(&a->out[2]), s);
    if (c.train && fu_has_out(a, 3) && c.n_pos == 0 && e == cudaSuccess)
        e = cudaMemsetAsync(a->out[3].data, 0, gf_tview_bytes(&a->out[3]), s);
    if ((st = gf_cu_check(a, e, "LinearCrossEntropy")) != GF_OK)
        return st;
    size_t seg = c.lab.s1 ? c.lab.s1 : c.n_pos, nseg = seg ? c.n_pos / seg : 0;
    /* with shift, whole batches per chunk where more than one fits */
    size_t group = c.lab.s1 ? c.rows / (seg + 1) : 0;
    bool first = true;
    for (size_t b = 0; group >= 2 && b < nseg && st == GF_OK; b += group) {
        size_t nb = nseg - b < group ? nseg - b : group;
        st = lce_chunk(a, &c, &k, b * seg, b * (seg + 1), nb * seg, first, nb);
        first = false;
    }
    for (size_t b = 0; group < 2 && b < nseg && st == GF_OK; b++)
        for (size_t i = 0; i < seg && st == GF_OK; i += c.rows) {
            size_t n = seg - i < c.rows ? seg - i : c.rows;
            size_t p0 = b * seg + i, r0 = c.lab.s1 ? b * (seg + 1) + i : p0;
            st = lce_chunk(a, &c, &k, p0, r0, n, first, 0);
            first = false;
        }
    if (st == GF_OK && lce_half(&c) && fu_has_out(a, 2) && c.n_pos) /* dW's sums, rounded */
        st = gf_cu_check(a, gf_cu_cast(s, GF_CU_F32, gf_dev_type_of(c.dt), ws_at(a, c.dwacc),
                                       a->out[2].data, (int64_t)(c.k * c.v), false), "dW");
    if (st == GF_OK && c.red != GF_RED_NONE)
        st = gf_cu_check(a, gf_cu_loss_reduce(s, ws_at(a, c.ws.lpart), (int64_t)c.n_pos,
                                              c.red == GF_RED_MEAN, a->out[0].data, GF_CU_F32),
                         "the loss");
    if (st != GF_OK || !c.n_pos)
        return st;
    return labels_end(a, &c.lab, "label T", bad, deferred);
}

/* ==== JSD, JSDGrad ====================================================================== */

/* Rows of X's last axis (with an empty last axis, the product of the others). */
static size_t jsd_rows(const struct gf_tview *x, size_t n)
{
    size_t rows = n ? x->nelem / n : 0;
    for (int i = 0; !n && i < x->rank - 1; i++)
        rows = (i ? rows : 1) * (size_t)x->dims[i];
    return rows;
}

/* The launch of JSD (xi 0) or JSDGrad (xi 1, dLoss first) after the checks;
 * *ws its workspace: per row (sum, counted) for JSD, one double (the rows
 * counted) for JSDGrad with labels. */
static enum gf_status jsd_setup(const struct gf_kernel_args *a, size_t xi, struct gf_cu_jsd *j,
                                size_t *ws)
{
    float beta;
    int64_t ii;
    enum gf_status st = xi ? gf_jsd_grad_check(a, &beta, &ii) : gf_jsd_check(a, &beta, &ii);
    if (st != GF_OK)
        return st;
    const struct gf_tview *x = &a->in[xi];
    bool labels = fu_has(a, xi + 2);
    memset(j, 0, sizeof(*j));
    j->x = x->data;
    j->y = a->in[xi + 1].data;
    j->t = labels ? a->in[xi + 2].data : NULL;
    j->t64 = labels && a->in[xi + 2].dtype == GF_INT64;
    j->ii = ii;
    j->beta = beta;
    j->n = x->dims[x->rank - 1];
    j->rows = (int64_t)jsd_rows(x, (size_t)j->n);
    j->block = knob(a, K_BLOCK);
    *ws = xi ? (labels ? 256 : 0) : A256(2 * (size_t)j->rows * sizeof(double));
    return GF_OK;
}

static size_t jsd_workspace(const struct gf_kernel_args *a)
{
    struct gf_cu_jsd j;
    size_t ws = 0;
    return jsd_setup(a, a->node->op == GF_OP_JSD_GRAD, &j, &ws) == GF_OK ? ws : 0;
}

static enum gf_status jsd_run(const struct gf_kernel_args *a)
{
    struct gf_cu_jsd j;
    size_t ws;
    enum gf_status st = jsd_setup(a, 0, &j, &ws);
    if (st != GF_OK)
        return st;
    if (!a->workspace && j.rows)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the row values");
    cudaStream_t s = gf_cu_stream(a);
    j.lpart = a->workspace;
    cudaError_t e = gf_cu_jsd(s, &j);
    if (e == cudaSuccess) /* the sum over the rows counted / their number, as the CPU's */
        e = gf_cu_loss_reduce(s, j.lpart, j.rows, 1, a->out[0].data, GF_CU_F32);
    return gf_cu_check(a, e, "JSD");
}

static enum gf_status jsdg_run(const struct gf_kernel_args *a)
{
    struct gf_cu_jsd j;
    size_t ws;
    enum gf_status st = jsd_setup(a, 1, &j, &ws);
    if (st != GF_OK || a->in[1].nelem == 0)
        return st;
    j.dl = a->in[0].data;
    j.dx = fu_has_out(a, 0) ? a->out[0].data : NULL;
    j.dy = fu_has_out(a, 1) ? a->out[1].data : NULL;
    if (j.t && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the rows counted");
    j.cnt = j.t ? a->workspace : NULL;
    return gf_cu_check(a, gf_cu_jsd_grad(gf_cu_stream(a), &j), "JSDGrad");
}

/* fp32 X, Y (and dLoss), int32 / int64 labels, rank <= 8. */
static bool jsd_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    size_t xi = n->op == GF_OP_JSD_GRAD, ti = xi + 2;
    if (n_in < xi + 2 || in[xi].rank > GF_MAX_RANK)
        return false;
    for (size_t i = 0; i < n_in && i < ti; i++)
        if (in[i].dtype != GF_FLOAT)
            return false;
    return ti >= n_in || in[ti].dtype == GF_UNDEFINED || in[ti].dtype == GF_INT64 ||
           in[ti].dtype == GF_INT32;
}

/* ==== the table ========================================================================== */

/* fp32 scores (and W, Bias, weights), int32 / int64 labels, rank <= 8; the
 * 16-bit forms below. */
static bool loss_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    size_t li = n->op == GF_OP_LINEAR_CROSS_ENTROPY ? 2 : 1;
    /* bf16 H, W, no Bias (the precision pass's lm head); fp16's chunk gradient
     * would lose its small values rounded to fp16: the CPU runs those */
    if (n->op == GF_OP_LINEAR_CROSS_ENTROPY && n_in > 2 && in[0].dtype == GF_BFLOAT16)
        return in[1].dtype == in[0].dtype &&
               (in[2].dtype == GF_INT64 || in[2].dtype == GF_INT32) &&
               (n_in < 4 || in[3].dtype == GF_UNDEFINED || in[3].nelem == 0) &&
               in[0].rank <= GF_MAX_RANK;
    /* fp16 / bf16 scores of SoftmaxCrossEntropy: W and the outputs in their
     * type too (gf_sce_check), computed in fp32 */
    if (n->op == GF_OP_SOFTMAX_CROSS_ENTROPY && n_in > 1 &&
        (in[0].dtype == GF_FLOAT16 || in[0].dtype == GF_BFLOAT16))
        return (in[1].dtype == GF_INT64 || in[1].dtype == GF_INT32) && in[0].rank <= GF_MAX_RANK &&
               (n_in < 3 || in[2].dtype == GF_UNDEFINED || in[2].dtype == in[0].dtype);
    if (n->op == GF_OP_CROSS_ENTROPY_GRAD)
        return n_in >= 2 && in[0].dtype == GF_FLOAT && in[1].dtype == GF_FLOAT &&
               in[1].rank <= GF_MAX_RANK;
    if (n_in <= li || (in[li].dtype != GF_INT64 && in[li].dtype != GF_INT32))
        return false;
    for (size_t i = 0; i < n_in; i++)
        if (i != li && in[i].dtype != GF_UNDEFINED &&
            (in[i].dtype != GF_FLOAT || in[i].rank > GF_MAX_RANK))
            return false;
    return in[0].dtype == GF_FLOAT;
}

/* dtype GF_UNDEFINED: `supports` checks fp32, so that a kernel is found for
 * an empty input 0 too (no data on the device: the registry sees no type). */
#define KERNEL(OP, IMPL, SUP, WS, RUN)                                                    \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = IMPL,            \
     .supports = SUP, .workspace = WS, .run = RUN, .n_knobs = 3, .knobs = knobs}

/* Kernels whose only knob is the block size (JSD, the ONNX Grad ops). */
#define KERNEL_B(OP, IMPL, SUP, WS, RUN)                                                  \
    {.op = GF_OP_##OP, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = IMPL,            \
     .supports = SUP, .workspace = WS, .run = RUN, .n_knobs = 1, .knobs = knobs}

static const struct gf_kernel kernels[] = {
    KERNEL(SOFTMAX_CROSS_ENTROPY, "cu_rows", loss_supports, sce_workspace, sce_run),
    KERNEL(CROSS_ENTROPY_GRAD, "cu_elementwise", loss_supports, NULL, ceg_run),
    KERNEL(LINEAR_CROSS_ENTROPY, "cublaslt_chunks", loss_supports, lce_workspace, lce_run),
    KERNEL(SOFTMAX_CROSS_ENTROPY_LOSS, "cu_rows", nll_supports, nll_workspace, nll_run),
    KERNEL(NEGATIVE_LOG_LIKELIHOOD_LOSS, "cu_rows", nll_supports, nll_workspace, nll_run),
    KERNEL_B(SOFTMAX_CROSS_ENTROPY_LOSS_GRAD, "cu_rows", nllg_supports, nllg_workspace,
             nllg_run),
    KERNEL_B(NLL_LOSS_GRAD, "cu_scatter", nllg_supports, nllg_workspace, nllg_run),
    KERNEL_B(JSD, "cu_rows", jsd_supports, jsd_workspace, jsd_run),
    KERNEL_B(JSD_GRAD, "cu_elementwise", jsd_supports, jsd_workspace, jsdg_run),
};

const struct gf_kernel_table gf_cuda_fused_loss_table = {kernels,
                                                         sizeof(kernels) / sizeof(kernels[0])};
