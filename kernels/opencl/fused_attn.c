/* OpenCL kernels of fused attention (domain graphfuse, README "Fused ops";
 * device code in fused_attn.cl), float storage and fp16 / bf16 storage
 * computed in float:
 *
 *   Attention      Q, K, V, Mask? -> O, Stats?  attn_fwd
 *   AttentionGrad  dO, Q, K, V, Mask?, O, Stats? -> dQ?, dK?, dV?
 *                                               attn_dq, then attn_dkv (Stats
 *                                               not read: attn_dq finds them)
 *
 * FlashAttention on the device: the forward makes one work-group per
 * (batch·head item, block of query rows), stages K and V tiles in local
 * memory and keeps each row's running max and sum, so the [Sq, Sk] scores
 * never reach global memory.  The backward recomputes the probabilities:
 * attn_dq (over query blocks) writes each row's max, sum and rowsum(dO O)
 * into the workspace and computes dQ; attn_dkv (over key blocks) reads
 * them back to compute dK and dV.  No float atomics: results do not
 * depend on timing.
 *
 * Tiles: the knobs ask for query rows and keys per tile and a work-group
 * size; the tiles are then shrunk until their local memory fits (at most
 * 48 KiB, what NVIDIA's OpenCL gives) and the register accumulators (8 or
 * 32 a work-item: the MAXO program variant) hold a tile's outputs.  Head
 * dims up to MAX_HEAD (e.g. 256 with tiles of 8 rows) fit that way.
 */
#include "fused.h"

#define ATTN_FILE "fused_attn.cl"
#define MAX_HEAD 1024            /* D and Dv; beyond, the CPU kernel runs */
#define LOCAL_CAP (48 * 1024)    /* bytes of local memory a tile may use */
#define LOCAL_SLACK 256          /* left to the implementation */

/* flags of fused_attn.cl */
#define F_TB 1u
#define F_MASK 2u
#define F_DQ 4u
#define F_DK 8u
#define F_DV 16u
#define F_ZERO 32u
#define F_STATS 64u

/* knobs: query rows of a tile, keys of a tile, work-group size */
enum { K_ROWS, K_KEYS, K_WG };
static const int rows_values[] = {0, 8, 16, 32, 64};
static const int keys_values[] = {0, 8, 16, 32, 64};
static const int wg_values[] = {0, 64, 128, 256};
static const struct gf_config_knob knobs[] = {
    {"rows_per_wg", 5, rows_values},
    {"key_tile", 5, keys_values},
    {"wg", 4, wg_values},
};
#define WG_AUTO 128

/* struct attn_arg of fused_attn.cl */
struct attn_arg {
    cl_uint rows; /* items * Sq */
    cl_uint sq, sk, d, dv, bq, bk, flags;
    cl_float scale;
    cl_uint mrank, mdims[GF_MAX_RANK - 2], mst[GF_MAX_RANK - 2];
    cl_uint mrs, mcs;
};

/* A node checked. */
struct attn {
    size_t items, sq, sk, d, dv;
    struct attn_arg arg; /* bq, bk are set per kernel */
};

static bool storage_ok(enum gf_dtype t)
{
    return t == GF_FLOAT || t == GF_FLOAT16 || t == GF_BFLOAT16;
}

/* ---- checks ------------------------------------------------------------------------- */

/* The checks of Attention (qi 0) or AttentionGrad (qi 1): inputs, shapes,
 * attributes (kernels/checks.c, the rule in graph/opcheck.c), and the
 * outputs when `outs`; then c: the kernels' shape argument (Mask's strides
 * over the scores). */
static enum gf_status attn_check(const struct gf_kernel_args *a, size_t qi, bool outs,
                                 struct attn *c)
{
    struct gf_attn_rule r;
    const struct gf_tview *q = &a->in[qi];
    *c = (struct attn){0};
    enum gf_status st = gf_attn_check(a, qi, &r);
    if (st == GF_OK && outs)
        st = gf_attn_check_run(a, qi, &r);
    if (st != GF_OK)
        return st;
    if (!storage_ok(q->dtype))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "Q is %s: float, float16 and bfloat16 only",
                               gf_dtype_name(q->dtype));
    int rk = q->rank;
    c->sq = (size_t)r.sq.value, c->sk = (size_t)r.sk.value;
    c->d = (size_t)r.d.value, c->dv = (size_t)r.dv.value;
    c->items = gf_dims_prod(q->dims, 0, rk - 2);
    c->arg = (struct attn_arg){.rows = (cl_uint)(c->items * c->sq), .sq = (cl_uint)c->sq,
                               .sk = (cl_uint)c->sk, .d = (cl_uint)c->d, .dv = (cl_uint)c->dv,
                               .flags = (r.tb ? F_TB : 0) | (r.zero_rows ? F_ZERO : 0),
                               .scale = r.scale};
    for (size_t k = 0; qi && k < 3; k++)
        if (fu_has_out(a, k))
            c->arg.flags |= F_DQ << k;
    if (!fu_has(a, qi + 3))
        return GF_OK;
    int64_t sdims[GF_MAX_RANK], st3[GF_MAX_RANK];
    gf_shape_dims(&r.scores, sdims);
    fu_strides(&a->in[qi + 3], rk, sdims, st3);
    c->arg.flags |= F_MASK;
    c->arg.mrank = (cl_uint)(rk - 2);
    for (int i = 0; i < rk - 2; i++) {
        c->arg.mdims[i] = (cl_uint)q->dims[i];
        c->arg.mst[i] = (cl_uint)st3[i];
    }
    c->arg.mrs = (cl_uint)st3[rk - 2];
    c->arg.mcs = (cl_uint)st3[rk - 1];
    return GF_OK;
}

/* ---- tiles ---------------------------------------------------------------------------- */

enum kind { FWD, DQ, DKV };
static const char *const kernel_names[3] = {"attn_fwd", "attn_dq", "attn_dkv"};

/* One kernel's launch. */
struct launch {
    cl_kernel k;
    size_t bq, bk, wg, groups, local_bytes;
};

/* Floats of local memory a work-group uses (the layouts in fused_attn.cl). */
static size_t local_floats(enum kind kind, size_t bq, size_t bk, size_t d, size_t dv)
{
    size_t lq = d | 1, lo = dv | 1, ls = bk | 1, kv = bk * (lq > lo ? lq : lo);
    switch (kind) {
    case FWD: return bq * lq + kv + bq * ls + 3 * bq;
    case DQ: return bq * lq + bq * lo + kv + 2 * bq * ls + 3 * bq;
    default: return bk * lq + bk * lo + bq * lq + bq * lo + 2 * bq * ls + 3 * bq;
    }
}

/* Outputs a work-group accumulates in registers. */
static size_t acc_entries(enum kind kind, size_t bq, size_t bk, size_t d, size_t dv)
{
    return kind == FWD ? bq * dv : kind == DQ ? bq * d : bk * (d > dv ? d : dv);
}

static cl_kernel attn_kernel(const struct gf_kernel_args *a, enum kind kind, int maxo,
                             enum gf_dtype dt)
{
    char opts[64];
    snprintf(opts, sizeof(opts), "-DMAXO=%d %s", maxo, gf_cl_storage_opt(dt));
    return gf_cl_kernel(a->backend, ATTN_FILE, kernel_names[kind], opts);
}

/* Tile sizes asked for: the knobs, or a size from the head dims. */
static void tiles_wanted(const struct gf_kernel_args *a, const struct attn *c, size_t *bq,
                         size_t *bk)
{
    size_t big = c->d > c->dv ? c->d : c->dv;
    *bq = fcl_knob(a, K_ROWS) > 0 ? (size_t)fcl_knob(a, K_ROWS)
          : big <= 64             ? 64
          : big <= 128            ? 32
                                  : 16;
    *bk = fcl_knob(a, K_KEYS) > 0 ? (size_t)fcl_knob(a, K_KEYS) : big <= 128 ? 32 : 16;
    size_t sq = fcl_pow2_ceil(c->sq ? c->sq : 1), sk = fcl_pow2_ceil(c->sk ? c->sk : 1);
    *bq = *bq < sq ? *bq : sq;
    *bk = *bk < sk ? *bk : sk;
}

/* Halves the tile that the kernel's accumulators scale with (DKV: keys),
 * false when it is 1 already. */
static bool shrink_acc_tile(enum kind kind, size_t *bq, size_t *bk)
{
    size_t *t = kind == DKV ? bk : bq;
    if (*t == 1)
        return false;
    *t /= 2;
    return true;
}

/* The kernel of `kind` with its tiles, work-group, MAXO variant and local
 * memory for this node on this device. */
static enum gf_status plan(const struct gf_kernel_args *a, const struct attn *c,
                           enum gf_dtype dt, enum kind kind, struct launch *l)
{
    const struct gf_cl *cl = gf_cl_of(a->backend);
    size_t cap = cl->local_mem < LOCAL_CAP ? (size_t)cl->local_mem : LOCAL_CAP;
    size_t budget = (cap > LOCAL_SLACK ? cap - LOCAL_SLACK : 0) / sizeof(float);
    size_t bq, bk;
    tiles_wanted(a, c, &bq, &bk);
    while (local_floats(kind, bq, bk, c->d, c->dv) > budget && (bq > 1 || bk > 1)) {
        if (bk >= bq)
            bk /= 2;
        else
            bq /= 2;
    }
    if (local_floats(kind, bq, bk, c->d, c->dv) > budget)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "D %zu and Dv %zu need more local memory "
                               "than the device has", c->d, c->dv);
    int maxo = 8;
    size_t want = fcl_knob(a, K_WG) > 0 ? (size_t)fcl_knob(a, K_WG) : WG_AUTO;
    if (!(l->k = attn_kernel(a, kind, maxo, dt)))
        return gf_cl_fail(a, "building the attention kernel");
    l->wg = fcl_wg(a, l->k, want);
    if (acc_entries(kind, bq, bk, c->d, c->dv) > l->wg * (size_t)maxo) {
        maxo = 32;
        if (!(l->k = attn_kernel(a, kind, maxo, dt)))
            return gf_cl_fail(a, "building the attention kernel");
        l->wg = fcl_wg(a, l->k, l->wg);
    }
    while (acc_entries(kind, bq, bk, c->d, c->dv) > l->wg * (size_t)maxo)
        if (!shrink_acc_tile(kind, &bq, &bk))
            return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "D %zu and Dv %zu do not fit the "
                                   "work-group's registers", c->d, c->dv);
    size_t n = kind == DKV ? c->sk : c->sq, blk = kind == DKV ? bk : bq;
    l->bq = bq;
    l->bk = bk;
    l->groups = c->items * ((n + blk - 1) / blk);
    l->local_bytes = local_floats(kind, bq, bk, c->d, c->dv) * sizeof(float);
    return GF_OK;
}

/* Sets arguments 0 .. n-1 (buffers), then the local buffer and the shape. */
static enum gf_status launch(const struct gf_kernel_args *a, struct launch *l,
                             const struct attn *c, const cl_mem *bufs, int n)
{
    struct attn_arg arg = c->arg;
    arg.bq = (cl_uint)l->bq;
    arg.bk = (cl_uint)l->bk;
    for (int i = 0; i < n; i++)
        if (clSetKernelArg(l->k, (cl_uint)i, sizeof(cl_mem), &bufs[i]) != CL_SUCCESS)
            return gf_kernel_error(a, GF_ERR_INTERNAL, "setting attention argument %d failed",
                                   i);
    if (clSetKernelArg(l->k, (cl_uint)n, l->local_bytes, NULL) != CL_SUCCESS ||
        clSetKernelArg(l->k, (cl_uint)n + 1, sizeof(arg), &arg) != CL_SUCCESS)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "setting the attention kernel's local "
                               "memory (%zu bytes) and shape failed", l->local_bytes);
    return fcl_launch(a, l->k, l->groups, l->wg);
}

/* ---- the kernels ---------------------------------------------------------------------- */

static enum gf_status attn_run(const struct gf_kernel_args *a)
{
    struct attn c;
    enum gf_status st = attn_check(a, 0, true, &c);
    if (st != GF_OK || a->out[0].nelem == 0)
        return st;
    bool stats = fu_has_out(a, 1) && a->out[1].nelem;
    if (c.sk == 0) { /* a softmax over no keys times no rows of V; Stats 0 (no key seen) */
        st = fcl_fill(a, fcl_mem(&a->out[0]), 0, gf_tview_bytes(&a->out[0]), 0);
        if (st == GF_OK && stats)
            st = fcl_fill(a, fcl_mem(&a->out[1]), 0, gf_tview_bytes(&a->out[1]), 0);
        return st;
    }
    struct launch l;
    if ((st = plan(a, &c, a->in[0].dtype, FWD, &l)) != GF_OK)
        return st;
    if (stats)
        c.arg.flags |= F_STATS;
    cl_mem bufs[6] = {fcl_mem(&a->in[0]), fcl_mem(&a->in[1]), fcl_mem(&a->in[2]),
                      fu_has(a, 3) ? fcl_mem(&a->in[3]) : NULL, fcl_mem(&a->out[0]),
                      stats ? fcl_mem(&a->out[1]) : NULL};
    return launch(a, &l, &c, bufs, 6);
}

/* Workspace of AttentionGrad: each query row's max, sum and rowsum(dO O). */
static size_t grad_workspace(const struct gf_kernel_args *a)
{
    struct attn c;
    if (a->n_in < 6 || attn_check(a, 1, false, &c) != GF_OK)
        return 0;
    return fcl_align(3 * c.items * c.sq * sizeof(float));
}

/* No queries or no keys: the wanted outputs are zeros (or empty). */
static enum gf_status grad_zeros(const struct gf_kernel_args *a)
{
    for (size_t k = 0; k < 3; k++)
        if (fu_has_out(a, k) && a->out[k].nelem) {
            enum gf_status st = fcl_fill(a, fcl_mem(&a->out[k]), 0,
                                         gf_tview_bytes(&a->out[k]), 0);
            if (st != GF_OK)
                return st;
        }
    return GF_OK;
}

static enum gf_status attn_grad_run(const struct gf_kernel_args *a)
{
    struct attn c;
    enum gf_status st = attn_check(a, 1, true, &c);
    if (st != GF_OK || c.items == 0 || !(c.arg.flags & (F_DQ | F_DK | F_DV)))
        return st;
    if (c.sq == 0 || c.sk == 0)
        return grad_zeros(a);
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the softmax statistics");
    enum gf_dtype dt = a->in[1].dtype;
    cl_mem ws = (cl_mem)a->workspace, mask = fu_has(a, 4) ? fcl_mem(&a->in[4]) : NULL;
    cl_mem dq = fu_has_out(a, 0) ? fcl_mem(&a->out[0]) : NULL;
    cl_mem dk = fu_has_out(a, 1) ? fcl_mem(&a->out[1]) : NULL;
    cl_mem dv = fu_has_out(a, 2) ? fcl_mem(&a->out[2]) : NULL;
    cl_mem dout = fcl_mem(&a->in[0]), q = fcl_mem(&a->in[1]), k = fcl_mem(&a->in[2]);
    cl_mem v = fcl_mem(&a->in[3]), o = fcl_mem(&a->in[5]);
    struct launch l;
    if ((st = plan(a, &c, dt, DQ, &l)) != GF_OK)
        return st;
    cl_mem qbufs[8] = {dout, q, k, v, mask, o, dq, ws};
    if ((st = launch(a, &l, &c, qbufs, 8)) != GF_OK || !(c.arg.flags & (F_DK | F_DV)))
        return st;
    if ((st = plan(a, &c, dt, DKV, &l)) != GF_OK)
        return st;
    cl_mem kbufs[8] = {dout, q, k, v, mask, dk, dv, ws};
    return launch(a, &l, &c, kbufs, 8);
}

/* ---- the table -------------------------------------------------------------------------- */

/* Float, fp16 or bf16 storage; every tensor indexable with 32 bits; head
 * dims up to MAX_HEAD.  Bad shapes are left to `run`, which names them. */
static bool attn_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    size_t qi = n->op == GF_OP_ATTENTION_GRAD ? 1 : 0;
    if (n_in < qi + 3 || !storage_ok(in[qi].dtype))
        return false;
    for (size_t i = 0; i < n_in; i++)
        if (!fcl_fits_u32(in[i].nelem) || in[i].rank > GF_MAX_RANK)
            return false;
    const struct gf_tview *q = &in[qi], *v = &in[qi + 2];
    return q->rank < 2 || v->rank < 2 ||
           (q->dims[q->rank - 1] <= MAX_HEAD && v->dims[v->rank - 1] <= MAX_HEAD);
}

static const struct gf_kernel kernels[] = {
    {.op = GF_OP_ATTENTION, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "cl-flash",
     .supports = attn_supports, .run = attn_run, .n_knobs = 3, .knobs = knobs},
    {.op = GF_OP_ATTENTION_GRAD, .backend = "opencl", .dtype = GF_UNDEFINED,
     .impl = "cl-flash", .supports = attn_supports, .workspace = grad_workspace,
     .run = attn_grad_run, .n_knobs = 3, .knobs = knobs},
};

const struct gf_kernel_table gf_opencl_fused_attn_table = {
    kernels, sizeof(kernels) / sizeof(kernels[0])};
