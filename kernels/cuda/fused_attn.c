/* CUDA kernels of fused attention (device code: fused_attn.cu), fp32, fp16
 * and bf16 (Q's type; Stats fp32):
 *
 *   Attention      Q, K, V, Mask? -> O, Stats?     O = softmax(scale Q K' + Mask) V
 *   AttentionGrad  dO, Q, K, V, Mask?, O, Stats? -> dQ?, dK?, dV?
 *
 * fp16 / bf16 are storage, as the CPU's 16-bit nodes: inputs widened to
 * fp32 on load, the fp32 algorithm, each output rounded to nearest even
 * once (products of two 16-bit inputs take one TF32 mma: they are exact).
 *
 * Flash-style on the tensor cores (3xTF32 products: fp32's accuracy):
 * tiles of 16 W queries x 64 keys in shared memory, an online softmax, no
 * [Sq, Sk] matrix in memory; the backward reads each row's max and 1 / sum
 * from Stats (which autodiff asks the forward for), else finds them first.
 * A Mask with a host copy that is causal (0 on and below the bottom-right
 * aligned diagonal, -inf or below -1e30 above, the same for every item) is
 * not read: the tiles above the diagonal are skipped.  zero_masked_rows: a
 * row that sees no key gives O = 0 and no gradient.  Head dims up to 128;
 * larger ones are declined (the CPU's).
 * Knob "warps": W, warps per block (16 rows each), 4 or 8.  (dQ added
 * with float atomics by dK and dV's kernel instead of its own pass was
 * measured slower at 8 x 16 x 512 x 64 and is not deterministic: gone.)
 * ws (AttentionGrad) = [row max, 1 / row sum: 2 x items x Sq (unused with
 * Stats)][delta: items x Sq].
 */
#include <pthread.h>

#include "cu.h"
#include "gf_half.h"
#include "launch_mla.h"

struct attn {
    struct gf_attn_rule r;
    struct gf_cu_attn k;
};

/* knob: warps per block */
static const int warps_values[] = {4, 8};
static const struct gf_config_knob knobs[] = {{"warps", 2, warps_values}};

/* Element i of the host mask m of type dt, widened. */
static float mask_at(const void *m, enum gf_dtype dt, int64_t i)
{
    if (dt == GF_FLOAT16)
        return gf_half_to_float(((const uint16_t *)m)[i]);
    if (dt == GF_BFLOAT16)
        return gf_bf16_to_float(((const uint16_t *)m)[i]);
    return ((const float *)m)[i];
}

/* Whether the host mask m (type dt, strides st over [b..., Sq, Sk]) is
 * causal. */
static bool causal_of(const void *m, enum gf_dtype dt, int rank, const int64_t *st, int64_t sq,
                      int64_t sk)
{
    for (int i = 0; i < rank - 2; i++)
        if (st[i] != 0)
            return false;
    int64_t si = st[rank - 2], sj = st[rank - 1];
    for (int64_t i = 0; i < sq; i++)
        for (int64_t j = 0; j < sk; j++) {
            float v = mask_at(m, dt, i * si + j * sj);
            bool masked = j > i + (sk - sq);
            if (masked ? !(v <= -1e30f) : v != 0.0f)
                return false;
        }
    return sq <= sk;
}

/* A small cache of that answer per host pointer and shape. */
static bool causal_cached(const void *m, enum gf_dtype dt, int rank, const int64_t *st,
                          int64_t sq, int64_t sk)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static struct {
        const void *m;
        enum gf_dtype dt;
        int64_t sq, sk, si, sj;
        bool causal;
    } cache[16];
    static unsigned next;
    bool hit = false, res = false;
    pthread_mutex_lock(&mu);
    for (unsigned i = 0; i < 16 && !hit; i++)
        if (cache[i].m == m && cache[i].dt == dt && cache[i].sq == sq && cache[i].sk == sk &&
            cache[i].si == st[rank - 2] && cache[i].sj == st[rank - 1])
            hit = true, res = cache[i].causal;
    pthread_mutex_unlock(&mu);
    if (hit)
        return res;
    res = causal_of(m, dt, rank, st, sq, sk);
    pthread_mutex_lock(&mu);
    unsigned i = next++ % 16;
    cache[i].m = m, cache[i].dt = dt, cache[i].sq = sq, cache[i].sk = sk;
    cache[i].si = st[rank - 2], cache[i].sj = st[rank - 1], cache[i].causal = res;
    pthread_mutex_unlock(&mu);
    return res;
}

static enum gf_status attn_check(const struct gf_kernel_args *a, size_t qi, bool outs,
                                 struct attn *c)
{
    memset(c, 0, sizeof(*c));
    enum gf_status st = gf_attn_check(a, qi, &c->r);
    if (st == GF_OK && outs)
        st = gf_attn_check_run(a, qi, &c->r);
    if (st != GF_OK)
        return st;
    const struct gf_tview *q = &a->in[qi];
    struct gf_cu_attn *k = &c->k;
    if (q->dtype == GF_FLOAT16)
        k->type = GF_CU_F16;
    else if (q->dtype == GF_BFLOAT16)
        k->type = GF_CU_BF16;
    else if (q->dtype == GF_FLOAT)
        k->type = GF_CU_F32;
    else
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "Q is %s: float, float16 or bfloat16 only",
                               gf_dtype_name(q->dtype));
    k->sq = c->r.sq.value, k->sk = c->r.sk.value, k->d = c->r.d.value, k->dv = c->r.dv.value;
    k->tb = c->r.tb;
    k->scale = c->r.scale;
    k->zero_rows = c->r.zero_rows;
    k->warps = a->config && a->config[0] == 8 ? 8 : 4;
    k->items = 1;
    for (int i = 0; i < q->rank - 2; i++)
        k->items *= q->dims[i];
    if (!gf_cu_attn_ok(k->d, k->dv))
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "head dims %lld, %lld: the CUDA kernels "
                               "take up to 128", (long long)k->d, (long long)k->dv);
    if (fu_has(a, qi + 3) && a->in[qi + 3].nelem) {
        const struct gf_tview *m = &a->in[qi + 3];
        struct gf_tview sv = {.dtype = GF_FLOAT};
        int64_t sdims[GF_MAX_RANK], mst[GF_MAX_RANK];
        int rank = gf_shape_dims(&c->r.scores, sdims);
        gf_tview_set_shape(&sv, rank, sdims);
        gf_bcast_strides(m, &sv, mst);
        if (m->host && causal_cached(m->host, m->dtype, rank, mst, k->sq, k->sk)) {
            k->causal = 1;
        } else {
            k->mask = m->data;
            k->mst_i = mst[rank - 2];
            k->mst_j = mst[rank - 1];
            k->mrank = rank - 2;
            for (int i = 0; i < rank - 2; i++)
                k->mbd[i] = sdims[i], k->mbs[i] = mst[i];
        }
    }
    return GF_OK;
}

/* The mask's tile classes (k.tiles): a byte per 64 x 64 tile per item,
 * where a mask input is given (whether it is read is known at run time). */
static size_t tiles_bytes(const struct gf_kernel_args *a, size_t qi, const struct attn *c)
{
    if (!fu_has(a, qi + 3) || !a->in[qi + 3].nelem)
        return 0;
    return (gf_cu_attn_tiles_bytes(&c->k) + 255) / 256 * 256;
}

static size_t attn_workspace(const struct gf_kernel_args *a)
{
    struct attn c;
    if (a->n_in < 3 || attn_check(a, 0, false, &c) != GF_OK)
        return 0;
    return tiles_bytes(a, 0, &c);
}

static enum gf_status attn_run(const struct gf_kernel_args *a)
{
    struct attn c;
    enum gf_status st = attn_check(a, 0, true, &c);
    if (st != GF_OK || a->out[0].nelem == 0)
        return st;
    if (c.k.mask && a->workspace && tiles_bytes(a, 0, &c))
        c.k.tiles = a->workspace;
    c.k.q = a->in[0].data, c.k.k = a->in[1].data, c.k.v = a->in[2].data;
    c.k.out = a->out[0].data;
    c.k.stats = fu_has_out(a, 1) && a->out[1].nelem ? a->out[1].data : NULL;
    return gf_cu_check(a, gf_cu_attn_fwd(gf_cu_stream(a), &c.k), "Attention");
}

static size_t attn_grad_workspace(const struct gf_kernel_args *a)
{
    struct attn c;
    if (a->n_in < 6 || attn_check(a, 1, false, &c) != GF_OK)
        return 0;
    size_t stats = ((size_t)(3 * c.k.items * c.k.sq) * sizeof(float) + 255) / 256 * 256;
    return stats + tiles_bytes(a, 1, &c) + 256;
}

static enum gf_status attn_grad_run(const struct gf_kernel_args *a)
{
    struct attn c;
    enum gf_status st = attn_check(a, 1, true, &c);
    if (st != GF_OK || c.k.items == 0)
        return st;
    if (!a->workspace && c.k.sq)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the row statistics");
    c.k.dout = a->in[0].data, c.k.q = a->in[1].data, c.k.k = a->in[2].data;
    c.k.v = a->in[3].data, c.k.o = a->in[5].data;
    c.k.dq = fu_has_out(a, 0) ? a->out[0].data : NULL;
    c.k.dk = fu_has_out(a, 1) ? a->out[1].data : NULL;
    c.k.dvv = fu_has_out(a, 2) ? a->out[2].data : NULL;
    c.k.lse = a->workspace;
    c.k.delta = c.k.lse ? c.k.lse + 2 * c.k.items * c.k.sq : NULL;
    if (fu_has(a, 6) && a->in[6].nelem) { /* the forward's Stats, read, not written */
        c.k.lse = a->in[6].data;
        c.k.have_stats = 1;
    }
    size_t stats = ((size_t)(3 * c.k.items * c.k.sq) * sizeof(float) + 255) / 256 * 256;
    if (c.k.mask && a->workspace && tiles_bytes(a, 1, &c))
        c.k.tiles = (unsigned char *)a->workspace + stats;
    return gf_cu_check(a, gf_cu_attn_bwd(gf_cu_stream(a), &c.k), "AttentionGrad");
}

/* fp32, fp16 or bf16 (Q's type: every input but AttentionGrad's Stats,
 * fp32), rank <= 8, head dims up to 128. */
static bool attn_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    bool grad = n->op == GF_OP_ATTENTION_GRAD;
    size_t qi = grad ? 1 : 0;
    if (n_in < qi + 3)
        return false;
    enum gf_dtype dt = in[qi].dtype;
    if (dt != GF_FLOAT && dt != GF_FLOAT16 && dt != GF_BFLOAT16)
        return false;
    for (size_t i = 0; i < n_in; i++) {
        enum gf_dtype want = grad && i == 6 ? GF_FLOAT : dt;
        if (in[i].dtype != GF_UNDEFINED && (in[i].dtype != want || in[i].rank > GF_MAX_RANK))
            return false;
    }
    const struct gf_tview *q = &in[qi], *v = &in[qi + 2];
    return q->rank >= 2 && v->rank >= 2 &&
           gf_cu_attn_ok(q->dims[q->rank - 1], v->dims[v->rank - 1]);
}

static const struct gf_kernel kernels[] = {
    {.op = GF_OP_ATTENTION, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "cu_flash",
     .supports = attn_supports, .workspace = attn_workspace, .run = attn_run, .n_knobs = 1,
     .knobs = knobs},
    {.op = GF_OP_ATTENTION_GRAD, .backend = "cuda", .dtype = GF_UNDEFINED, .impl = "cu_flash",
     .supports = attn_supports, .workspace = attn_grad_workspace, .run = attn_grad_run,
     .n_knobs = 1, .knobs = knobs},
};

const struct gf_kernel_table gf_cuda_fused_attn_table = {kernels,
                                                         sizeof(kernels) / sizeof(kernels[0])};
