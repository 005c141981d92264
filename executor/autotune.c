/*
 * The autotuner: configuration spaces, candidates checked against a
 * reference output, timing, and the cache keys of nodes (the file itself
 * is executor/tune_cache.c).  See gf_tune.h for the rules.
 *
 * One tuning job (gf_tune_node) owns, on the tuned backend, a buffer per
 * input (the caller's host values when it has them, else random values
 * made once on the host), per output and a workspace; with CPU kernels
 * competing on a device backend, a second set on the CPU, filled from the
 * device's inputs on each run so that the copies count in the CPU
 * kernels' time.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gf_half.h"
#include "gf_passes.h"
#include "tune_cache.h"

#define MAXIO 64
#define DEFAULT_BUDGET 64
#define DEFAULT_REPEATS 7
#define DEFAULT_WARMUP 2
#define DEFAULT_SAMPLE_MS 1.0
#define MAX_REPS 10000   /* kernel runs per timing sample */
#define CUTOFF 4.0       /* a candidate this many times slower than the best is not timed further */
#define MIN_GAIN 0.97    /* a candidate replaces the default only when 3% faster: not noise */

/* ---- configuration spaces -------------------------------------------------------------------- */

size_t gf_tune_space_size(const struct gf_kernel *k)
{
    size_t n = 1;
    for (size_t i = 0; i < k->n_knobs; i++)
        n *= k->knobs[i].n_values > 0 ? (size_t)k->knobs[i].n_values : 1;
    return n;
}

void gf_tune_config_at(const struct gf_kernel *k, size_t i, int *config)
{
    for (size_t j = 0; j < k->n_knobs && j < GF_TUNE_MAX_KNOBS; j++) {
        size_t nv = k->knobs[j].n_values > 0 ? (size_t)k->knobs[j].n_values : 1;
        config[j] = k->knobs[j].n_values > 0 ? k->knobs[j].values[i % nv] : 0;
        i /= nv;
    }
}

char *gf_tune_format_config(const struct gf_kernel *k, const int *config, char *buf, size_t len)
{
    size_t p = 0;
    buf[0] = 0;
    if (!k->n_knobs)
        snprintf(buf, len, "default");
    for (size_t j = 0; j < k->n_knobs && j < GF_TUNE_MAX_KNOBS && p < len; j++)
        p += (size_t)snprintf(buf + p, len - p, "%s%s=%d", j ? " " : "", k->knobs[j].name,
                              config[j]);
    return buf;
}

/* ---- keys ------------------------------------------------------------------------------------ */

/* A bounded string that hashes everything appended (FNV-1a): when too
 * long, it ends in "#<hash of the whole>". */
struct sbuf {
    char *s;
    size_t len, cap;
    uint64_t hash;
    bool over;
};

static void sb_add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(struct sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    for (int i = 0; i < n && i < (int)sizeof(tmp) - 1; i++) {
        b->hash = (b->hash ^ (uint8_t)tmp[i]) * 0x100000001b3ull;
        if (b->len + 1 < b->cap)
            b->s[b->len++] = tmp[i];
        else
            b->over = true;
    }
    b->s[b->len] = 0;
}

static void sb_init(struct sbuf *b, char *s, size_t cap)
{
    *b = (struct sbuf){.s = s, .cap = cap, .hash = 0xcbf29ce484222325ull};
    s[0] = 0;
}

static void sb_end(struct sbuf *b)
{
    if (b->over)
        snprintf(b->s + b->cap - 18, 18, "#%016llx", (unsigned long long)b->hash);
}

static bool present(const struct gf_tview *t)
{
    return t->dtype != GF_UNDEFINED;
}

static void add_shapes(struct sbuf *b, const struct gf_tview *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i)
            sb_add(b, ",");
        if (!present(&t[i]))
            sb_add(b, "-");
        else if (t[i].rank == 0)
            sb_add(b, "scalar");
        for (int d = 0; present(&t[i]) && d < t[i].rank; d++)
            sb_add(b, "%s%lld", d ? "x" : "", (long long)t[i].dims[d]);
    }
}

char *gf_tune_format_shapes(const struct gf_tview *in, size_t n_in, const struct gf_tview *out,
                            size_t n_out, char *buf, size_t len)
{
    struct sbuf b;
    sb_init(&b, buf, len);
    add_shapes(&b, in, n_in);
    if (out) {
        sb_add(&b, "->");
        add_shapes(&b, out, n_out);
    }
    sb_end(&b);
    return buf;
}

static int cmp_attr(const void *a, const void *b)
{
    return strcmp((*(const struct gf_attr *const *)a)->name,
                  (*(const struct gf_attr *const *)b)->name);
}

static void add_attr(struct sbuf *b, const struct gf_attr *a)
{
    sb_add(b, "%s=", a->name);
    switch (a->type) {
    case GF_ATTR_INT: sb_add(b, "%lld", (long long)a->i); break;
    case GF_ATTR_FLOAT: sb_add(b, "%.9g", a->f); break;
    case GF_ATTR_STRING: sb_add(b, "%s", (const char *)a->s.data); break;
    case GF_ATTR_INTS:
        for (size_t i = 0; i < a->n; i++)
            sb_add(b, "%s%lld", i ? "," : "[", (long long)a->ints[i]);
        sb_add(b, a->n ? "]" : "[]");
        break;
    case GF_ATTR_FLOATS:
        for (size_t i = 0; i < a->n; i++)
            sb_add(b, "%s%.9g", i ? "," : "[", a->floats[i]);
        sb_add(b, a->n ? "]" : "[]");
        break;
    case GF_ATTR_STRINGS:
        for (size_t i = 0; i < a->n; i++)
            sb_add(b, "%s%.*s", i ? "," : "[", (int)a->strings[i].len,
                   (const char *)a->strings[i].data);
        sb_add(b, a->n ? "]" : "[]");
        break;
    case GF_ATTR_TENSOR: {
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; a->t && a->t->data && i < a->t->nbytes; i++)
            h = (h ^ ((const uint8_t *)a->t->data)[i]) * 0x100000001b3ull;
        sb_add(b, "tensor:%s:%zu:%016llx", a->t ? gf_dtype_name(a->t->dtype) : "?",
               a->t ? a->t->nelem : 0, (unsigned long long)h);
        break;
    }
    default: sb_add(b, "%s", gf_attr_type_name(a->type)); break;
    }
}

/* Whether n's model runs with --precision tf32 (a subgraph asks the graphs
 * enclosing it): fp32 GEMMs then take other kernels (TF32 tensor cores), so
 * their tuned choices are kept apart from exact fp32's. */
static bool node_tf32(const struct gf_node *n)
{
    const struct gf_graph *g = n->graph;
    while (g && !g->model && g->parent)
        g = g->parent;
    return g && g->model && gf_model_precision(g->model) == GF_PRECISION_TF32;
}

static void make_key(struct gf_backend *be, const struct gf_node *n, const struct gf_tview *in,
                     size_t n_in, const struct gf_tview *out, size_t n_out, struct tune_key *k)
{
    memset(k, 0, sizeof(*k));
    const char *drv = be->ops->driver_version ? be->ops->driver_version(be) : "";
    snprintf(k->device, sizeof(k->device), "%s", be->ops->device_name(be));
    snprintf(k->driver, sizeof(k->driver), "%s", drv ? drv : "");
    snprintf(k->version, sizeof(k->version), "%s", GF_VERSION);
    snprintf(k->backend, sizeof(k->backend), "%s", be->ops->name);
    bool onnx = !n->domain || !*n->domain || strcmp(n->domain, "ai.onnx") == 0;
    snprintf(k->op, sizeof(k->op), "%s%s%s", onnx ? "" : n->domain, onnx ? "" : ".",
             n->op_type);
    struct sbuf b;
    sb_init(&b, k->dtype, sizeof(k->dtype));
    bool same = n_in > 0;
    for (size_t i = 0; i < n_in; i++)
        same &= present(&in[i]) && in[i].dtype == in[0].dtype;
    for (size_t i = 0; i < (same ? 1 : n_in); i++)
        sb_add(&b, "%s%s", i ? "," : "", present(&in[i]) ? gf_dtype_name(in[i].dtype) : "-");
    if (node_tf32(n)) /* "float (tf32)" */
        sb_add(&b, " (tf32)");
    sb_end(&b);
    gf_tune_format_shapes(in, n_in, out, n_out, k->shapes, sizeof(k->shapes));
    const struct gf_attr *sorted[256];
    size_t na = n->n_attrs < 256 ? n->n_attrs : 256;
    for (size_t i = 0; i < na; i++)
        sorted[i] = &n->attrs[i];
    qsort(sorted, na, sizeof(sorted[0]), cmp_attr);
    sb_init(&b, k->attrs, sizeof(k->attrs));
    for (size_t i = 0; i < na; i++) {
        if (i)
            sb_add(&b, ";");
        add_attr(&b, sorted[i]);
    }
    sb_end(&b);
}

/* ---- which kernels compete ------------------------------------------------------------------- */

/* Views the registry and `supports` see: present inputs get a non-NULL data. */
static void match_views(const struct gf_tview *in, size_t n_in, struct gf_tview *v)
{
    for (size_t i = 0; i < n_in; i++) {
        v[i] = in[i];
        v[i].data = present(&in[i]) ? (void *)1 : NULL;
    }
}

static bool accepts(const struct gf_kernel *k, const struct gf_node *n,
                    const struct gf_tview *v, size_t n_in)
{
    enum gf_dtype dt = n_in && v[0].data ? v[0].dtype : GF_UNDEFINED;
    return k->op == n->op && (k->dtype == GF_UNDEFINED || k->dtype == dt) &&
           k->n_knobs <= GF_TUNE_MAX_KNOBS && (!k->supports || k->supports(n, v, n_in));
}

size_t gf_tune_count_candidates(const struct gf_backend *be, const struct gf_node *n,
                                const struct gf_tview *in, size_t n_in)
{
    struct gf_tview v[MAXIO];
    if (n_in > MAXIO)
        return 0;
    match_views(in, n_in, v);
    size_t nk, total = 0;
    const struct gf_kernel *const *ks = gf_kernel_list(be->ops->name, n->op, &nk);
    for (size_t i = 0; i < nk; i++)
        if (accepts(ks[i], n, v, n_in))
            total += gf_tune_space_size(ks[i]);
    return total;
}

/* ---- a tuning job: buffers ------------------------------------------------------------------- */

/* Buffers of one backend. */
struct side {
    struct gf_backend *be;
    struct gf_tview in[MAXIO], out[MAXIO];
    void *ws;
    size_t ws_size;
};

struct job {
    struct gf_backend *be;       /* the tuned backend */
    const struct gf_node *n;
    size_t n_in, n_out;
    void *host_in[MAXIO];        /* the random inputs */
    void *ref[MAXIO];            /* the reference outputs */
    void *got, *poison;          /* scratch of the largest output's size */
    struct side dev, cpu;        /* cpu: for CPU kernels on a device backend */
    const struct gf_tune_opts *o;
};

static uint64_t next_rand(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull; /* splitmix64 */
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Integers index or count things: keep them below the smallest dim. */
static int64_t int_cap(const struct gf_tview *in, size_t n_in)
{
    int64_t cap = 16;
    for (size_t i = 0; i < n_in; i++)
        for (int d = 0; present(&in[i]) && d < in[i].rank; d++)
            if (in[i].dims[d] > 0 && in[i].dims[d] < cap)
                cap = in[i].dims[d];
    return cap;
}

static void fill_random(const struct gf_tview *t, void *p, uint64_t *s, int64_t cap)
{
    for (size_t i = 0; i < t->nelem; i++) {
        uint64_t r = next_rand(s);
        double f = (double)(r >> 11) / 9007199254740992.0 * 2 - 1; /* [-1, 1) */
        int64_t k = (int64_t)(r % (uint64_t)cap);
        switch (t->dtype) {
        case GF_FLOAT: ((float *)p)[i] = (float)f; break;
        case GF_DOUBLE: ((double *)p)[i] = f; break;
        case GF_FLOAT16: ((uint16_t *)p)[i] = gf_float_to_half((float)f); break;
        case GF_BFLOAT16: ((uint16_t *)p)[i] = gf_float_to_bf16((float)f); break;
        case GF_INT64: case GF_UINT64: ((int64_t *)p)[i] = k; break;
        case GF_INT32: case GF_UINT32: ((int32_t *)p)[i] = (int32_t)k; break;
        case GF_INT16: case GF_UINT16: ((int16_t *)p)[i] = (int16_t)k; break;
        case GF_BOOL: ((uint8_t *)p)[i] = r & 1; break;
        default: memset((uint8_t *)p + gf_dtype_size(t->dtype) * i, (int)k,
                        gf_dtype_size(t->dtype)); break;
        }
    }
}

static void side_free(struct side *s, size_t n_in, size_t n_out)
{
    if (!s->be)
        return;
    for (size_t i = 0; i < n_in + n_out; i++) {
        struct gf_tview *t = i < n_in ? &s->in[i] : &s->out[i - n_in];
        if (t->data)
            s->be->ops->release(s->be, t->data);
    }
    if (s->ws)
        s->be->ops->release(s->be, s->ws);
    memset(s, 0, sizeof(*s));
}

/* Device memory for a view (an empty tensor: none on a device; a few
 * bytes on the host, where kernels expect a pointer). */
static enum gf_status side_alloc(struct side *s, struct gf_tview *t)
{
    size_t bytes = gf_tview_bytes(t);
    t->data = NULL;
    if (!bytes && !s->be->host_memory)
        return GF_OK;
    if (!(t->data = s->be->ops->alloc(s->be, bytes ? bytes : 64)))
        return GF_ERR_NOMEM;
    return GF_OK;
}

static enum gf_status side_init(struct job *j, struct side *s, struct gf_backend *be,
                                const struct gf_tview *in, const struct gf_tview *out)
{
    enum gf_status st = GF_OK;
    s->be = be;
    for (size_t i = 0; i < j->n_in && st == GF_OK; i++) {
        memset(&s->in[i], 0, sizeof(s->in[i]));
        if (!present(&in[i]))
            continue;
        s->in[i] = in[i];
        st = side_alloc(s, &s->in[i]);
        if (st == GF_OK && s->in[i].data)
            st = be->ops->copy_in(be, s->in[i].data, j->host_in[i], gf_tview_bytes(&in[i]));
        /* a host copy where the caller has one (what kernels see in a session) */
        s->in[i].host = be->host_memory ? s->in[i].data : in[i].host ? j->host_in[i] : NULL;
    }
    for (size_t i = 0; i < j->n_out && st == GF_OK; i++) {
        memset(&s->out[i], 0, sizeof(s->out[i]));
        if (present(&out[i])) {
            s->out[i] = out[i];
            st = side_alloc(s, &s->out[i]);
            s->out[i].host = NULL;
        }
    }
    return st;
}

static void job_free(struct job *j)
{
    side_free(&j->dev, j->n_in, j->n_out);
    side_free(&j->cpu, j->n_in, j->n_out);
    for (size_t i = 0; i < MAXIO; i++) {
        free(j->host_in[i]);
        free(j->ref[i]);
    }
    free(j->got);
    free(j->poison);
}

static enum gf_status job_init(struct job *j, struct gf_backend *be, const struct gf_node *n,
                               const struct gf_tview *in, size_t n_in,
                               const struct gf_tview *out, size_t n_out, bool cross,
                               const struct gf_tune_opts *o)
{
    memset(j, 0, sizeof(*j));
    j->be = be;
    j->n = n;
    j->n_in = n_in;
    j->n_out = n_out;
    j->o = o;
    uint64_t seed = o->seed ? o->seed : 1;
    int64_t cap = int_cap(in, n_in);
    size_t most = 0;
    for (size_t i = 0; i < n_in; i++) {
        if (!present(&in[i]))
            continue;
        size_t bytes = gf_tview_bytes(&in[i]);
        if (!(j->host_in[i] = malloc(bytes ? bytes : 1)))
            return gf_error(GF_ERR_NOMEM, "out of memory tuning node '%s'", n->name);
        if (in[i].host) /* known values: initializers, shapes */
            memcpy(j->host_in[i], in[i].host, bytes);
        else
            fill_random(&in[i], j->host_in[i], &seed, cap);
    }
    for (size_t i = 0; i < n_out; i++) {
        size_t bytes = present(&out[i]) ? gf_tview_bytes(&out[i]) : 0;
        if (!(j->ref[i] = malloc(bytes ? bytes : 1)))
            return gf_error(GF_ERR_NOMEM, "out of memory tuning node '%s'", n->name);
        most = bytes > most ? bytes : most;
    }
    if (!(j->got = malloc(most ? most : 1)) || !(j->poison = malloc(most ? most : 1)))
        return gf_error(GF_ERR_NOMEM, "out of memory tuning node '%s'", n->name);
    memset(j->poison, 0xff, most); /* NaN in every float type, -1 in integers */
    enum gf_status st = side_init(j, &j->dev, be, in, out);
    if (st == GF_OK && cross)
        st = side_init(j, &j->cpu, gf_backend_get("cpu"), in, out);
    if (st == GF_ERR_NOMEM)
        gf_error(GF_ERR_NOMEM, "out of memory (backend %s) tuning node '%s'", be->ops->name,
                 n->name);
    return st;
}

/* ---- running a candidate --------------------------------------------------------------------- */

static bool on_cpu_side(const struct job *j, const struct gf_kernel *k)
{
    return j->cpu.be && strcmp(k->backend, j->be->ops->name) != 0;
}

static enum gf_status ensure_ws(struct side *s, const struct gf_kernel *k,
                                struct gf_kernel_args *a)
{
    size_t need = k->workspace ? k->workspace(a) : 0;
    if (need > s->ws_size) {
        if (s->ws)
            s->be->ops->release(s->be, s->ws);
        s->ws_size = 0;
        if (!(s->ws = s->be->ops->alloc(s->be, need)))
            return GF_ERR_NOMEM;
        s->ws_size = need;
    }
    a->workspace = s->ws;
    return GF_OK;
}

/* One run of k on the job's buffers; a CPU kernel on a device backend
 * copies the inputs out and the outputs back. */
static enum gf_status run_once(struct job *j, const struct gf_kernel *k, const int *cfg)
{
    struct side *s = on_cpu_side(j, k) ? &j->cpu : &j->dev;
    struct gf_kernel_args a = {.node = j->n, .in = s->in, .n_in = j->n_in, .out = s->out,
                               .n_out = j->n_out, .config = cfg,
                               .n_threads = s->be->n_threads, .backend = s->be};
    enum gf_status st = ensure_ws(s, k, &a);
    for (size_t i = 0; s == &j->cpu && i < j->n_in && st == GF_OK; i++)
        if (j->dev.in[i].data)
            st = j->be->ops->copy_out(j->be, s->in[i].data, j->dev.in[i].data,
                                      gf_tview_bytes(&s->in[i]));
    if (st == GF_OK)
        st = k->run(&a);
    for (size_t i = 0; s == &j->cpu && i < j->n_out && st == GF_OK; i++)
        if (j->dev.out[i].data)
            st = j->be->ops->copy_in(j->be, j->dev.out[i].data, s->out[i].data,
                                     gf_tview_bytes(&s->out[i]));
    return st;
}

static enum gf_status poison_outputs(struct job *j)
{
    enum gf_status st = GF_OK;
    for (size_t i = 0; i < j->n_out && st == GF_OK; i++)
        for (int s = 0; s < 2 && st == GF_OK; s++) {
            struct side *sd = s ? &j->cpu : &j->dev;
            if (sd->be && sd->out[i].data)
                st = sd->be->ops->copy_in(sd->be, sd->out[i].data, j->poison,
                                          gf_tview_bytes(&sd->out[i]));
        }
    return st;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- checking -------------------------------------------------------------------------------- */

/* Allowed max |got - ref| / max |ref| per element type. */
static double tolerance(enum gf_dtype dt)
{
    switch (dt) {
    case GF_DOUBLE: return 1e-10;
    case GF_FLOAT16: return 1e-2;
    case GF_BFLOAT16: return 3e-2;
    default: return 1e-4;
    }
}

static bool is_float(enum gf_dtype dt)
{
    return dt == GF_FLOAT || dt == GF_DOUBLE || dt == GF_FLOAT16 || dt == GF_BFLOAT16;
}

static double elem(enum gf_dtype dt, const void *p, size_t i)
{
    struct gf_tensor t = {.dtype = dt, .nelem = i + 1, .data = (void *)p};
    return gf_tensor_get_f64(&t, i);
}

/* Relative error of got against ref (normwise), INFINITY when a value is
 * missing (NaN, Inf) or an integer differs. */
static double rel_error(enum gf_dtype dt, const void *got, const void *ref, size_t n,
                        size_t bytes)
{
    if (!is_float(dt))
        return memcmp(got, ref, bytes) == 0 ? 0 : INFINITY;
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double g = elem(dt, got, i), r = elem(dt, ref, i);
        if (isnan(r) || isinf(r)) {
            if (!(isnan(r) ? isnan(g) : g == r))
                return INFINITY;
            continue;
        }
        if (!isfinite(g))
            return INFINITY;
        worst = fmax(worst, fabs(g - r));
        scale = fmax(scale, fabs(r));
    }
    return worst == 0 ? 0 : worst / (scale > 0 ? scale : 1);
}

/* Runs k once on poisoned outputs and compares with the reference:
 * GF_OK, *err (the largest relative error) and *ok (every output within
 * its type's tolerance), or the kernel's error. */
static enum gf_status check(struct job *j, const struct gf_kernel *k, const int *cfg,
                            double *err, bool *ok)
{
    enum gf_status st = poison_outputs(j);
    if (st == GF_OK)
        st = run_once(j, k, cfg);
    if (st == GF_OK)
        st = j->be->ops->sync(j->be);
    *err = 0;
    *ok = true;
    for (size_t i = 0; i < j->n_out && st == GF_OK; i++) {
        const struct gf_tview *t = &j->dev.out[i];
        if (!t->data)
            continue;
        st = j->be->ops->copy_out(j->be, j->got, t->data, gf_tview_bytes(t));
        double e = rel_error(t->dtype, j->got, j->ref[i], t->nelem, gf_tview_bytes(t));
        /* TF32 keeps 10 mantissa bits of each operand: a CPU reference
         * differs from a TF32 GEMM by about 1e-3 */
        double tol = t->dtype == GF_FLOAT && node_tf32(j->n) ? 3e-3 : tolerance(t->dtype);
        *ok &= e <= tol;
        *err = fmax(*err, e);
    }
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median time of one run: warm-up, then `repeats` samples of enough runs
 * to last sample_ms each.  A candidate whose first timed run is CUTOFF
 * times slower than `best` is not timed further (that run is its time). */
static enum gf_status time_it(struct job *j, const struct gf_kernel *k, const int *cfg,
                              double best, double *ms)
{
    const struct gf_tune_opts *o = j->o;
    enum gf_status st = GF_OK;
    int warmup = o->warmup > 0 ? o->warmup : DEFAULT_WARMUP;
    int repeats = o->repeats > 0 ? o->repeats : DEFAULT_REPEATS;
    double sample = o->sample_ms > 0 ? o->sample_ms : DEFAULT_SAMPLE_MS;
    for (int i = 0; i < warmup && st == GF_OK; i++)
        st = run_once(j, k, cfg);
    if (st == GF_OK)
        st = j->be->ops->sync(j->be);
    double t0 = now_ms();
    if (st == GF_OK && (st = run_once(j, k, cfg)) == GF_OK)
        st = j->be->ops->sync(j->be);
    double one = now_ms() - t0;
    *ms = one;
    if (st != GF_OK || one > CUTOFF * best)
        return st;
    double reps = one > 0 ? ceil(sample / one) : MAX_REPS;
    int r = reps > MAX_REPS ? MAX_REPS : reps < 1 ? 1 : (int)reps;
    double *samples = malloc((size_t)repeats * sizeof(*samples));
    if (!samples)
        return gf_error(GF_ERR_NOMEM, "out of memory timing");
    for (int s = 0; s < repeats && st == GF_OK; s++) {
        t0 = now_ms();
        for (int i = 0; i < r && st == GF_OK; i++)
            st = run_once(j, k, cfg);
        if (st == GF_OK)
            st = j->be->ops->sync(j->be);
        samples[s] = (now_ms() - t0) / r;
    }
    qsort(samples, (size_t)repeats, sizeof(*samples), cmp_double);
    *ms = samples[repeats / 2];
    free(samples);
    return st;
}

/* ---- choosing the candidates ----------------------------------------------------------------- */

struct cand {
    const struct gf_kernel *k;
    size_t cfg; /* configuration number */
};

static bool picked(const struct cand *c, size_t n, const struct gf_kernel *k, size_t cfg)
{
    for (size_t i = 0; i < n; i++)
        if (c[i].k == k && c[i].cfg == cfg)
            return true;
    return false;
}

/* Every configuration when they fit the budget, else each kernel's
 * default and random others; the default kernel's default comes first. */
static size_t pick(const struct gf_kernel *const *ks, size_t nk, const struct gf_kernel *dflt,
                   size_t budget, uint64_t seed, struct cand *c, size_t *space)
{
    size_t n = 0;
    *space = 0;
    for (size_t i = 0; i < nk; i++)
        *space += gf_tune_space_size(ks[i]);
    c[n++] = (struct cand){dflt, 0};
    for (size_t i = 0; i < nk && n < budget; i++)
        if (!picked(c, n, ks[i], 0))
            c[n++] = (struct cand){ks[i], 0};
    if (*space <= budget) {
        for (size_t i = 0; i < nk; i++)
            for (size_t f = 1; f < gf_tune_space_size(ks[i]); f++)
                c[n++] = (struct cand){ks[i], f};
        return n;
    }
    uint64_t s = seed;
    for (size_t tries = 0; n < budget && tries < 100 * budget; tries++) {
        size_t g = (size_t)(next_rand(&s) % *space), i = 0;
        while (g >= gf_tune_space_size(ks[i]))
            g -= gf_tune_space_size(ks[i++]);
        if (!picked(c, n, ks[i], g))
            c[n++] = (struct cand){ks[i], g};
    }
    return n;
}

/* ---- the tuning core ------------------------------------------------------------------------- */

static enum gf_status reference(struct job *j, const struct gf_kernel *ref)
{
    enum gf_status st = run_once(j, ref, NULL);
    if (st == GF_OK)
        st = j->be->ops->sync(j->be);
    for (size_t i = 0; i < j->n_out && st == GF_OK; i++)
        if (j->dev.out[i].data)
            st = j->be->ops->copy_out(j->be, j->ref[i], j->dev.out[i].data,
                                      gf_tview_bytes(&j->dev.out[i]));
    if (st != GF_OK)
        gf_error_prefix("autotune: the reference kernel failed");
    return st;
}

enum gf_status gf_tune_node(struct gf_backend *be, const struct gf_node *n,
                            const struct gf_tview *in, size_t n_in, const struct gf_tview *out,
                            size_t n_out, const struct gf_kernel *const *kernels,
                            size_t n_kernels, const struct gf_kernel *dflt,
                            const struct gf_tune_opts *opts, struct gf_tune_result *res)
{
    static const struct gf_tune_opts none;
    const struct gf_tune_opts *o = opts ? opts : &none;
    memset(res, 0, sizeof(*res));
    if (n_in > MAXIO || n_out > MAXIO)
        return gf_error(GF_ERR_UNSUPPORTED, "node '%s' (%s): too many inputs or outputs to "
                        "tune", n->name, n->op_type);
    if (!dflt || dflt->n_knobs > GF_TUNE_MAX_KNOBS)
        return gf_error(GF_ERR_UNSUPPORTED, "node '%s' (%s): no default kernel to tune "
                        "against", n->name, n->op_type);
    bool cross = false;
    const struct gf_kernel *ref = dflt;
    for (size_t i = 0; i < n_kernels; i++)
        if (strcmp(kernels[i]->backend, be->ops->name) != 0) {
            cross = true;
            if (strcmp(kernels[i]->backend, "cpu") != 0)
                return gf_error(GF_ERR_UNSUPPORTED, "autotune: kernel '%s' of backend %s "
                                "cannot compete on %s", kernels[i]->impl, kernels[i]->backend,
                                be->ops->name);
            if (ref == dflt)
                ref = kernels[i]; /* the first CPU kernel is the reference */
        }
    size_t budget = o->budget > 0 ? (size_t)o->budget : DEFAULT_BUDGET, space;
    size_t cap = budget + n_kernels + 1;
    struct cand *c = malloc(cap * sizeof(*c));
    struct job j;
    memset(&j, 0, sizeof(j));
    enum gf_status st = c ? job_init(&j, be, n, in, n_in, out, n_out, cross, o)
                          : gf_error(GF_ERR_NOMEM, "out of memory tuning");
    size_t nc = c ? pick(kernels, n_kernels, dflt, budget, o->seed ^ 0x5eed, c, &space) : 0;
    if (c && st == GF_OK)
        st = reference(&j, ref);
    res->n_space = c ? space : 0;
    res->fallback.kernel = dflt;
    gf_tune_config_at(dflt, 0, res->fallback.config);
    res->choice = res->fallback;
    double best = INFINITY;
    for (size_t i = 0; i < nc && st == GF_OK; i++) {
        int cfg[GF_TUNE_MAX_KNOBS] = {0};
        double err, ms;
        bool ok;
        gf_tune_config_at(c[i].k, c[i].cfg, cfg);
        res->n_tried++;
        enum gf_status cs = check(&j, c[i].k, c[i].k->n_knobs ? cfg : NULL, &err, &ok);
        if (cs == GF_OK && !ok)
            res->n_rejected++;
        else if (cs != GF_OK || (cs = time_it(&j, c[i].k, c[i].k->n_knobs ? cfg : NULL,
                                              i ? best : INFINITY, &ms)) != GF_OK)
            res->n_failed++;
        else {
            res->worst_err = fmax(res->worst_err, err);
            if (i == 0)
                res->default_ms = res->best_ms = best = ms;
            else if (ms < best && ms < MIN_GAIN * res->default_ms) {
                best = res->best_ms = ms;
                res->choice.kernel = c[i].k;
                memcpy(res->choice.config, cfg, sizeof(cfg));
            }
        }
        if (i == 0 && (cs != GF_OK || res->n_rejected))
            st = cs != GF_OK ? cs : gf_error(GF_ERR_INTERNAL, "node '%s' (%s): the default "
                                             "kernel '%s' does not reproduce the reference",
                                             n->name, n->op_type, dflt->impl);
        if (o->progress)
            o->progress(o->progress_ctx, i + 1, nc);
    }
    job_free(&j);
    free(c);
    return st;
}

/* ---- the tuner: lookup, tune, record --------------------------------------------------------- */

/* Kernels competing for n on be (the registry's list is per thread: copied). */
static size_t competitors(struct gf_backend *be, const struct gf_node *n,
                          const struct gf_tview *in, size_t n_in, bool with_cpu,
                          const struct gf_kernel **out, size_t cap)
{
    struct gf_tview v[MAXIO];
    match_views(in, n_in, v);
    size_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *name = pass ? "cpu" : be->ops->name;
        size_t nk;
        if (pass && (!with_cpu || strcmp(name, be->ops->name) == 0))
            break;
        const struct gf_kernel *const *ks = gf_kernel_list(name, n->op, &nk);
        for (size_t i = 0; i < nk && count < cap; i++)
            if (accepts(ks[i], n, v, n_in))
                out[count++] = ks[i];
    }
    return count;
}

enum gf_status gf_tuner_tune(struct gf_tuner *t, struct gf_backend *be, const struct gf_node *n,
                             const struct gf_tview *in, size_t n_in, const struct gf_tview *out,
                             size_t n_out, const struct gf_tune_opts *opts,
                             struct gf_tune_result *res)
{
    const struct gf_kernel *ks[128];
    struct gf_tview v[MAXIO];
    memset(res, 0, sizeof(*res));
    if (n_in > MAXIO)
        return gf_error(GF_ERR_UNSUPPORTED, "node '%s' (%s): too many inputs to tune",
                        n->name, n->op_type);
    match_views(in, n_in, v);
    const struct gf_kernel *dflt = gf_kernel_find(be, n, v, n_in);
    size_t nk = competitors(be, n, in, n_in, opts && opts->with_cpu, ks, 128);
    if (!dflt || !nk)
        return gf_error(GF_ERR_UNSUPPORTED, "node '%s' (%s): no %s kernel to tune", n->name,
                        n->op_type, be->ops->name);
    enum gf_status st = gf_tune_node(be, n, in, n_in, out, n_out, ks, nk, dflt, opts, res);
    return st == GF_OK ? gf_tuner_record(t, be, n, in, n_in, out, n_out, res) : st;
}

enum gf_status gf_tuner_record(struct gf_tuner *t, struct gf_backend *be,
                               const struct gf_node *n, const struct gf_tview *in, size_t n_in,
                               const struct gf_tview *out, size_t n_out,
                               const struct gf_tune_result *res)
{
    struct tune_entry e;
    memset(&e, 0, sizeof(e));
    make_key(be, n, in, n_in, out, n_out, &e.key);
    const struct gf_kernel *k = res->choice.kernel;
    snprintf(e.impl, sizeof(e.impl), "%s", k->impl);
    snprintf(e.impl_backend, sizeof(e.impl_backend), "%s", k->backend);
    e.n_knobs = (int)k->n_knobs;
    for (size_t i = 0; i < k->n_knobs; i++) {
        snprintf(e.knob[i], sizeof(e.knob[i]), "%s", k->knobs[i].name);
        e.value[i] = res->choice.config[i];
    }
    e.default_ms = res->default_ms;
    e.best_ms = res->best_ms;
    e.n_tried = (long)res->n_tried;
    e.n_rejected = (long)(res->n_rejected + res->n_failed);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(e.tuned, sizeof(e.tuned), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return tc_put(t, &e);
}

/* The config of e for kernel k, or false (a knob or value k lacks). */
static bool resolve_config(const struct tune_entry *e, const struct gf_kernel *k, int *config)
{
    if ((size_t)e->n_knobs != k->n_knobs)
        return false;
    for (size_t i = 0; i < k->n_knobs; i++) {
        int j = 0;
        while (j < e->n_knobs && strcmp(e->knob[j], k->knobs[i].name) != 0)
            j++;
        if (j == e->n_knobs)
            return false;
        int v = 0;
        while (v < k->knobs[i].n_values && k->knobs[i].values[v] != e->value[j])
            v++;
        if (v == k->knobs[i].n_values)
            return false;
        config[i] = e->value[j];
    }
    return true;
}

bool gf_tuner_lookup_in(struct gf_tuner *t, struct gf_backend *be, const struct gf_node *n,
                        const struct gf_tview *in, size_t n_in, const struct gf_tview *out,
                        size_t n_out, const struct gf_kernel *const *kernels, size_t n_kernels,
                        struct gf_tune_choice *c, struct gf_tune_result *cached)
{
    struct tune_key key;
    struct gf_tview v[MAXIO];
    if (n_in > MAXIO)
        return false;
    make_key(be, n, in, n_in, out, n_out, &key);
    struct tune_entry *e = tc_find(t, &key);
    if (!e)
        return false;
    match_views(in, n_in, v);
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < n_kernels && !c->kernel; i++)
        if (strcmp(kernels[i]->impl, e->impl) == 0 &&
            strcmp(kernels[i]->backend, e->impl_backend) == 0 && accepts(kernels[i], n, v, n_in) &&
            resolve_config(e, kernels[i], c->config))
            c->kernel = kernels[i];
    if (!c->kernel) {
        if (!e->warned)
            tc_warn(t, "%s:%d: no %s kernel '%s' with these knobs runs %s %s now: entry "
                    "ignored", t->path, e->line, e->impl_backend, e->impl, e->key.op,
                    e->key.shapes);
        e->warned = true;
        return false;
    }
    if (cached) {
        memset(cached, 0, sizeof(*cached));
        cached->choice = *c;
        cached->default_ms = e->default_ms;
        cached->best_ms = e->best_ms;
        cached->n_tried = (size_t)e->n_tried;
        cached->n_rejected = (size_t)e->n_rejected;
        cached->cached = true;
    }
    return true;
}

bool gf_tuner_lookup(struct gf_tuner *t, struct gf_backend *be, const struct gf_node *n,
                     const struct gf_tview *in, size_t n_in, const struct gf_tview *out,
                     size_t n_out, struct gf_tune_choice *c, struct gf_tune_result *cached)
{
    const struct gf_kernel *ks[128];
    size_t nk = n_in <= MAXIO ? competitors(be, n, in, n_in, true, ks, 128) : 0;
    return gf_tuner_lookup_in(t, be, n, in, n_in, out, n_out, ks, nk, c, cached);
}
