/* fp16 / bf16 on the CPU through the fp32 kernels (--precision bf16|fp16,
 * docs/precision.md): for a node with a 16-bit float input that no kernel
 * of the other CPU tables takes as it is, each 16-bit input is widened into
 * the workspace, the first fp32 kernel that supports the fp32 views runs on
 * them, and each 16-bit output is narrowed from its fp32 copy (round to
 * nearest even, gf_half.h).  The CPU may compute in fp32 on the rounded
 * values: this is what autocast's kernels do too, with fp32 accumulation.
 * This table is the last in lookup order, so native 16-bit kernels
 * (MatMul, Gemm, MatMulEpilogue, elementwise, reductions, layout) win, and
 * fp32 nodes never reach it.
 *
 *   workspace = [in_i as fp32 (16-bit inputs)]...[out_j as fp32]...[inner]
 * each part rounded up to 64 bytes.
 */
#include "cpu.h"

#define MAX_IO 16
#define A64(n) (((n) + 63) & ~(size_t)63)

extern const struct gf_kernel_table *const gf_cpu_tables[]; /* tables.c */
extern const struct gf_kernel_table gf_cpu_half_table;

static bool is_half(enum gf_dtype t)
{
    return t == GF_FLOAT16 || t == GF_BFLOAT16;
}

/* v as an fp32 view with the same shape and no data. */
static struct gf_tview as_float(const struct gf_tview *v)
{
    struct gf_tview f = *v;
    if (is_half(v->dtype)) {
        f.dtype = GF_FLOAT;
        f.data = NULL;
        f.host = NULL;
    }
    return f;
}

/* The fp32 kernel for the node seen through fp32 views (other tables). */
static const struct gf_kernel *inner(const struct gf_node *n, const struct gf_tview *fin,
                                     size_t n_in)
{
    enum gf_dtype dt = n_in ? fin[0].dtype : GF_UNDEFINED;
    for (const struct gf_kernel_table *const *t = gf_cpu_tables; *t; t++) {
        if (*t == &gf_cpu_half_table)
            continue;
        for (size_t i = 0; i < (*t)->count; i++) {
            const struct gf_kernel *k = &(*t)->kernels[i];
            if (k->op != n->op || (k->dtype != GF_UNDEFINED && k->dtype != dt))
                continue;
            if (!k->supports || k->supports(n, fin, n_in))
                return k;
        }
    }
    return NULL;
}

static bool any_half(const struct gf_tview *in, size_t n_in)
{
    for (size_t i = 0; i < n_in; i++)
        if (is_half(in[i].dtype))
            return true;
    return false;
}

static bool half_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    if (n_in > MAX_IO || n->n_outputs > MAX_IO || !any_half(in, n_in))
        return false;
    struct gf_tview fin[MAX_IO];
    for (size_t i = 0; i < n_in; i++)
        fin[i] = as_float(&in[i]);
    return inner(n, fin, n_in) != NULL;
}

/* The fp32 arguments (views into the workspace, no data yet when ws is
 * NULL) and the bytes they take before the inner kernel's workspace. */
static size_t float_args(const struct gf_kernel_args *a, struct gf_kernel_args *f,
                         struct gf_tview *fin, struct gf_tview *fout, char *ws)
{
    size_t off = 0;
    for (size_t i = 0; i < a->n_in; i++) {
        fin[i] = a->in[i];
        if (!is_half(a->in[i].dtype))
            continue;
        fin[i] = as_float(&a->in[i]);
        if (ws && a->in[i].data)
            fin[i].data = (void *)(ws + off), fin[i].host = fin[i].data;
        off += A64(a->in[i].nelem * sizeof(float));
    }
    for (size_t i = 0; i < a->n_out; i++) {
        fout[i] = a->out[i];
        if (!is_half(a->out[i].dtype))
            continue;
        fout[i] = as_float(&a->out[i]);
        if (ws && a->out[i].data)
            fout[i].data = (void *)(ws + off), fout[i].host = fout[i].data;
        off += A64(a->out[i].nelem * sizeof(float));
    }
    *f = *a;
    f->in = fin;
    f->out = fout;
    f->workspace = NULL;
    f->config = NULL; /* the inner kernel's defaults: knobs are tuned on its own nodes */
    return off;
}

static size_t half_workspace(const struct gf_kernel_args *a)
{
    struct gf_tview fin[MAX_IO], fout[MAX_IO];
    struct gf_kernel_args f;
    if (a->n_in > MAX_IO || a->n_out > MAX_IO)
        return 0;
    size_t off = float_args(a, &f, fin, fout, NULL);
    const struct gf_kernel *k = inner(a->node, fin, a->n_in);
    return off + (k && k->workspace ? k->workspace(&f) : 0);
}

struct conv {
    void *h;  /* 16-bit data */
    float *f; /* fp32 copy */
    bool bf16;
};

static void widen_task(void *ctx, size_t i0, size_t i1)
{
    const struct conv *c = ctx;
    const uint16_t *h = c->h;
    for (size_t i = i0; i < i1; i++)
        c->f[i] = c->bf16 ? gf_bf16_to_float(h[i]) : gf_half_to_float(h[i]);
}

static void narrow_task(void *ctx, size_t i0, size_t i1)
{
    const struct conv *c = ctx;
    uint16_t *h = c->h;
    for (size_t i = i0; i < i1; i++)
        h[i] = c->bf16 ? gf_float_to_bf16(c->f[i]) : gf_float_to_half(c->f[i]);
}

static void convert(const struct gf_kernel_args *a, const struct gf_tview *h,
                    const struct gf_tview *f, bool widen)
{
    struct conv c = {h->data, f->data, h->dtype == GF_BFLOAT16};
    gf_parallel_for(a->n_threads < 1 ? 1 : a->n_threads, h->nelem, 16384,
                    widen ? widen_task : narrow_task, &c);
}

static enum gf_status half_run(const struct gf_kernel_args *a)
{
    struct gf_tview fin[MAX_IO], fout[MAX_IO];
    struct gf_kernel_args f;
    if (a->n_in > MAX_IO || a->n_out > MAX_IO)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "more than %d inputs or outputs", MAX_IO);
    if (!a->workspace)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "no workspace for the fp32 copies");
    size_t off = float_args(a, &f, fin, fout, a->workspace);
    const struct gf_kernel *k = inner(a->node, fin, a->n_in);
    if (!k)
        return gf_kernel_error(a, GF_ERR_UNSUPPORTED, "no fp32 CPU kernel for the widened node");
    f.workspace = k->workspace && k->workspace(&f) ? (char *)a->workspace + off : NULL;
    for (size_t i = 0; i < a->n_in; i++)
        if (is_half(a->in[i].dtype) && a->in[i].data)
            convert(a, &a->in[i], &fin[i], true);
    enum gf_status st = k->run(&f);
    for (size_t i = 0; st == GF_OK && i < a->n_out; i++)
        if (is_half(a->out[i].dtype) && a->out[i].data)
            convert(a, &a->out[i], &fout[i], false);
    return st;
}

#define GF_OP(id, name, domain, min_in, max_in, min_out, max_out)                              \
    {.op = GF_OP_##id, .backend = "cpu", .dtype = GF_UNDEFINED, .impl = "fp32-on-half",     \
     .supports = half_supports, .workspace = half_workspace, .run = half_run},
static const struct gf_kernel kernels[] = {
#include "ops.def"
};
#undef GF_OP

const struct gf_kernel_table gf_cpu_half_table = {kernels, sizeof(kernels) / sizeof(kernels[0])};
