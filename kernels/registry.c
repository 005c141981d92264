/* The backend table and the kernel registry: CPU backend first. */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/cpu.h"

/* ---- views ------------------------------------------------------------- */

void gf_tview_set_shape(struct gf_tview *t, int rank, const int64_t *dims)
{
    t->rank = rank;
    t->nelem = 1;
    for (int i = 0; i < rank; i++) {
        t->dims[i] = dims[i];
        t->nelem *= (size_t)dims[i];
    }
}

size_t gf_tview_bytes(const struct gf_tview *t)
{
    return gf_dtype_bytes(t->dtype, t->nelem);
}

enum gf_status gf_kernel_error(const struct gf_kernel_args *a, enum gf_status st,
                               const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const struct gf_node *n = a->node;
    if (n && n->name && *n->name)
        return gf_error(st, "node '%s' (%s): %s", n->name, n->op_type, msg);
    return gf_error(st, "node #%d (%s): %s", n ? n->id : -1, n ? n->op_type : "?", msg);
}

/* ---- CPU backend: host memory, 64-byte aligned ---------------------------- */

static enum gf_status cpu_init(struct gf_backend *be, const char *device)
{
    (void)device;
    if (be->n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        be->n_threads = n > 0 ? (int)n : 1;
    }
    return GF_OK;
}

static void cpu_free(struct gf_backend *be)
{
    (void)be;
}

static void *cpu_alloc(struct gf_backend *be, size_t bytes)
{
    (void)be;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        gf_error(GF_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    return p;
}

static void cpu_release(struct gf_backend *be, void *p)
{
    (void)be;
    free(p);
}

static enum gf_status cpu_copy(struct gf_backend *be, void *dst, const void *src, size_t n)
{
    (void)be;
    if (n)
        memcpy(dst, src, n);
    return GF_OK;
}

static enum gf_status cpu_sync(struct gf_backend *be)
{
    (void)be;
    return GF_OK;
}

static const char *cpu_device_name(const struct gf_backend *be)
{
    (void)be;
    return "host CPU";
}

static void *cpu_view(struct gf_backend *be, void *base, size_t off, size_t n)
{
    (void)be;
    (void)n;
    return (unsigned char *)base + off;
}

static size_t cpu_list_devices(struct gf_device_info *out, size_t max)
{
    if (max == 0)
        return 1;
    memset(out, 0, sizeof(*out));
    snprintf(out->platform, sizeof(out->platform), "host");
    snprintf(out->name, sizeof(out->name), "host CPU");
    snprintf(out->driver, sizeof(out->driver), "graphfuse %s", GF_VERSION);
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    out->memory = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    out->compute_units = n > 0 ? (int)n : 1;
    out->is_default = true;
    return 1;
}

static const char *cpu_driver_version(const struct gf_backend *be)
{
    (void)be;
    return "graphfuse " GF_VERSION;
}

static const struct gf_backend_ops cpu_ops = {
    .name = "cpu",
    .init = cpu_init,
    .free = cpu_free,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .copy_in = cpu_copy,
    .copy_out = cpu_copy,
    .sync = cpu_sync,
    .device_name = cpu_device_name,
    .view = cpu_view,
    .view_release = NULL,
    .copy = cpu_copy,
    .list_devices = cpu_list_devices,
    .driver_version = cpu_driver_version,
};

static struct gf_backend cpu_backend = {.ops = &cpu_ops, .align = 64, .host_memory = true};
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_open(void)
{
    cpu_init(&cpu_backend, NULL);
}

#ifdef GF_OPENCL
/* kernels/opencl/backend.c */
extern const struct gf_backend_ops gf_opencl_ops;
enum gf_status gf_opencl_open(const char *device, struct gf_backend **out);
#endif

static const struct gf_backend_ops *const all_backends[] = {
    &cpu_ops,
#ifdef GF_OPENCL
    &gf_opencl_ops,
#endif
};

const struct gf_backend_ops *const *gf_backend_all(size_t *n)
{
    *n = sizeof(all_backends) / sizeof(all_backends[0]);
    return all_backends;
}

struct gf_backend *gf_backend_get(const char *name)
{
    struct gf_backend *be = NULL;
    if (!name || strcmp(name, "cpu") == 0) {
        pthread_once(&cpu_once, cpu_open);
        return &cpu_backend;
    }
    return gf_backend_open(name, NULL, &be) == GF_OK ? be : NULL;
}

enum gf_status gf_backend_open(const char *name, const char *device, struct gf_backend **out)
{
    *out = NULL;
    if (!name || !*name) {
        const char *env = getenv("GRAPHFUSE_BACKEND");
        name = env && *env ? env : "auto";
    }
    if (strcmp(name, "auto") == 0) {
#ifdef GF_OPENCL
        /* a GPU OpenCL device is the default over the host CPU */
        struct gf_device_info d[16];
        size_t nd = gf_opencl_ops.list_devices(d, 16);
        for (size_t i = 0; i < nd && i < 16; i++)
            if (d[i].is_default && (!device || strstr(d[i].name, device)))
                return gf_opencl_open(device ? device : d[i].name, out);
#endif
        name = "cpu";
    }
    if (strcmp(name, "cpu") == 0) {
        if (device && !strstr("host CPU", device))
            return gf_error(GF_ERR_UNSUPPORTED, "backend 'cpu' has no device '%s' (it runs on "
                            "'host CPU')", device);
        pthread_once(&cpu_once, cpu_open);
        *out = &cpu_backend;
        return GF_OK;
    }
    if (strcmp(name, "opencl") == 0) {
#ifdef GF_OPENCL
        return gf_opencl_open(device, out);
#else
        return gf_error(GF_ERR_UNSUPPORTED, "backend 'opencl' is not available: graphfuse was "
                        "built without OpenCL (install ocl-icd-opencl-dev and rebuild)");
#endif
    }
    if (strcmp(name, "cuda") == 0)
        return gf_error(GF_ERR_UNSUPPORTED, "backend 'cuda' is not available: this build has "
                        "no CUDA backend");
    return gf_error(GF_ERR_INVALID, "unknown backend '%s' (cpu, opencl, cuda or auto)", name);
}

/* ---- registry -------------------------------------------------------------- */

/* The fused ops of domain graphfuse (cpu/fused_*.c). */
extern const struct gf_kernel_table gf_cpu_fused_norm_table;
extern const struct gf_kernel_table gf_cpu_fused_act_table;
extern const struct gf_kernel_table gf_cpu_fused_matmul_table;
extern const struct gf_kernel_table gf_cpu_fused_loss_table;
extern const struct gf_kernel_table gf_cpu_fused_attn_table;
/* ONNX Runtime contrib ops and opset-23 ops (cpu/contrib.c): adapters over
 * the fused kernels, for models written by optimize --target ort / onnx. */
extern const struct gf_kernel_table gf_cpu_contrib_table;

static const struct gf_kernel_table *const cpu_tables[] = {
    &gf_cpu_elementwise_table,
    &gf_cpu_reduce_table,
    &gf_cpu_layout_table,
    &gf_cpu_matmul_table,
    &gf_cpu_grad_table,
    &gf_cpu_fused_norm_table,
    &gf_cpu_fused_act_table,
    &gf_cpu_fused_matmul_table,
    &gf_cpu_fused_loss_table,
    &gf_cpu_fused_attn_table,
    &gf_cpu_fused_grad_table,
    &gf_cpu_contrib_table,
};

#ifdef GF_OPENCL
/* kernels/opencl/tables.c */
extern const struct gf_kernel_table *const gf_opencl_tables[];
extern const size_t gf_opencl_n_tables;
#endif

/* The kernel tables of backend `name` (none for an unknown one). */
static const struct gf_kernel_table *const *backend_tables(const char *name, size_t *n)
{
    if (strcmp(name, "cpu") == 0) {
        *n = sizeof(cpu_tables) / sizeof(cpu_tables[0]);
        return cpu_tables;
    }
#ifdef GF_OPENCL
    if (strcmp(name, "opencl") == 0) {
        *n = gf_opencl_n_tables;
        return gf_opencl_tables;
    }
#endif
    *n = 0;
    return NULL;
}

const struct gf_kernel *gf_kernel_find(const struct gf_backend *be, const struct gf_node *n,
                                       const struct gf_tview *in, size_t n_in)
{
    size_t n_tab;
    const struct gf_kernel_table *const *tables = backend_tables(be->ops->name, &n_tab);
    enum gf_dtype dt = n_in && (in[0].data || in[0].host) ? in[0].dtype : GF_UNDEFINED;
    for (size_t t = 0; t < n_tab; t++) {
        const struct gf_kernel_table *tab = tables[t];
        for (size_t i = 0; i < tab->count; i++) {
            const struct gf_kernel *k = &tab->kernels[i];
            if (k->op != n->op || (k->dtype != GF_UNDEFINED && k->dtype != dt))
                continue;
            if (!k->supports || k->supports(n, in, n_in))
                return k;
        }
    }
    return NULL;
}

const struct gf_kernel *const *gf_kernel_list(const char *backend, enum gf_op op, size_t *n)
{
    static _Thread_local const struct gf_kernel *found[64];
    *n = 0;
    size_t n_tab;
    const struct gf_kernel_table *const *tables = backend_tables(backend, &n_tab);
    for (size_t t = 0; t < n_tab; t++)
        for (size_t i = 0; i < tables[t]->count && *n < 64; i++)
            if (tables[t]->kernels[i].op == op)
                found[(*n)++] = &tables[t]->kernels[i];
    return found;
}

/* ---- parallel for ------------------------------------------------------------ */

/*
 * A persistent pool: workers are started on first need and sleep on a
 * condition variable between calls, so a parallel loop costs a wake-up,
 * not a thread creation (which dominated small ops).  One loop uses the
 * pool at a time; a loop started while it is busy (another session's
 * thread, or a kernel nested in a parallel loop) runs on its caller.
 */
#define PF_MAX 64

static struct {
    pthread_mutex_t busy; /* held by the loop using the pool */
    pthread_mutex_t mu;   /* guards everything below */
    pthread_cond_t wake, done;
    int n_workers;
    uint64_t gen; /* bumped for every loop */
    void (*fn)(void *ctx, size_t begin, size_t end);
    void *ctx;
    size_t n;
    int t;         /* threads in this loop, caller included */
    int remaining; /* workers still running their chunk */
} pf = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
        PTHREAD_COND_INITIALIZER, 0, 0, NULL, NULL, 0, 0, 0};

/* Generation each worker was started in: a worker created for a loop must
 * still run that loop, whose generation is bumped before it gets the lock. */
static uint64_t pf_born[PF_MAX];

/* Worker i runs chunk i + 1 of each loop that has that many threads. */
static void *pf_worker(void *arg)
{
    int i = (int)(intptr_t)arg;
    pthread_mutex_lock(&pf.mu);
    uint64_t seen = pf_born[i];
    for (;;) {
        while (pf.gen == seen)
            pthread_cond_wait(&pf.wake, &pf.mu);
        seen = pf.gen;
        if (i + 1 >= pf.t)
            continue;
        void (*fn)(void *, size_t, size_t) = pf.fn;
        void *ctx = pf.ctx;
        size_t n = pf.n, t = (size_t)pf.t, c = (size_t)i + 1;
        pthread_mutex_unlock(&pf.mu);
        fn(ctx, n * c / t, n * (c + 1) / t);
        pthread_mutex_lock(&pf.mu);
        if (--pf.remaining == 0)
            pthread_cond_signal(&pf.done);
    }
    return NULL;
}

/* Starts workers up to `want` (under pf.mu); returns how many exist. */
static int pf_grow(int want)
{
    while (pf.n_workers < want) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pf_born[pf.n_workers] = pf.gen;
        int rc = pthread_create(&th, &at, pf_worker, (void *)(intptr_t)pf.n_workers);
        pthread_attr_destroy(&at);
        if (rc != 0)
            break;
        pf.n_workers++;
    }
    return pf.n_workers;
}

void gf_parallel_for(int n_threads, size_t n, size_t grain,
                     void (*fn)(void *ctx, size_t begin, size_t end), void *ctx)
{
    if (grain == 0)
        grain = 1;
    size_t chunks = n / grain;
    int t = n_threads < 1 ? 1 : n_threads > PF_MAX ? PF_MAX : n_threads;
    if ((size_t)t > chunks)
        t = chunks ? (int)chunks : 1;
    if (t <= 1 || pthread_mutex_trylock(&pf.busy) != 0) {
        if (n)
            fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&pf.mu);
    int workers = pf_grow(t - 1);
    if (workers < t - 1)
        t = workers + 1;
    pf.fn = fn;
    pf.ctx = ctx;
    pf.n = n;
    pf.t = t;
    pf.remaining = t - 1;
    pf.gen++;
    pthread_cond_broadcast(&pf.wake);
    pthread_mutex_unlock(&pf.mu);
    fn(ctx, 0, n / (size_t)t);
    pthread_mutex_lock(&pf.mu);
    while (pf.remaining > 0)
        pthread_cond_wait(&pf.done, &pf.mu);
    pthread_mutex_unlock(&pf.mu);
    pthread_mutex_unlock(&pf.busy);
}
