/* The backend table and the kernel registry: CPU backend first. */
#include <pthread.h>
#include <stdarg.h>
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
};

static struct gf_backend cpu_backend = {.ops = &cpu_ops};
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_open(void)
{
    cpu_init(&cpu_backend, NULL);
}

struct gf_backend *gf_backend_get(const char *name)
{
    if (!name || strcmp(name, "cpu") == 0) {
        pthread_once(&cpu_once, cpu_open);
        return &cpu_backend;
    }
    return NULL;
}

/* ---- registry -------------------------------------------------------------- */

static const struct gf_kernel_table *const cpu_tables[] = {
    &gf_cpu_elementwise_table,
    &gf_cpu_reduce_table,
    &gf_cpu_layout_table,
    &gf_cpu_matmul_table,
};

const struct gf_kernel *gf_kernel_find(const struct gf_backend *be, const struct gf_node *n,
                                       const struct gf_tview *in, size_t n_in)
{
    if (strcmp(be->ops->name, "cpu") != 0)
        return NULL;
    enum gf_dtype dt = n_in && in[0].data ? in[0].dtype : GF_UNDEFINED;
    for (size_t t = 0; t < sizeof(cpu_tables) / sizeof(cpu_tables[0]); t++) {
        const struct gf_kernel_table *tab = cpu_tables[t];
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
    if (strcmp(backend, "cpu") != 0)
        return found;
    for (size_t t = 0; t < sizeof(cpu_tables) / sizeof(cpu_tables[0]); t++)
        for (size_t i = 0; i < cpu_tables[t]->count && *n < 64; i++)
            if (cpu_tables[t]->kernels[i].op == op)
                found[(*n)++] = &cpu_tables[t]->kernels[i];
    return found;
}

/* ---- parallel for ------------------------------------------------------------ */

struct pf_job {
    void (*fn)(void *ctx, size_t begin, size_t end);
    void *ctx;
    size_t begin, end;
};

static void *pf_thread(void *arg)
{
    struct pf_job *j = arg;
    j->fn(j->ctx, j->begin, j->end);
    return NULL;
}

void gf_parallel_for(int n_threads, size_t n, size_t grain,
                     void (*fn)(void *ctx, size_t begin, size_t end), void *ctx)
{
    if (grain == 0)
        grain = 1;
    size_t chunks = n / grain;
    int t = n_threads < 1 ? 1 : n_threads > 64 ? 64 : n_threads;
    if ((size_t)t > chunks)
        t = chunks ? (int)chunks : 1;
    if (t <= 1) {
        if (n)
            fn(ctx, 0, n);
        return;
    }
    pthread_t th[64];
    struct pf_job jobs[64];
    bool started[64] = {false};
    for (int i = 0; i < t; i++) {
        jobs[i] = (struct pf_job){fn, ctx, n * (size_t)i / (size_t)t,
                                  n * (size_t)(i + 1) / (size_t)t};
        /* a thread that cannot start runs its chunk here instead */
        started[i] = i > 0 && pthread_create(&th[i], NULL, pf_thread, &jobs[i]) == 0;
    }
    fn(ctx, jobs[0].begin, jobs[0].end);
    for (int i = 1; i < t; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            fn(ctx, jobs[i].begin, jobs[i].end);
    }
}
