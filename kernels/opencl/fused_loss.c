/* OpenCL kernels of the fused losses (domain graphfuse, README "Fused ops";
 * device code in fused_loss.cl), fp32, fp16 and bf16 storage (computed in
 * fp32; LinearCrossEntropy's gradient outputs fp32 only, as on the CPU):
 *
 *   SoftmaxCrossEntropy  L, T, Wc? -> Loss, LogP?, G?   one slot of work-items per
 *                        position; G = d Loss / d L in the same kernel (over L in place)
 *   CrossEntropyGrad     dLoss, G -> dL             G times dLoss (scalar, or per position)
 *   LinearCrossEntropy   H, W, T, Bias? -> Loss, dH?, dW?, dBias?   chunks of rows:
 *                        a tiled GEMM writes a block of logits into the workspace, a
 *                        fold kernel merges it into each row's running max / sum; with
 *                        the training outputs the chunk's logits become its gradient
 *                        and three GEMMs give dH, dW, dBias (see the section)
 *   JSD                  X, Y, T? -> Loss           one slot per row
 *   JSDGrad              dLoss, X, Y, T? -> dX?, dY?   elementwise
 *
 * Per-position losses (and weights) go to the Loss output (reduction none)
 * or the workspace; loss_reduce adds them in a fixed order.  Labels are
 * checked on the host when their host copy exists (`host`), else on the
 * device: a bad label's position is recorded and read back after the
 * kernels (one synchronization), giving the CPU kernel's message.
 */
#include <limits.h>

#include "fused.h"

#define LOSS_FILE "fused_loss.cl"

/* flags of fused_loss.cl */
#define L_LAB64 1u
#define L_II 2u
#define L_WC 4u
#define L_LOSS 8u
#define L_LOGP 16u
#define L_BAD 32u
#define L_LABELS 64u
#define L_G 128u
#define L_GMEAN 256u
#define L_LOSS_OUT 512u

/* knobs: work-group size, positions (rows) per work-group, vector width
 * (1: scalar); LinearCrossEntropy: columns of a block of logits */
enum { K_WG, K_RPW, K_VEC, K_COLS };
static const int wg_values[] = {0, 64, 256, 1024};
static const int rpw_values[] = {0, 1, 4, 16};
static const int vec_values[] = {0, 1};
static const int cols_values[] = {0, 256, 2048, 32768};
static const struct gf_config_knob knobs[] = {
    {"wg", 4, wg_values},
    {"rows_per_wg", 4, rpw_values},
    {"vec", 2, vec_values},
    {"block_cols", 4, cols_values},
};
#define LCE_AUTO_ROWS 1024
#define LCE_TRAIN_BYTES (256u << 20) /* logits of a chunk (whole rows) */

/* ---- labels (struct gf_labels: kernels/checks.h) and reductions ---------------------- */

/* After the kernels: the bad position the device recorded, if any. */
static enum gf_status check_labels_device(const struct gf_kernel_args *a,
                                          const struct gf_labels *l, cl_mem ws, size_t bad_off)
{
    cl_command_queue q = gf_cl_of(a->backend)->queue;
    cl_int p = INT_MAX;
    cl_int err = clEnqueueReadBuffer(q, ws, CL_TRUE, bad_off, sizeof(p), &p, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "reading the label check: %s",
                               gf_cl_strerror(err));
    if (p == INT_MAX)
        return GF_OK;
    size_t i = gf_label_index(l, (size_t)p), es = l->t->dtype == GF_INT32 ? 4 : 8;
    int64_t v = 0;
    int32_t v32 = 0;
    err = clEnqueueReadBuffer(q, fcl_mem(l->t), CL_TRUE, i * es, es,
                              es == 4 ? (void *)&v32 : (void *)&v, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "reading a label: %s", gf_cl_strerror(err));
    return gf_label_error(a, "label T", l, i, es == 4 ? v32 : v);
}

/* Workspace regions (bytes) of a loss: per-position losses (none with
 * reduction none: they go to the Loss output, at offset 0), weights, the
 * bad-label word, the sum of the weights (G's divisor). */
struct lossws {
    size_t loss, wt, bad, gsum, end;
};

static void lossws_layout(struct lossws *w, size_t start, size_t n_pos, enum gf_reduction red)
{
    w->loss = start;
    w->wt = w->loss + (red == GF_RED_NONE ? 0 : fcl_align(n_pos * sizeof(float)));
    w->bad = w->wt + fcl_align(n_pos * sizeof(float));
    w->gsum = w->bad + 64;
    w->end = w->gsum + 64;
}

/* Flags for the labels: their type, ignore_index, device check. */
static cl_uint label_flags(const struct gf_labels *l)
{
    return (l->t->dtype == GF_INT64 ? L_LAB64 : 0) | (l->has_ii ? L_II : 0) |
           (l->t->host ? 0 : L_BAD);
}

/* *out (at byte offset ooff) = sum (mean: / sum of weights) of n values of
 * the workspace. */
static enum gf_status reduce_to(const struct gf_kernel_args *a, size_t voff, size_t woff,
                                size_t n, bool mean, cl_mem out, size_t ooff)
{
    cl_kernel k = fcl_kernel(a, LOSS_FILE, "loss_reduce", a->in[0].dtype, 1, NULL);
    if (!k)
        return gf_cl_fail(a, "building loss_reduce");
    cl_mem ws = (cl_mem)a->workspace;
    cl_uint lo = (cl_uint)(voff / sizeof(float)), wo = (cl_uint)(woff / sizeof(float));
    cl_uint oo = (cl_uint)(ooff / sizeof(float)), nn = (cl_uint)n, md = mean;
    if (!gf_cl_args(k, 8, ARG(ws), ARG(ws), ARG(out), ARG(lo), ARG(wo), ARG(oo), ARG(nn),
                    ARG(md)))
        return gf_cl_fail(a, "loss_reduce arguments");
    return fcl_launch(a, k, 1, fcl_wg(a, k, 1024));
}

/* Loss (in its dtype) = sum (mean: / sum of weights) of the n per-position
 * losses. */
static enum gf_status reduce_loss(const struct gf_kernel_args *a, const struct lossws *w,
                                  size_t n, bool mean)
{
    cl_kernel k = fcl_kernel(a, LOSS_FILE, "loss_out", a->out[0].dtype, 1, NULL);
    if (!k)
        return gf_cl_fail(a, "building loss_out");
    cl_mem ws = (cl_mem)a->workspace, out = fcl_mem(&a->out[0]);
    cl_uint lo = (cl_uint)(w->loss / sizeof(float)), wo = (cl_uint)(w->wt / sizeof(float));
    cl_uint nn = (cl_uint)n, md = mean;
    if (!gf_cl_args(k, 7, ARG(ws), ARG(ws), ARG(out), ARG(lo), ARG(wo), ARG(nn), ARG(md)))
        return gf_cl_fail(a, "loss_out arguments");
    return fcl_launch(a, k, 1, fcl_wg(a, k, 1024));
}

/* The label check before the kernels: host, or the device word reset. */
static enum gf_status labels_begin(const struct gf_kernel_args *a, const struct gf_labels *l,
                                   size_t n_pos, const struct lossws *w)
{
    if (l->t->host)
        return gf_check_labels(a, "label T", l, l->t->host, n_pos);
    return fcl_fill(a, (cl_mem)a->workspace, w->bad, sizeof(cl_int), INT_MAX);
}

/* ==== SoftmaxCrossEntropy ============================================================== */

struct sce {
    enum gf_reduction red;
    bool shift;
    struct gf_labels lab;
    size_t n_pos, c, d;
    struct lossws ws;
};

/* The checks (kernels/checks.c, the rule in graph/opcheck.c; the outputs
 * when `outs`) and c. */
static enum gf_status sce_check(const struct gf_kernel_args *a, bool outs, struct sce *c)
{
    const struct gf_tview *x = &a->in[0];
    struct gf_sce_rule r;
    *c = (struct sce){.lab.t = &a->in[1], .lab.slot = 1};
    enum gf_status st = gf_sce_check(a, &r);
    if (st == GF_OK && outs)
        st = gf_sce_check_run(a, &r);
    if (st != GF_OK)
        return st;
    c->red = r.ce.red;
    c->shift = r.ce.shift;
    c->lab.has_ii = r.ce.has_ii;
    c->lab.ii = r.ce.ii;
    c->lab.s1 = c->shift ? (size_t)x->dims[1] - 1 : 0;
    c->c = (size_t)r.c.value;
    c->d = c->shift ? 1 : gf_dims_prod(x->dims, 2, x->rank);
    c->n_pos = gf_shape_numel(&r.pos);
    c->lab.classes = c->c;
    lossws_layout(&c->ws, 0, c->n_pos, c->red);
    return GF_OK;
}

static size_t sce_workspace(const struct gf_kernel_args *a)
{
    struct sce c;
    return sce_check(a, false, &c) == GF_OK ? c.ws.end : 0;
}

/* G with reduction mean: the weights of the positions summed first (the
 * divisor every position's gradient needs). */
static enum gf_status sce_weight_sum(const struct gf_kernel_args *a, const struct sce *c)
{
    cl_kernel k = fcl_kernel(a, LOSS_FILE, "ce_weights", a->in[0].dtype, 1, NULL);
    if (!k)
        return gf_cl_fail(a, "building ce_weights");
    cl_mem ws = (cl_mem)a->workspace, t = fcl_mem(&a->in[1]);
    cl_mem wc = fu_has(a, 2) ? fcl_mem(&a->in[2]) : NULL;
    cl_uint wo = (cl_uint)(c->ws.wt / 4), n_pos = (cl_uint)c->n_pos, cc = (cl_uint)c->c;
    cl_uint d = (cl_uint)c->d, s1 = (cl_uint)c->lab.s1;
    cl_uint flags = label_flags(&c->lab) | (wc ? L_WC : 0);
    cl_long ii = c->lab.ii;
    if (!gf_cl_args(k, 10, ARG(t), ARG(wc), ARG(ws), ARG(wo), ARG(n_pos), ARG(cc), ARG(d),
                    ARG(s1), ARG(flags), ARG(ii)))
        return gf_cl_fail(a, "ce_weights arguments");
    enum gf_status st = fcl_launch_n(a, k, c->n_pos, 64, 0);
    return st != GF_OK ? st : reduce_to(a, c->ws.wt, c->ws.wt, c->n_pos, false, ws, c->ws.gsum);
}

static enum gf_status sce_launch(const struct gf_kernel_args *a, const struct sce *c)
{
    size_t stride = c->lab.s1 ? 1 : c->d;
    int vec = stride == 1 && c->c % 4 == 0 && fcl_knob(a, K_VEC) != 1 ? 4 : 1;
    cl_kernel k = fcl_kernel(a, LOSS_FILE, "ce_fwd", a->in[0].dtype, vec, NULL);
    if (!k)
        return gf_cl_fail(a, "building ce_fwd");
    struct fcl_rows r;
    fcl_rows_shape(a, k, c->n_pos, c->c / (size_t)vec, fcl_knob(a, K_WG), fcl_knob(a, K_RPW),
                   &r);
    cl_mem ws = (cl_mem)a->workspace, x = fcl_mem(&a->in[0]), t = fcl_mem(&a->in[1]);
    cl_mem wc = fu_has(a, 2) ? fcl_mem(&a->in[2]) : NULL;
    cl_mem lout = c->red == GF_RED_NONE ? fcl_mem(&a->out[0]) : NULL;
    cl_mem logp = fu_has_out(a, 1) ? fcl_mem(&a->out[1]) : NULL;
    cl_mem g = fu_has_out(a, 2) ? fcl_mem(&a->out[2]) : NULL;
    cl_uint flags = label_flags(&c->lab) | (lout ? L_LOSS_OUT : L_LOSS) | (wc ? L_WC : 0) |
                    (logp ? L_LOGP : 0) | (g ? L_G : 0) |
                    (g && c->red == GF_RED_MEAN ? L_GMEAN : 0);
    cl_uint lo = (cl_uint)(c->red == GF_RED_NONE ? 0 : c->ws.loss / 4);
    cl_uint wo = (cl_uint)(c->ws.wt / 4), go = (cl_uint)(c->ws.gsum / 4);
    cl_uint bo = (cl_uint)(c->ws.bad / 4), n_pos = (cl_uint)c->n_pos, cc = (cl_uint)c->c;
    cl_uint d = (cl_uint)c->d, s1 = (cl_uint)c->lab.s1, tpr = (cl_uint)r.tpr;
    cl_long ii = c->lab.ii;
    if (!gf_cl_args(k, 21, ARG(x), ARG(t), ARG(wc), ARG(ws), ARG(lout), ARG(ws), ARG(logp),
                    ARG(g), ARG(ws), ARG(ws), ARG(lo), ARG(wo), ARG(go), ARG(bo), ARG(n_pos),
                    ARG(cc), ARG(d), ARG(s1), ARG(tpr), ARG(flags), ARG(ii)))
        return gf_cl_fail(a, "ce_fwd arguments");
    return fcl_launch(a, k, r.groups, r.wg);
}

/* G's rows of L [B, S, C] that are no position (shift): zeros. */
static enum gf_status sce_zero_rows(const struct gf_kernel_args *a)
{
    const struct gf_tview *x = &a->in[0];
    cl_kernel k = fcl_kernel(a, LOSS_FILE, "ce_zero_rows", a->in[0].dtype, 1, NULL);
    if (!k)
        return gf_cl_fail(a, "building ce_zero_rows");
    cl_mem g = fcl_mem(&a->out[2]);
    cl_uint b = (cl_uint)x->dims[0], s = (cl_uint)x->dims[1], c = (cl_uint)x->dims[2];
    if (!gf_cl_args(k, 4, ARG(g), ARG(b), ARG(s), ARG(c)))
        return gf_cl_fail(a, "ce_zero_rows arguments");
    return fcl_launch_n(a, k, (size_t)b * c, 256, 0);
}

static enum gf_status sce_run(const struct gf_kernel_args *a)
{
    struct sce c;
    enum gf_status st = sce_check(a, true, &c);
    bool grad = fu_has_out(a, 2) && a->out[2].nelem;
    if (st != GF_OK || (c.red == GF_RED_NONE && c.n_pos == 0 && !grad))
        return st;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the losses");
    if ((st = labels_begin(a, &c.lab, c.n_pos, &c.ws)) != GF_OK)
        return st;
    if (grad && c.red == GF_RED_MEAN && c.n_pos && (st = sce_weight_sum(a, &c)) != GF_OK)
        return st;
    if (c.n_pos && (st = sce_launch(a, &c)) != GF_OK)
        return st;
    if (grad && c.shift && (st = sce_zero_rows(a)) != GF_OK)
        return st;
    if (!c.lab.t->host && c.n_pos &&
        (st = check_labels_device(a, &c.lab, (cl_mem)a->workspace, c.ws.bad)) != GF_OK)
        return st;
    if (c.red == GF_RED_NONE)
        return GF_OK;
    return reduce_loss(a, &c.ws, c.n_pos, c.red == GF_RED_MEAN);
}

/* ==== CrossEntropyGrad ==================================================================== */

/* knobs of the elementwise kernels: work-group size, vector width (1:
 * scalar), work-groups per compute unit */
static const int gpc_values[] = {0, 1, 8, 64};
static const struct gf_config_knob ew_knobs[] = {
    {"wg", 4, wg_values},
    {"vec", 2, vec_values},
    {"groups_per_cu", 4, gpc_values},
};
enum { E_WG, E_VEC, E_GPC };
#define EW_GPC_AUTO 8

static enum gf_status ew_launch(const struct gf_kernel_args *a, cl_kernel k, size_t n)
{
    size_t wg = fcl_wg(a, k, fcl_knob(a, E_WG) > 0 ? (size_t)fcl_knob(a, E_WG) : 256);
    size_t gpc = fcl_knob(a, E_GPC) > 0 ? (size_t)fcl_knob(a, E_GPC) : EW_GPC_AUTO;
    size_t cu = gf_cl_of(a->backend)->compute_units;
    return fcl_launch_n(a, k, n ? n : 1, wg, (cu ? cu : 1) * gpc);
}

/* The checks (kernels/checks.c, the rule in graph/opcheck.c).  *s: S with
 * shift and none, else 0; *d the positions per class plane. */
static enum gf_status ceg_check(const struct gf_kernel_args *a, bool *none, size_t *s,
                                size_t *d)
{
    const struct gf_tview *g = &a->in[1];
    struct gf_ceg_rule r;
    enum gf_status st = gf_ce_grad_check(a, &r);
    if (st != GF_OK)
        return st;
    *none = r.ce.red == GF_RED_NONE;
    *s = *none && r.ce.shift ? (size_t)g->dims[1] : 0;
    *d = *none && !r.ce.shift ? gf_dims_prod(g->dims, 2, g->rank) : 1;
    return GF_OK;
}

static enum gf_status ceg_run(const struct gf_kernel_args *a)
{
    bool none = false;
    size_t s = 0, d = 1;
    enum gf_status st = ceg_check(a, &none, &s, &d);
    const struct gf_tview *g = &a->in[1];
    if (st != GF_OK || g->nelem == 0)
        return st;
    cl_mem gm = fcl_mem(g), dl = fcl_mem(&a->in[0]), out = fcl_mem(&a->out[0]);
    cl_ulong n = g->nelem;
    if (!none) {
        int vec = fcl_knob(a, E_VEC) != 1 ? 4 : 1;
        cl_kernel k = fcl_kernel(a, LOSS_FILE, "ce_scale_all", g->dtype, vec, NULL);
        cl_ulong nv = n / (cl_ulong)vec;
        if (!k)
            return gf_cl_fail(a, "building ce_scale_all");
        if (!gf_cl_args(k, 5, ARG(gm), ARG(dl), ARG(out), ARG(nv), ARG(n)))
            return gf_cl_fail(a, "ce_scale_all arguments");
        return ew_launch(a, k, nv);
    }
    cl_kernel k = fcl_kernel(a, LOSS_FILE, "ce_scale_rows", g->dtype, 1, NULL);
    if (!k)
        return gf_cl_fail(a, "building ce_scale_rows");
    cl_uint c = (cl_uint)g->dims[s ? 2 : 1], dd = (cl_uint)d, ss = (cl_uint)s;
    if (!gf_cl_args(k, 7, ARG(gm), ARG(dl), ARG(out), ARG(n), ARG(c), ARG(dd), ARG(ss)))
        return gf_cl_fail(a, "ce_scale_rows arguments");
    return ew_launch(a, k, n);
}

/* ==== LinearCrossEntropy ================================================================= */

/* Positions in chunks of R rows, their rows of H gathered into hc [R, K].
 * Inference: a chunk's logits one block of Vc columns at a time, each block
 * folded into every row's running max / sum / label logit (st).  Training
 * (outputs dH, dW, dBias): a chunk's logits z [R, V] all at once, each row
 * turned into its gradient in place, then dHc = z W'^T (scattered to dH's
 * rows), dW += hc^T z (W [K, V]) or z^T hc (W [V, K]), dBias += z's
 * column sums.  ws = [hc][z][st (inference) or dhc (training)][losses]
 * [weights][bad][count]. */
struct lce {
    enum gf_reduction red;
    struct gf_labels lab;
    bool tb, train;
    size_t k, v, n_pos, rows, cols;
    size_t hc, z, st, dhc;
    struct lossws ws;
};

/* Rows R (chunk_rows; automatic: up to LCE_AUTO_ROWS, so that z holds
 * about LCE_TRAIN_BYTES) and columns Vc (all of V, or in inference the
 * block_cols knob when set); then the workspace layout. */
static enum gf_status lce_tiles(const struct gf_kernel_args *a, struct lce *c)
{
    int64_t chunk = gf_node_attr_int(a->node, "chunk_rows", 0);
    if (chunk < 0)
        return gf_kernel_error(a, GF_ERR_INVALID, "chunk_rows %lld is negative",
                               (long long)chunk);
    /* automatic: whole rows of logits, as in training (NVIDIA's OpenCL loses
     * the queue when the inference path splits V into column blocks, V >
     * block_cols; README "Backends", known bug) */
    bool whole = c->train || fcl_knob(a, K_COLS) <= 0;
    size_t fit = LCE_TRAIN_BYTES / (sizeof(float) * (c->v ? c->v : 1));
    c->rows = chunk ? (size_t)chunk : whole && fit < LCE_AUTO_ROWS ? fit : LCE_AUTO_ROWS;
    c->rows = c->rows < c->n_pos ? c->rows : c->n_pos;
    c->rows = c->rows ? c->rows : 1;
    c->cols = whole ? c->v : (size_t)fcl_knob(a, K_COLS);
    c->cols = c->cols > c->v ? c->v : c->cols;
    c->cols = c->cols ? c->cols : 1;
    c->hc = 0;
    c->z = fcl_align(c->rows * c->k * sizeof(float));
    c->st = c->dhc = c->z + fcl_align(c->rows * c->cols * sizeof(float));
    size_t after = c->st + fcl_align((c->train ? c->k : 3) * c->rows * sizeof(float));
    lossws_layout(&c->ws, after, c->n_pos, c->train ? GF_RED_MEAN : c->red);
    return GF_OK;
}

/* The checks (kernels/checks.c, the rule in graph/opcheck.c; the outputs
 * when `outs`), then c: k, v, the positions, the labels, the tiles and the
 * workspace layout. */
static enum gf_status lce_check(const struct gf_kernel_args *a, bool outs, struct lce *c)
{
    struct gf_lce_rule r;
    *c = (struct lce){.lab.t = &a->in[2], .lab.slot = 2,
                      .train = fu_has_out(a, 1) || fu_has_out(a, 2) || fu_has_out(a, 3)};
    enum gf_status st = gf_lce_check(a, &r);
    if (st == GF_OK && outs)
        st = gf_loss_check_run(a, r.ce.red, &r.pos);
    if (st == GF_OK && outs && c->train)
        st = gf_lce_train_check(a, &r);
    if (st != GF_OK)
        return st;
    c->red = r.ce.red;
    c->tb = r.tb;
    c->k = (size_t)r.k.value;
    c->v = (size_t)r.v.value;
    if (c->k > INT_MAX || c->v > INT_MAX)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "K or V exceeds the kernels' int");
    c->n_pos = gf_shape_numel(&r.pos);
    c->lab.has_ii = r.ce.has_ii;
    c->lab.ii = r.ce.ii;
    c->lab.classes = c->v;
    c->lab.s1 = r.ce.shift ? (size_t)a->in[0].dims[1] - 1 : 0;
    return lce_tiles(a, c);
}

static size_t lce_workspace(const struct gf_kernel_args *a)
{
    struct lce c;
    return lce_check(a, false, &c) == GF_OK ? c.ws.end : 0;
}

/* The kernels, built once per run. */
struct lce_kernels {
    cl_kernel gemm, gather, init, fold, finish, rows, scatter, dbias, count;
    struct fcl_rows fr;
};

/* One operand of gemm: a buffer, an element offset, strides (row, column). */
struct operand {
    cl_mem m;
    size_t off, s0, s1;
};

/* c = (beta ? c : 0) + bias[bio..] + A B, A m x k, B k x n (see gemm). */
static enum gf_status lce_gemm(const struct gf_kernel_args *a, cl_kernel k, struct operand A,
                               struct operand B, struct operand C, cl_mem bias, size_t bio,
                               size_t m, size_t n, size_t kk, bool beta)
{
    cl_uint ao = (cl_uint)A.off, bo = (cl_uint)B.off, co = (cl_uint)C.off, bi = (cl_uint)bio;
    cl_uint sa0 = (cl_uint)A.s0, sa1 = (cl_uint)A.s1, sb0 = (cl_uint)B.s0, sb1 = (cl_uint)B.s1;
    cl_uint ldc = (cl_uint)C.s0, mm = (cl_uint)m, nn = (cl_uint)n, k3 = (cl_uint)kk, be = beta;
    if (!gf_cl_args(k, 17, ARG(A.m), ARG(B.m), ARG(C.m), ARG(bias), ARG(ao), ARG(bo), ARG(co),
                    ARG(bi), ARG(sa0), ARG(sa1), ARG(sb0), ARG(sb1), ARG(ldc), ARG(mm), ARG(nn),
                    ARG(k3), ARG(be)))
        return gf_cl_fail(a, "gemm arguments");
    size_t global[2] = {(n + 63) / 64 * 16, (m + 63) / 64 * 16}, local[2] = {16, 16};
    return gf_cl_run(a, k, 2, global, local);
}

/* hc = the rows of H of positions [p0, p0 + nr); or (scatter) dH's rows = dhc. */
static enum gf_status lce_move(const struct gf_kernel_args *a, const struct lce *c, cl_kernel k,
                               cl_mem src, cl_mem dst, size_t off, cl_uint p0, cl_uint nr)
{
    cl_uint o = (cl_uint)(off / 4), kk = (cl_uint)c->k, s1 = (cl_uint)c->lab.s1;
    if (!gf_cl_args(k, 7, ARG(src), ARG(dst), ARG(o), ARG(nr), ARG(kk), ARG(p0), ARG(s1)))
        return gf_cl_fail(a, "lce_gather / lce_scatter arguments");
    return fcl_launch_n(a, k, (size_t)nr * c->k, 256, 4096);
}

/* W' (K x V) from column c0 as a gemm operand, or its transpose (V x K). */
static struct operand w_operand(const struct gf_kernel_args *a, const struct lce *c, size_t c0,
                                bool transposed)
{
    struct operand w = {.m = fcl_mem(&a->in[1])};
    bool rowmajor = c->tb == transposed; /* the operand's rows are W's rows */
    w.off = c->tb ? c0 * c->k : c0;
    w.s0 = rowmajor ? (c->tb ? c->k : c->v) : 1;
    w.s1 = rowmajor ? 1 : (c->tb ? c->k : c->v);
    return w;
}

static enum gf_status lce_block(const struct gf_kernel_args *a, const struct lce *c,
                                const struct lce_kernels *kk, cl_uint p0, cl_uint nr, cl_uint c0)
{
    cl_mem ws = (cl_mem)a->workspace, t = fcl_mem(&a->in[2]);
    cl_mem bias = fu_has(a, 3) ? fcl_mem(&a->in[3]) : NULL;
    size_t nc = c->v - c0 < c->cols ? c->v - c0 : c->cols;
    struct operand hc = {ws, c->hc / 4, c->k, 1}, z = {ws, c->z / 4, c->cols, 1};
    enum gf_status st = lce_gemm(a, kk->gemm, hc, w_operand(a, c, c0, false), z, bias, c0, nr,
                                 nc, c->k, false);
    if (st != GF_OK)
        return st;
    cl_uint zo = (cl_uint)(c->z / 4), so = (cl_uint)(c->st / 4), ncc = (cl_uint)nc;
    cl_uint ldz = (cl_uint)c->cols, s1 = (cl_uint)c->lab.s1, tpr = (cl_uint)kk->fr.tpr;
    cl_uint flags = label_flags(&c->lab);
    if (!gf_cl_args(kk->fold, 13, ARG(ws), ARG(ws), ARG(t), ARG(zo), ARG(so), ARG(nr), ARG(ncc),
                    ARG(ldz), ARG(p0), ARG(s1), ARG(c0), ARG(tpr), ARG(flags)))
        return gf_cl_fail(a, "lce_fold arguments");
    size_t spw = kk->fr.wg / kk->fr.tpr;
    return fcl_launch(a, kk->fold, (nr + spw - 1) / spw, kk->fr.wg);
}

/* Inference: the chunk's blocks, then its losses. */
static enum gf_status lce_chunk(const struct gf_kernel_args *a, const struct lce *c,
                                const struct lce_kernels *kk, cl_uint p0, cl_uint nr)
{
    cl_mem ws = (cl_mem)a->workspace, t = fcl_mem(&a->in[2]);
    cl_mem lout = c->red == GF_RED_NONE ? fcl_mem(&a->out[0]) : NULL;
    cl_uint so = (cl_uint)(c->st / 4), lo = (cl_uint)(c->red == GF_RED_NONE ? 0 : c->ws.loss / 4);
    cl_uint wo = (cl_uint)(c->ws.wt / 4), bo = (cl_uint)(c->ws.bad / 4);
    cl_uint s1 = (cl_uint)c->lab.s1, v = (cl_uint)c->v;
    cl_uint flags = label_flags(&c->lab) | (lout ? L_LOSS_OUT : L_LOSS);
    cl_long ii = c->lab.ii;
    if (!gf_cl_args(kk->init, 3, ARG(ws), ARG(so), ARG(nr)))
        return gf_cl_fail(a, "lce_init arguments");
    enum gf_status st = fcl_launch_n(a, kk->init, nr, 64, 0);
    for (size_t c0 = 0; st == GF_OK && c0 < c->v; c0 += c->cols)
        st = lce_block(a, c, kk, p0, nr, (cl_uint)c0);
    if (st != GF_OK)
        return st;
    if (!gf_cl_args(kk->finish, 16, ARG(ws), ARG(t), ARG(ws), ARG(lout), ARG(ws), ARG(ws),
                    ARG(so), ARG(lo), ARG(wo), ARG(bo), ARG(nr), ARG(p0), ARG(s1), ARG(v),
                    ARG(flags), ARG(ii)))
        return gf_cl_fail(a, "lce_finish arguments");
    return fcl_launch_n(a, kk->finish, nr, 64, 0);
}

/* Training: z = hc W' + Bias, the rows' losses and gradients, then dH's
 * rows, dW and dBias. */
static enum gf_status lce_train_chunk(const struct gf_kernel_args *a, const struct lce *c,
                                      const struct lce_kernels *kk, cl_uint p0, cl_uint nr)
{
    cl_mem ws = (cl_mem)a->workspace, t = fcl_mem(&a->in[2]);
    cl_mem bias = fu_has(a, 3) ? fcl_mem(&a->in[3]) : NULL;
    size_t K = c->k, V = c->v;
    struct operand hc = {ws, c->hc / 4, K, 1}, z = {ws, c->z / 4, V, 1};
    enum gf_status st = lce_gemm(a, kk->gemm, hc, w_operand(a, c, 0, false), z, bias, 0, nr, V,
                                 K, false);
    if (st != GF_OK)
        return st;
    cl_uint zo = (cl_uint)(c->z / 4), lo = (cl_uint)(c->ws.loss / 4);
    cl_uint wo = (cl_uint)(c->ws.wt / 4), bo = (cl_uint)(c->ws.bad / 4);
    cl_uint co = (cl_uint)(c->ws.gsum / 4), vv = (cl_uint)V, s1 = (cl_uint)c->lab.s1;
    cl_uint tpr = (cl_uint)kk->fr.tpr;
    cl_uint flags = label_flags(&c->lab) | (c->red == GF_RED_MEAN ? L_GMEAN : 0);
    cl_long ii = c->lab.ii;
    if (!gf_cl_args(kk->rows, 18, ARG(ws), ARG(t), ARG(ws), ARG(ws), ARG(ws), ARG(ws), ARG(zo),
                    ARG(lo), ARG(wo), ARG(bo), ARG(co), ARG(nr), ARG(vv), ARG(p0), ARG(s1),
                    ARG(tpr), ARG(flags), ARG(ii)))
        return gf_cl_fail(a, "lce_rows_grad arguments");
    size_t spw = kk->fr.wg / kk->fr.tpr;
    if ((st = fcl_launch(a, kk->rows, (nr + spw - 1) / spw, kk->fr.wg)) != GF_OK)
        return st;
    if (fu_has_out(a, 1)) { /* dhc = z W'^T, then into dH's rows */
        struct operand dhc = {ws, c->dhc / 4, K, 1};
        if ((st = lce_gemm(a, kk->gemm, z, w_operand(a, c, 0, true), dhc, NULL, 0, nr, K, V,
                           false)) != GF_OK ||
            (st = lce_move(a, c, kk->scatter, ws, fcl_mem(&a->out[1]), c->dhc, p0, nr)) != GF_OK)
            return st;
    }
    if (fu_has_out(a, 2)) { /* dW [K, V] += hc^T z, or dW [V, K] += z^T hc */
        struct operand hct = {ws, c->hc / 4, 1, K}, zt = {ws, c->z / 4, 1, V};
        struct operand dw = {fcl_mem(&a->out[2]), 0, c->tb ? K : V, 1};
        st = c->tb ? lce_gemm(a, kk->gemm, zt, hc, dw, NULL, 0, V, K, nr, true)
                   : lce_gemm(a, kk->gemm, hct, z, dw, NULL, 0, K, V, nr, true);
        if (st != GF_OK)
            return st;
    }
    if (!fu_has_out(a, 3))
        return GF_OK;
    cl_mem db = fcl_mem(&a->out[3]);
    if (!gf_cl_args(kk->dbias, 5, ARG(ws), ARG(db), ARG(zo), ARG(nr), ARG(vv)))
        return gf_cl_fail(a, "lce_dbias arguments");
    return fcl_launch_n(a, kk->dbias, V, 256, 0);
}

/* Training, before the chunks: dW, dBias (sums) and dH (rows that are no
 * position, with shift) zeroed; the positions counted for mean. */
static enum gf_status lce_train_begin(const struct gf_kernel_args *a, const struct lce *c,
                                      const struct lce_kernels *kk)
{
    enum gf_status st = GF_OK;
    for (size_t o = c->lab.s1 ? 1 : 2; o < 4 && st == GF_OK; o++)
        if (fu_has_out(a, o) && a->out[o].nelem)
            st = fcl_fill(a, fcl_mem(&a->out[o]), 0, gf_tview_bytes(&a->out[o]), 0);
    if (st != GF_OK || c->red != GF_RED_MEAN)
        return st;
    cl_mem t = fcl_mem(&a->in[2]), ws = (cl_mem)a->workspace;
    cl_uint oo = (cl_uint)(c->ws.gsum / 4), n = (cl_uint)c->n_pos, s1 = (cl_uint)c->lab.s1;
    cl_uint flags = label_flags(&c->lab);
    cl_long ii = c->lab.ii;
    if (!gf_cl_args(kk->count, 7, ARG(t), ARG(ws), ARG(oo), ARG(n), ARG(s1), ARG(flags), ARG(ii)))
        return gf_cl_fail(a, "lce_count arguments");
    return fcl_launch(a, kk->count, 1, fcl_wg(a, kk->count, 1024));
}

static enum gf_status lce_kernels_get(const struct gf_kernel_args *a, const struct lce *c,
                                      struct lce_kernels *kk)
{
    static const char *const names[9] = {"gemm", "lce_gather", "lce_init", "lce_fold",
                                         "lce_finish", "lce_rows_grad", "lce_scatter",
                                         "lce_dbias", "lce_count"};
    cl_kernel *ks[9] = {&kk->gemm, &kk->gather, &kk->init, &kk->fold, &kk->finish,
                        &kk->rows, &kk->scatter, &kk->dbias, &kk->count};
    for (int i = 0; i < 9; i++)
        if (!(*ks[i] = fcl_kernel(a, LOSS_FILE, names[i], a->in[0].dtype, 1, NULL)))
            return gf_cl_fail(a, "building the LinearCrossEntropy kernels");
    fcl_rows_shape(a, c->train ? kk->rows : kk->fold, c->rows, c->cols, fcl_knob(a, K_WG),
                   fcl_knob(a, K_RPW), &kk->fr);
    return GF_OK;
}

static enum gf_status lce_run(const struct gf_kernel_args *a)
{
    struct lce c;
    struct lce_kernels kk;
    enum gf_status st = lce_check(a, true, &c);
    if (st != GF_OK || (c.red == GF_RED_NONE && c.n_pos == 0))
        return st;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the logits blocks");
    if ((st = labels_begin(a, &c.lab, c.n_pos, &c.ws)) != GF_OK ||
        (st = lce_kernels_get(a, &c, &kk)) != GF_OK)
        return st;
    if (c.train && (st = lce_train_begin(a, &c, &kk)) != GF_OK)
        return st;
    for (size_t p0 = 0; st == GF_OK && p0 < c.n_pos; p0 += c.rows) {
        cl_uint nr = (cl_uint)(c.n_pos - p0 < c.rows ? c.n_pos - p0 : c.rows);
        st = lce_move(a, &c, kk.gather, fcl_mem(&a->in[0]), (cl_mem)a->workspace, c.hc,
                      (cl_uint)p0, nr);
        if (st == GF_OK)
            st = c.train ? lce_train_chunk(a, &c, &kk, (cl_uint)p0, nr)
                         : lce_chunk(a, &c, &kk, (cl_uint)p0, nr);
    }
    if (st == GF_OK && !c.lab.t->host && c.n_pos)
        st = check_labels_device(a, &c.lab, (cl_mem)a->workspace, c.ws.bad);
    if (st != GF_OK || c.red == GF_RED_NONE)
        return st;
    return reduce_loss(a, &c.ws, c.n_pos, c.red == GF_RED_MEAN);
}

/* ==== JSD ================================================================================ */

static enum gf_status jsd_run_rows(const struct gf_kernel_args *a, size_t rows, size_t n,
                                   const struct lossws *w, float beta, int64_t ii)
{
    cl_kernel k = fcl_kernel(a, LOSS_FILE, "jsd_rows", a->in[0].dtype, 1, NULL);
    if (!k)
        return gf_cl_fail(a, "building jsd_rows");
    struct fcl_rows r;
    fcl_rows_shape(a, k, rows, n, fcl_knob(a, K_WG), fcl_knob(a, K_RPW), &r);
    bool labels = fu_has(a, 2);
    cl_mem ws = (cl_mem)a->workspace, x = fcl_mem(&a->in[0]), y = fcl_mem(&a->in[1]);
    cl_mem t = labels ? fcl_mem(&a->in[2]) : NULL;
    cl_uint flags = labels ? L_LABELS | (a->in[2].dtype == GF_INT64 ? L_LAB64 : 0) : 0;
    cl_uint vo = (cl_uint)(w->loss / 4), co = (cl_uint)(w->wt / 4), nr = (cl_uint)rows;
    cl_uint nn = (cl_uint)n, tpr = (cl_uint)r.tpr;
    cl_long il = ii;
    if (!gf_cl_args(k, 13, ARG(x), ARG(y), ARG(t), ARG(ws), ARG(ws), ARG(vo), ARG(co), ARG(nr),
                    ARG(nn), ARG(tpr), ARG(flags), ARG(beta), ARG(il)))
        return gf_cl_fail(a, "jsd_rows arguments");
    return fcl_launch(a, k, r.groups, r.wg);
}

/* Rows of X's last axis (with an empty last axis, the product of the others). */
static size_t jsd_rows(const struct gf_tview *x, size_t n)
{
    size_t rows = n ? x->nelem / n : 0;
    for (int i = 0; !n && i < x->rank - 1; i++)
        rows = (i ? rows : 1) * (size_t)x->dims[i];
    return rows;
}

static enum gf_status jsd_check(const struct gf_kernel_args *a, float *beta, int64_t *ii,
                                struct lossws *w)
{
    const struct gf_tview *x = &a->in[0];
    enum gf_status st = gf_jsd_check(a, beta, ii); /* kernels/checks.c */
    if (st == GF_OK)
        lossws_layout(w, 0, jsd_rows(x, (size_t)x->dims[x->rank - 1]), GF_RED_MEAN);
    return st;
}

static size_t jsd_workspace(const struct gf_kernel_args *a)
{
    float beta;
    int64_t ii;
    struct lossws w;
    return jsd_check(a, &beta, &ii, &w) == GF_OK ? w.end : 0;
}

static enum gf_status jsd_run(const struct gf_kernel_args *a)
{
    float beta;
    int64_t ii;
    struct lossws w;
    enum gf_status st = jsd_check(a, &beta, &ii, &w);
    if (st != GF_OK)
        return st;
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the row values");
    const struct gf_tview *x = &a->in[0];
    size_t n = (size_t)x->dims[x->rank - 1], rows = jsd_rows(x, n);
    if (rows && (st = jsd_run_rows(a, rows, n, &w, beta, ii)) != GF_OK)
        return st;
    return reduce_loss(a, &w, rows, true);
}

/* ==== JSDGrad ============================================================================= */

#define W_DX 1u
#define W_DY 2u

/* ws = [rows counted: one float] with labels */
static size_t jsdg_workspace(const struct gf_kernel_args *a)
{
    return a->n_in > 3 && fu_has(a, 3) ? 64 : 0;
}

/* The rows whose label is not ignore_index, counted into ws[0]. */
static enum gf_status jsdg_count(const struct gf_kernel_args *a, size_t rows, int64_t ii)
{
    cl_kernel k = fcl_kernel(a, LOSS_FILE, "count_rows", a->in[1].dtype, 1, NULL);
    if (!k)
        return gf_cl_fail(a, "building count_rows");
    cl_mem t = fcl_mem(&a->in[3]), ws = (cl_mem)a->workspace;
    cl_uint oo = 0, nr = (cl_uint)rows, flags = a->in[3].dtype == GF_INT64 ? L_LAB64 : 0;
    cl_long il = ii;
    if (!gf_cl_args(k, 6, ARG(t), ARG(ws), ARG(oo), ARG(nr), ARG(flags), ARG(il)))
        return gf_cl_fail(a, "count_rows arguments");
    return fcl_launch(a, k, 1, fcl_wg(a, k, 1024));
}

static enum gf_status jsdg_run(const struct gf_kernel_args *a)
{
    float beta;
    int64_t ii;
    enum gf_status st = gf_jsd_grad_check(a, &beta, &ii);
    const struct gf_tview *x = &a->in[1];
    cl_uint want = (fu_has_out(a, 0) ? W_DX : 0) | (fu_has_out(a, 1) ? W_DY : 0);
    if (st != GF_OK || x->nelem == 0 || !want)
        return st;
    bool labels = fu_has(a, 3);
    size_t n = (size_t)x->dims[x->rank - 1], rows = x->nelem / n;
    if (labels && !a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the rows counted");
    if (labels && (st = jsdg_count(a, rows, ii)) != GF_OK)
        return st;
    cl_kernel k = fcl_kernel(a, LOSS_FILE, "jsd_grad", x->dtype, 1, NULL);
    if (!k)
        return gf_cl_fail(a, "building jsd_grad");
    cl_mem xm = fcl_mem(x), y = fcl_mem(&a->in[2]), t = labels ? fcl_mem(&a->in[3]) : NULL;
    cl_mem dl = fcl_mem(&a->in[0]), cnt = labels ? (cl_mem)a->workspace : NULL;
    cl_mem dx = want & W_DX ? fcl_mem(&a->out[0]) : NULL;
    cl_mem dy = want & W_DY ? fcl_mem(&a->out[1]) : NULL;
    cl_uint co = 0, nn = (cl_uint)n;
    cl_uint flags = labels ? L_LABELS | (a->in[3].dtype == GF_INT64 ? L_LAB64 : 0) : 0;
    cl_ulong total = x->nelem;
    float fr = (float)rows;
    cl_long il = ii;
    if (!gf_cl_args(k, 15, ARG(xm), ARG(y), ARG(t), ARG(dl), ARG(cnt), ARG(dx), ARG(dy), ARG(co),
                    ARG(total), ARG(nn), ARG(fr), ARG(flags), ARG(want), ARG(beta), ARG(il)))
        return gf_cl_fail(a, "jsd_grad arguments");
    return ew_launch(a, k, total);
}

/* ==== the table ============================================================================ */

/* Scores of one storable float type (labels int32 / int64 at `labels`),
 * 32-bit sizes. */
static bool loss_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    uint32_t labels = n->op == GF_OP_SOFTMAX_CROSS_ENTROPY ? 1u << 1 : 1u << 2;
    for (size_t i = 0; i < n_in; i++)
        if (!fcl_fits_u32(in[i].nelem))
            return false;
    /* LinearCrossEntropy of fp16 / bf16 H has an fp32 loss (graph/shape.c): the
     * CPU runs it (kernels/cpu/half.c) */
    if (n->op == GF_OP_LINEAR_CROSS_ENTROPY && n_in > 0 &&
        (in[0].dtype == GF_FLOAT16 || in[0].dtype == GF_BFLOAT16))
        return false;
    return n_in >= 2 && fcl_all_same(in, n_in, 0, labels, true);
}

#define KERNEL(OP, IMPL, RUN, WS, NK)                                                     \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = IMPL,          \
     .supports = loss_supports, .workspace = WS, .run = RUN, .n_knobs = NK, .knobs = knobs}

/* The backward ops: one storable float type (labels at `labels`), 32-bit
 * sizes. */
static bool grad_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    for (size_t i = 0; i < n_in; i++)
        if (!fcl_fits_u32(in[i].nelem))
            return false;
    return n_in >= 2 && fcl_all_same(in, n_in, 1, n->op == GF_OP_JSD_GRAD ? 1u << 3 : 0, true);
}

#define GRAD_KERNEL(OP, RUN, WS)                                                          \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "cl-elementwise", \
     .supports = grad_supports, .workspace = WS, .run = RUN, .n_knobs = 3, .knobs = ew_knobs}

static const struct gf_kernel kernels[] = {
    KERNEL(SOFTMAX_CROSS_ENTROPY, "cl-rows", sce_run, sce_workspace, 3),
    KERNEL(LINEAR_CROSS_ENTROPY, "cl-chunked", lce_run, lce_workspace, 4),
    KERNEL(JSD, "cl-rows", jsd_run, jsd_workspace, 2),
    GRAD_KERNEL(CROSS_ENTROPY_GRAD, ceg_run, NULL),
    GRAD_KERNEL(JSD_GRAD, jsdg_run, jsdg_workspace),
};

const struct gf_kernel_table gf_opencl_fused_loss_table = {
    kernels, sizeof(kernels) / sizeof(kernels[0])};
