/*
 * Speed of the CUDA loss, attention and MatMulEpilogue kernels (kernels/cuda/
 * fused_loss.c, fused_attn.c, matmul.c), fp32 (TF32 off), next to the
 * device's measured device-to-device copy (be->ops->copy of 1 GiB).
 *
 *   build/tests/bench_cuda_loss_attn [--reps N] [--attn-only | --ce-only]
 *
 * Without a CUDA device it says so and exits 0.  First it checks each timed
 * kernel against the CPU kernel on small shapes (so no broken kernel is
 * timed), then times, median of --reps runs (default 20) of INNER launches
 * and one sync, after 3 warm-up runs:
 *   - SoftmaxCrossEntropy fwd+bwd 4096 x 128256 (reduction mean, G over the
 *     logits in place): GB/s on 2 BT V fp32 elements (Liger Kernel's measure:
 *     one read of the logits, one write of the gradient), the automatic
 *     choice (cluster) and the plain two-pass rows (cluster=1);
 *   - LinearCrossEntropy 8192 x 4096 x 32000 (W [V, K], transB=1; loss, dH,
 *     dW): ms, the workspace (extra memory) against the logits' 1 GiB;
 *   - Attention fwd (with its Stats output) and AttentionGrad (reading them)
 *     at B=8, 16 heads, T=512, d=64, causal
 *     (the mask a host constant; GQA 16/8 is the same work once K and V are
 *     expanded, as the graph does before Attention), for each setting of
 *     the knob "warps" (4, 8); then with the mask in device memory only
 *     (read, as a mask computed in the graph); then the first in bf16
 *     storage (Q, K, V, mask, O, dO, dQ, dK, dV; Stats fp32), as
 *     --precision bf16 runs it (not checked here: test_backend_attn is);
 *   - MatMulEpilogue 4096 x 1024 x 2816 with bias, bias + gelu_tanh
 *     (cuBLASLt's fused epilogues), bias + gelu (erf: own pass) against
 *     plain MatMul.
 * tools/bench_sdpa.py prints PyTorch's numbers at the same shapes (bf16:
 * its --dtype bf16).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "gf_graph.h"
#include "gf_half.h"
#include "gf_kernels.h"

#define INNER 5

static struct gf_backend *be, *cpu;
static int reps = 20;
static double copy_gbs;
static double tol_abs = 1e-6, tol_rel = 1e-5;

static void die(const char *what)
{
    fprintf(stderr, "bench_cuda_loss_attn: %s: %s\n", what, gf_last_error());
    exit(1);
}

/* ---- tensors: a host copy, and the device's ------------------------------------------ */

struct ten {
    struct gf_tview h, d; /* same shape; h on the host, d on the device */
};

static struct ten ten_new(int rank, const int64_t *dims, float lo, float hi, unsigned seed)
{
    struct ten t = {.h = {.dtype = GF_FLOAT}};
    gf_tview_set_shape(&t.h, rank, dims);
    t.d = t.h;
    float *p = malloc(t.h.nelem * sizeof(float) + 4);
    if (!p)
        die("host memory");
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < t.h.nelem; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
    }
    t.h.data = p;
    t.h.host = p;
    if (!(t.d.data = be->ops->alloc(be, gf_tview_bytes(&t.h))) ||
        (seed && be->ops->copy_in(be, t.d.data, p, gf_tview_bytes(&t.h)) != GF_OK))
        die("device tensor");
    return t;
}

/* t's values rounded to dt (fp16 / bf16) on the host and on the device. */
static void ten_narrow(struct ten *t, enum gf_dtype dt)
{
    const float *f = t->h.data;
    uint16_t *p = malloc(t->h.nelem * sizeof(uint16_t) + 4);
    if (!p)
        die("host memory");
    for (size_t i = 0; i < t->h.nelem; i++)
        p[i] = dt == GF_FLOAT16 ? gf_float_to_half(f[i]) : gf_float_to_bf16(f[i]);
    free(t->h.data);
    be->ops->release(be, t->d.data);
    t->h.dtype = t->d.dtype = dt;
    t->h.data = p;
    t->h.host = p;
    if (!(t->d.data = be->ops->alloc(be, gf_tview_bytes(&t->h))) ||
        be->ops->copy_in(be, t->d.data, p, gf_tview_bytes(&t->h)) != GF_OK)
        die("device tensor");
}

static void ten_free(struct ten *t)
{
    free(t->h.data);
    if (t->d.data)
        be->ops->release(be, t->d.data);
}

/* int64 labels in [0, classes), every 17th ignore_index (-100) when ii */
static struct ten ten_labels(int rank, const int64_t *dims, int64_t classes, bool ii)
{
    struct ten t = {.h = {.dtype = GF_INT64}};
    gf_tview_set_shape(&t.h, rank, dims);
    t.d = t.h;
    int64_t *p = malloc(t.h.nelem * sizeof(int64_t) + 8);
    if (!p)
        die("host memory");
    unsigned s = 12345;
    for (size_t i = 0; i < t.h.nelem; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = ii && i % 17 == 3 ? -100 : (int64_t)((s >> 8) % (unsigned)classes);
    }
    t.h.data = p;
    t.h.host = p;
    if (!(t.d.data = be->ops->alloc(be, gf_tview_bytes(&t.h))) ||
        be->ops->copy_in(be, t.d.data, p, gf_tview_bytes(&t.h)) != GF_OK)
        die("device labels");
    return t;
}

/* ---- one node on one backend ------------------------------------------------------------ */

struct call {
    struct gf_model *m;
    struct gf_node *node;
    struct ten *in[7], *out[4];
    size_t n_in, n_out;
    void *ws[2];
    size_t ws_size[2];
    size_t kernel_ws; /* the last run's workspace bytes */
};

static void call_init(struct call *c, const char *op, size_t n_in, size_t n_out)
{
    memset(c, 0, sizeof(*c));
    c->n_in = n_in;
    c->n_out = n_out;
    c->m = gf_model_new(8, "bench");
    if (!c->m || gf_model_set_opset(c->m, "graphfuse", 1) != GF_OK)
        die("model");
    struct gf_value *ins[7], *outs[4];
    for (size_t i = 0; i < n_in; i++) {
        char nm[16];
        snprintf(nm, sizeof(nm), "in%zu", i);
        ins[i] = gf_graph_new_value(c->m->graph, NULL, nm);
    }
    for (size_t i = 0; i < n_out; i++) {
        char nm[16];
        snprintf(nm, sizeof(nm), "out%zu", i);
        outs[i] = gf_graph_new_value(c->m->graph, NULL, nm);
    }
    c->node = gf_graph_add_node(c->m->graph, op, strcmp(op, "MatMul") ? "graphfuse" : "", "bench", n_in, ins, n_out, outs);
    if (!c->node)
        die(op);
}

/* Runs the node on the device (dev) or the CPU, config NULL: automatic. */
static void call_run(struct call *c, bool dev, const int *config, bool sync)
{
    struct gf_backend *b = dev ? be : cpu;
    struct gf_tview in[7], out[4];
    for (size_t i = 0; i < c->n_in; i++)
        in[i] = !c->in[i] ? (struct gf_tview){0} : dev ? c->in[i]->d : c->in[i]->h;
    for (size_t i = 0; i < c->n_out; i++)
        out[i] = !c->out[i] ? (struct gf_tview){0} : dev ? c->out[i]->d : c->out[i]->h;
    const struct gf_kernel *k = gf_kernel_find(b, c->node, in, c->n_in);
    if (!k || strcmp(k->backend, dev ? "cuda" : "cpu") != 0) {
        fprintf(stderr, "bench_cuda_loss_attn: no %s kernel for %s\n", dev ? "CUDA" : "CPU",
                c->node->op_type);
        exit(1);
    }
    c->kernel_ws = k->workspace ? k->workspace(&(struct gf_kernel_args){
                       .node = c->node, .in = in, .n_in = c->n_in, .out = out,
                       .n_out = c->n_out, .config = config, .n_threads = 8, .backend = b})
                                : 0;
    struct gf_kernel_args a = {.node = c->node, .in = in, .n_in = c->n_in, .out = out,
                               .n_out = c->n_out, .config = config, .n_threads = 8,
                               .backend = b};
    size_t need = k->workspace ? k->workspace(&a) : 0;
    if (need > c->ws_size[dev]) {
        if (c->ws[dev])
            dev ? be->ops->release(be, c->ws[dev]) : free(c->ws[dev]);
        c->ws[dev] = dev ? be->ops->alloc(be, need) : malloc(need);
        if (!c->ws[dev])
            die("workspace");
        c->ws_size[dev] = need;
    }
    a.workspace = need ? c->ws[dev] : NULL;
    if (k->run(&a) != GF_OK || (sync && b->ops->sync(b) != GF_OK))
        die(c->node->op_type);
}

static void call_free(struct call *c)
{
    if (c->ws[1])
        be->ops->release(be, c->ws[1]);
    free(c->ws[0]);
    gf_model_free(c->m);
}

/* Median ms per launch. */
static double call_time(struct call *c, const int *config)
{
    double t[256];
    int n = reps > 256 ? 256 : reps;
    for (int i = 0; i < 3; i++)
        call_run(c, true, config, true);
    for (int i = 0; i < n; i++) {
        double t0 = bench_now_ms();
        for (int j = 0; j < INNER; j++)
            call_run(c, true, config, j == INNER - 1);
        t[i] = (bench_now_ms() - t0) / INNER;
    }
    return bench_median_upper(t, n);
}

/* ---- checks against the CPU ---------------------------------------------------------------- */

/* n values of type dt (fp32, fp16, bf16) at src as fp32 into dst (may be
 * src: the 16-bit values are read from the end backwards). */
static void widen(float *dst, const void *src, enum gf_dtype dt, size_t n)
{
    const uint16_t *h = src;
    for (size_t i = n; i-- > 0;)
        dst[i] = dt == GF_FLOAT     ? ((const float *)src)[i]
                 : dt == GF_FLOAT16 ? gf_half_to_float(h[i])
                                    : gf_bf16_to_float(h[i]);
}

/* Max relative error of output k (device vs CPU) beyond atol + rtol |cpu|. */
static bool call_check(struct call *c, const char *what)
{
    call_run(c, false, NULL, true);
    call_run(c, true, NULL, true);
    bool ok = true;
    for (size_t k = 0; k < c->n_out; k++) {
        struct ten *o = c->out[k];
        if (!o)
            continue;
        size_t n = o->h.nelem;
        float *got = malloc(n * sizeof(float) + 4), *want = malloc(n * sizeof(float) + 4);
        if (!got || !want || be->ops->copy_out(be, got, o->d.data, gf_tview_bytes(&o->d)) != GF_OK)
            die("copy_out");
        widen(got, got, o->h.dtype, n);
        widen(want, o->h.data, o->h.dtype, n);
        double worst = 0;
        size_t bad = 0, at = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)got[i] - want[i]), lim = tol_abs + tol_rel * fabs(want[i]);
            if (!(d <= lim))
                bad++;
            if (d / lim > worst || isnan(got[i]))
                worst = isnan(got[i]) ? INFINITY : d / lim, at = i;
        }
        printf("  check %-28s output %zu: %s (worst %.3g of the tolerance at %zu: %g vs %g)\n",
               what, k, bad ? "FAIL" : "ok", worst, at, got[at], want[at]);
        ok = ok && !bad;
        free(got);
        free(want);
    }
    return ok;
}


/* ---- cases ------------------------------------------------------------------------------ */

static void row(const char *op, const char *shape, double ms, double bytes)
{
    if (bytes > 0) {
        double gbs = bytes / (ms * 1e-3) / 1e9;
        printf("| %s | %s | %.3f ms | %.0f GB/s | %.0f%% of copy |\n", op, shape, ms, gbs,
               100 * gbs / copy_gbs);
    } else {
        printf("| %s | %s | %.3f ms | | |\n", op, shape, ms);
    }
}

static double bench_copy(size_t bytes)
{
    void *src = be->ops->alloc(be, bytes), *dst = be->ops->alloc(be, bytes);
    if (!src || !dst)
        die("copy buffers");
    double t[256];
    int n = reps > 256 ? 256 : reps;
    for (int i = 0; i < n + 3; i++) {
        double t0 = bench_now_ms();
        for (int j = 0; j < INNER; j++)
            if (be->ops->copy(be, dst, src, bytes) != GF_OK)
                die("copy");
        if (be->ops->sync(be) != GF_OK)
            die("sync");
        if (i >= 3)
            t[i - 3] = (bench_now_ms() - t0) / INNER;
    }
    double med = bench_median_upper(t, n);
    be->ops->release(be, src);
    be->ops->release(be, dst);
    return med;
}

/* SoftmaxCrossEntropy L [n, v] -> Loss, -, G (G in place of L when inplace). */
struct ce_case {
    struct ten l, t, loss, g;
    struct call c;
};

static void ce_init(struct ce_case *c, int64_t n, int64_t v, bool inplace, const char *red,
                    enum gf_dtype dt)
{
    int64_t ld[2] = {n, v}, td[1] = {n}, sd[1] = {n};
    c->l = ten_new(2, ld, -8, 8, 11);
    c->t = ten_labels(1, td, v, true);
    c->loss = ten_new(strcmp(red, "none") ? 0 : 1, sd, 0, 0, 0);
    if (!inplace)
        c->g = ten_new(2, ld, 0, 0, 0);
    if (dt != GF_FLOAT) {
        ten_narrow(&c->l, dt);
        ten_narrow(&c->loss, dt);
        if (!inplace)
            ten_narrow(&c->g, dt);
    }
    call_init(&c->c, "SoftmaxCrossEntropy", 2, 3);
    gf_node_set_attr_string(c->c.node, "reduction", red);
    gf_node_set_attr_int(c->c.node, "ignore_index", -100);
    c->c.in[0] = &c->l, c->c.in[1] = &c->t;
    c->c.out[0] = &c->loss, c->c.out[1] = NULL, c->c.out[2] = inplace ? &c->l : &c->g;
}

static void ce_free(struct ce_case *c, bool inplace)
{
    ten_free(&c->l);
    ten_free(&c->t);
    ten_free(&c->loss);
    if (!inplace)
        ten_free(&c->g);
    call_free(&c->c);
}

/* LinearCrossEntropy H [n, k], W [v, k] (transB=1), T [n] -> Loss, dH, dW. */
struct lce_case {
    struct ten h, w, t, loss, dh, dw;
    struct call c;
};

static void lce_init(struct lce_case *c, int64_t n, int64_t k, int64_t v)
{
    int64_t hd[2] = {n, k}, wd[2] = {v, k}, td[1] = {n};
    c->h = ten_new(2, hd, -1, 1, 21);
    c->w = ten_new(2, wd, -0.05f, 0.05f, 22);
    c->t = ten_labels(1, td, v, true);
    c->loss = ten_new(0, td, 0, 0, 0);
    c->dh = ten_new(2, hd, 0, 0, 0);
    c->dw = ten_new(2, wd, 0, 0, 0);
    call_init(&c->c, "LinearCrossEntropy", 3, 3);
    gf_node_set_attr_int(c->c.node, "transB", 1);
    gf_node_set_attr_int(c->c.node, "ignore_index", -100);
    c->c.in[0] = &c->h, c->c.in[1] = &c->w, c->c.in[2] = &c->t;
    c->c.out[0] = &c->loss, c->c.out[1] = &c->dh, c->c.out[2] = &c->dw;
}

static void lce_free(struct lce_case *c)
{
    struct ten *ts[] = {&c->h, &c->w, &c->t, &c->loss, &c->dh, &c->dw};
    for (size_t i = 0; i < 6; i++)
        ten_free(ts[i]);
    call_free(&c->c);
}

/* MatMulEpilogue A [m, k] B [k, n] Bias [n] -> Y, activation act. */
struct mme_case {
    struct ten a, b, bias, y;
    struct call c, plain;
};

static void mme_init(struct mme_case *c, int64_t m, int64_t k, int64_t n, const char *act)
{
    int64_t ad[2] = {m, k}, bd[2] = {k, n}, vd[1] = {n}, yd[2] = {m, n};
    c->a = ten_new(2, ad, -1, 1, 31);
    c->b = ten_new(2, bd, -0.1f, 0.1f, 32);
    c->bias = ten_new(1, vd, -1, 1, 33);
    c->y = ten_new(2, yd, 0, 0, 0);
    call_init(&c->c, "MatMulEpilogue", 3, 1);
    gf_node_set_attr_string(c->c.node, "activation", act);
    c->c.in[0] = &c->a, c->c.in[1] = &c->b, c->c.in[2] = &c->bias, c->c.out[0] = &c->y;
    call_init(&c->plain, "MatMul", 2, 1);
    c->plain.in[0] = &c->a, c->plain.in[1] = &c->b, c->plain.out[0] = &c->y;
}

static void mme_free(struct mme_case *c)
{
    struct ten *ts[] = {&c->a, &c->b, &c->bias, &c->y};
    for (size_t i = 0; i < 4; i++)
        ten_free(ts[i]);
    call_free(&c->c);
    call_free(&c->plain);
}

/* Attention Q, K, V [b, h, t, d], a causal mask [t, t]: a host constant
 * (the kernels skip it), or in device memory only when dev_mask (read, as
 * a mask computed in the graph: the Hugging Face exports'); all of type dt
 * but Stats (fp32). */
struct attn_case {
    struct ten q, k, v, mask, o, stats, dout, dq, dk, dv;
    struct call f, g;
};

static void attn_init(struct attn_case *c, int64_t b, int64_t h, int64_t t, int64_t d,
                      bool dev_mask, enum gf_dtype dt)
{
    int64_t qd[4] = {b, h, t, d}, md[2] = {t, t}, sd[4] = {2, b, h, t};
    c->q = ten_new(4, qd, -1, 1, 41);
    c->k = ten_new(4, qd, -1, 1, 42);
    c->v = ten_new(4, qd, -1, 1, 43);
    c->dout = ten_new(4, qd, -1, 1, 44);
    c->o = ten_new(4, qd, 0, 0, 0);
    c->stats = ten_new(4, sd, 0, 0, 0);
    c->dq = ten_new(4, qd, 0, 0, 0);
    c->dk = ten_new(4, qd, 0, 0, 0);
    c->dv = ten_new(4, qd, 0, 0, 0);
    c->mask = ten_new(2, md, 0, 0, 0);
    float *m = c->mask.h.data;
    for (int64_t i = 0; i < t; i++)
        for (int64_t j = 0; j < t; j++)
            m[i * t + j] = j <= i ? 0.0f : -INFINITY;
    if (be->ops->copy_in(be, c->mask.d.data, m, gf_tview_bytes(&c->mask.h)) != GF_OK)
        die("mask");
    if (dt != GF_FLOAT) {
        struct ten *ts[] = {&c->q, &c->k, &c->v, &c->mask, &c->o, &c->dout, &c->dq, &c->dk,
                            &c->dv};
        for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++)
            ten_narrow(ts[i], dt);
    }
    /* a constant, as the executor hands initializers */
    c->mask.d.host = dev_mask ? NULL : c->mask.h.data;
    call_init(&c->f, "Attention", 4, 2);
    gf_node_set_attr_int(c->f.node, "transB", 1);
    gf_node_set_attr_float(c->f.node, "scale", 1.0f / sqrtf((float)d));
    c->f.in[0] = &c->q, c->f.in[1] = &c->k, c->f.in[2] = &c->v, c->f.in[3] = &c->mask;
    c->f.out[0] = &c->o, c->f.out[1] = &c->stats;
    call_init(&c->g, "AttentionGrad", 7, 3);
    gf_node_set_attr_int(c->g.node, "transB", 1);
    gf_node_set_attr_float(c->g.node, "scale", 1.0f / sqrtf((float)d));
    c->g.in[0] = &c->dout, c->g.in[1] = &c->q, c->g.in[2] = &c->k, c->g.in[3] = &c->v;
    c->g.in[4] = &c->mask, c->g.in[5] = &c->o, c->g.in[6] = &c->stats;
    c->g.out[0] = &c->dq, c->g.out[1] = &c->dk, c->g.out[2] = &c->dv;
}

static void attn_free(struct attn_case *c)
{
    struct ten *ts[] = {&c->q,    &c->k,    &c->v,  &c->mask, &c->o,
                        &c->stats, &c->dout, &c->dq, &c->dk,   &c->dv};
    for (size_t i = 0; i < 10; i++)
        ten_free(ts[i]);
    call_free(&c->f);
    call_free(&c->g);
}

static bool has_kernel(struct call *c)
{
    struct gf_tview in[7];
    for (size_t i = 0; i < c->n_in; i++)
        in[i] = c->in[i] ? c->in[i]->d : (struct gf_tview){0};
    const struct gf_kernel *k = gf_kernel_find(be, c->node, in, c->n_in);
    return k && strcmp(k->backend, "cuda") == 0;
}

static bool checks(void)
{
    bool ok = true;
    for (int inplace = 0; inplace < 2; inplace++) {
        struct ce_case c;
        ce_init(&c, 37, inplace ? 40000 : 1001, inplace, inplace ? "mean" : "none", GF_FLOAT);
        ok = call_check(&c.c, inplace ? "SCE 37x40000 mean, G in place" : "SCE 37x1001 none") &&
             ok;
        ce_free(&c, inplace);
    }
    {
        struct ce_case c;
        ce_init(&c, 300, 128256, false, "sum", GF_FLOAT); /* several rows per cluster */
        int cfg[3] = {0, 1, 0};
        call_run(&c.c, false, NULL, true); /* the CPU's, then the rows' path (cluster off) */
        call_run(&c.c, true, cfg, true);
        ok = call_check(&c.c, "SCE 300x128256 sum (cluster)") && ok;
        ce_free(&c, false);
    }
    /* 16-bit scores: both sides round the same fp32 values once, which may
     * land one unit of the type apart */
    tol_abs = 1e-6, tol_rel = 1.0 / 64;
    for (int h = 0; h < 2; h++) {
        enum gf_dtype dt = h ? GF_BFLOAT16 : GF_FLOAT16;
        struct ce_case c;
        ce_init(&c, 37, 40000, true, "mean", dt);
        ok = call_check(&c.c, h ? "SCE bf16 37x40000, G in place" : "SCE fp16 37x40000, G in place") &&
             ok;
        ce_free(&c, true);
        ce_init(&c, 300, 128256, false, "sum", dt);
        ok = call_check(&c.c, h ? "SCE bf16 300x128256 (cluster)" : "SCE fp16 300x128256 (cluster)") &&
             ok;
        ce_free(&c, false);
    }
    tol_abs = 1e-6, tol_rel = 1e-5;
    {
        struct lce_case c;
        lce_init(&c, 100, 64, 3001);
        tol_abs = 1e-5, tol_rel = 1e-4;
        ok = call_check(&c.c, "LinearCrossEntropy 100x64x3001") && ok;
        lce_free(&c);
    }
    const char *acts[] = {"", "gelu_tanh", "gelu", "relu"};
    for (int i = 0; i < 4; i++) {
        struct mme_case c;
        mme_init(&c, 65, 70, 130, acts[i]);
        char what[64];
        snprintf(what, sizeof(what), "MatMulEpilogue bias %s", acts[i]);
        ok = call_check(&c.c, what) && ok;
        mme_free(&c);
    }
    {
        struct attn_case c;
        attn_init(&c, 2, 3, 100, 64, false, GF_FLOAT);
        if (has_kernel(&c.f)) {
            ok = call_check(&c.f, "Attention 2x3x100x64 causal") && ok;
            ok = call_check(&c.g, "AttentionGrad 2x3x100x64 causal") && ok;
        } else {
            printf("  (no CUDA Attention kernel: not checked)\n");
        }
        attn_free(&c);
        attn_init(&c, 2, 3, 200, 64, true, GF_FLOAT); /* tiles masked, all 0 and mixed */
        if (has_kernel(&c.f)) {
            ok = call_check(&c.f, "Attention 2x3x200x64 mask") && ok;
            ok = call_check(&c.g, "AttentionGrad 2x3x200x64 mask") && ok;
        }
        attn_free(&c);
    }
    tol_abs = 1e-6, tol_rel = 1e-5;
    return ok;
}

int main(int argc, char **argv)
{
    bool attn_only = false; /* the attention rows alone (for profilers) */
    bool ce_only = false;   /* the cross-entropy rows alone */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--attn-only") == 0)
            attn_only = true;
        else if (strcmp(argv[i], "--ce-only") == 0)
            ce_only = true;
    }
    if (gf_backend_open("cuda", NULL, &be) != GF_OK) {
        printf("bench_cuda_loss_attn: skipped: %s\n", gf_last_error());
        return 0;
    }
    cpu = gf_backend_get("cpu");
    if (!cpu)
        die("cpu backend");
    printf("bench_cuda_loss_attn on %s (%s), fp32\n", be->ops->device_name(be),
           be->ops->driver_version(be));
    if (!checks()) {
        printf("bench_cuda_loss_attn: a kernel disagrees with the CPU: not timed\n");
        return 1;
    }
    size_t cb = (size_t)1 << 30;
    double tc = bench_copy(cb);
    copy_gbs = 2.0 * (double)cb / (tc * 1e-3) / 1e9;
    printf("\ncopy 1 GiB: %.3f ms, %.0f GB/s (read + write)\n\n", tc, copy_gbs);
    printf("| op | shape | time | bandwidth | |\n| --- | --- | ---: | ---: | ---: |\n");
    if (!attn_only) {
        struct ce_case c;
        int64_t n = 4096, v = 128256;
        ce_init(&c, n, v, true, "mean", GF_FLOAT);
        double bytes = 2.0 * (double)n * (double)v * 4;
        int off[3] = {0, 1, 0};
        row("SoftmaxCrossEntropy fwd+bwd (G in place), auto", "4096x128256", call_time(&c.c, NULL),
            bytes);
        row("SoftmaxCrossEntropy fwd+bwd, rows (cluster=1)", "4096x128256", call_time(&c.c, off),
            bytes);
        for (int cl = 2; cl <= 16; cl *= 2) {
            int cfg[3] = {0, cl, 0};
            char what[64];
            snprintf(what, sizeof(what), "SoftmaxCrossEntropy fwd+bwd, cluster=%d", cl);
            row(what, "4096x128256", call_time(&c.c, cfg), bytes);
        }
        printf("(Liger Kernel fp32 on H100: 4.67 ms = %.0f GB/s on the same bytes)\n",
               bytes / 4.67e-3 / 1e9);
        ce_free(&c, true);
        /* bf16 logits, the gradient in place (Liger Kernel's bf16 case:
         * ../shared/device/README.md, 1.76 ms on an H200, 2.34 ms on an H100) */
        ce_init(&c, n, v, true, "mean", GF_BFLOAT16);
        bytes = 2.0 * (double)n * (double)v * 2;
        row("SoftmaxCrossEntropy bf16 fwd+bwd (G in place), auto", "4096x128256",
            call_time(&c.c, NULL), bytes);
        row("SoftmaxCrossEntropy bf16 fwd+bwd, rows (cluster=1)", "4096x128256",
            call_time(&c.c, off), bytes);
        for (int b = 256; b <= 512; b *= 2) {
            int cfg[3] = {b, 1, 0};
            char what[64];
            snprintf(what, sizeof(what), "SoftmaxCrossEntropy bf16 fwd+bwd, rows, block=%d", b);
            row(what, "4096x128256", call_time(&c.c, cfg), bytes);
        }
        for (int cl = 2; cl <= 16; cl *= 2) {
            int cfg[3] = {0, cl, 0};
            char what[64];
            snprintf(what, sizeof(what), "SoftmaxCrossEntropy bf16 fwd+bwd, cluster=%d", cl);
            row(what, "4096x128256", call_time(&c.c, cfg), bytes);
        }
        printf("(Liger Kernel bf16, README: H200 1.76 ms = %.0f GB/s, H100 2.34 ms = %.0f GB/s "
               "on the same bytes)\n", bytes / 1.76e-3 / 1e9, bytes / 2.34e-3 / 1e9);
        ce_free(&c, true);
    }
    if (ce_only)
        return 0;
    if (!attn_only) {
        struct lce_case c;
        lce_init(&c, 8192, 4096, 32000);
        double t = call_time(&c.c, NULL);
        row("LinearCrossEntropy fwd+bwd (loss, dH, dW)", "8192x4096x32000", t, 0);
        printf("  workspace (extra memory) %.1f MiB; the whole logits would be %.1f MiB; "
               "%.1f TFLOP/s over its 3 GEMMs\n", (double)c.c.kernel_ws / 1048576.0,
               8192.0 * 32000 * 4 / 1048576.0, 3 * 2.0 * 8192 * 4096 * 32000 / (t * 1e-3) / 1e12);
        for (int r = 1024; r <= 4096; r *= 4) {
            int cfg[3] = {0, 0, r};
            char what[64];
            snprintf(what, sizeof(what), "  LinearCrossEntropy chunk_rows=%d", r);
            row(what, "8192x4096x32000", call_time(&c.c, cfg), 0);
        }
        lce_free(&c);
    }
    {
        struct attn_case c;
        attn_init(&c, 8, 16, 512, 64, false, GF_FLOAT);
        if (has_kernel(&c.f)) {
            /* causal FLOPs: 2 products of 8 x 16 x 512^2 / 2 x 64 forward, 5
             * backward (less what the kernels recompute) */
            double ff = 2.0 * 2 * 8 * 16 * 512.0 * 512 / 2 * 64;
            for (int w = 4; w <= 8; w += 4) {
                int cfg[1] = {w};
                double tf = call_time(&c.f, cfg), tg = call_time(&c.g, cfg);
                char what[96];
                snprintf(what, sizeof(what), "Attention fwd, causal, warps=%d (%.1f TFLOP/s)", w,
                         ff / (tf * 1e-3) / 1e12);
                row(what, "8x16x512x64", tf, 0);
                snprintf(what, sizeof(what), "AttentionGrad, causal, warps=%d (%.1f TFLOP/s)", w,
                         2.5 * ff / (tg * 1e-3) / 1e12);
                row(what, "8x16x512x64", tg, 0);
                snprintf(what, sizeof(what), "**Attention fwd+bwd, causal, warps=%d**", w);
                row(what, "8x16x512x64", tf + tg, 0);
            }
        } else {
            printf("| Attention | 8x16x512x64 | no CUDA kernel | | |\n");
        }
        attn_free(&c);
        attn_init(&c, 8, 16, 512, 64, true, GF_FLOAT);
        if (has_kernel(&c.f)) {
            double tf = call_time(&c.f, NULL), tg = call_time(&c.g, NULL);
            row("Attention fwd, causal mask in memory", "8x16x512x64", tf, 0);
            row("AttentionGrad, causal mask in memory", "8x16x512x64", tg, 0);
        }
        attn_free(&c);
        /* bf16 storage (the autocast graph's Attention; Stats fp32), the
         * same shape: PyTorch's bf16 SDPA is tools/bench_sdpa.py --dtype bf16 */
        attn_init(&c, 8, 16, 512, 64, false, GF_BFLOAT16);
        if (has_kernel(&c.f)) {
            double ff = 2.0 * 2 * 8 * 16 * 512.0 * 512 / 2 * 64;
            for (int w = 4; w <= 8; w += 4) {
                int cfg[1] = {w};
                double tf = call_time(&c.f, cfg), tg = call_time(&c.g, cfg);
                char what[96];
                snprintf(what, sizeof(what), "Attention fwd bf16, causal, warps=%d (%.1f TFLOP/s)",
                         w, ff / (tf * 1e-3) / 1e12);
                row(what, "8x16x512x64", tf, 0);
                snprintf(what, sizeof(what), "AttentionGrad bf16, causal, warps=%d (%.1f TFLOP/s)",
                         w, 2.5 * ff / (tg * 1e-3) / 1e12);
                row(what, "8x16x512x64", tg, 0);
                snprintf(what, sizeof(what), "**Attention fwd+bwd bf16, causal, warps=%d**", w);
                row(what, "8x16x512x64", tf + tg, 0);
            }
        } else {
            printf("| Attention bf16 | 8x16x512x64 | no CUDA kernel | | |\n");
        }
        attn_free(&c);
    }
    const char *acts[] = {"", "gelu_tanh", "gelu"};
    for (int i = 0; i < (attn_only ? 0 : 3); i++) {
        struct mme_case c;
        mme_init(&c, 4096, 1024, 2816, acts[i]);
        double t = call_time(&c.c, NULL), flop = 2.0 * 4096 * 1024 * 2816;
        char what[96];
        snprintf(what, sizeof(what), "MatMulEpilogue bias%s%s (%.1f TFLOP/s)", *acts[i] ? " + " : "",
                 acts[i], flop / (t * 1e-3) / 1e12);
        row(what, "4096x1024x2816", t, 0);
        if (i == 0) {
            double tp = call_time(&c.plain, NULL);
            snprintf(what, sizeof(what), "MatMul (%.1f TFLOP/s)", flop / (tp * 1e-3) / 1e12);
            row(what, "4096x1024x2816", tp, 0);
        }
        mme_free(&c);
    }
    return 0;
}
