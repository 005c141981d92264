/* The backend list and the kernel registry (generic over the backends:
 * each folder exports a descriptor, kernels/backend.h), kernel views and
 * errors, and the thread pool of gf_parallel_for. */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"

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

/* ---- the backends ------------------------------------------------------------ */

/*
 * Every backend, one line each: X(build switch, descriptor, name, how to
 * build it).  A switch is 1 or 0 (the Makefile's GF_<NAME>; 1: always
 * built); with 0 the backend is listed but not built, and asking for it
 * says how to build it.
 * The first is the reference every other falls back to per node; where two
 * claim a device, the one listed first is the default there (see
 * docs/backends.md).
 */
#define BACKENDS(X)                                                                       \
    X(1, gf_cpu_backend, "cpu", "")                                                       \
    X(GF_CUDA, gf_cuda_backend, "cuda", "GF_CUDA=1 with the CUDA toolkit's nvcc")         \
    X(GF_OPENCL, gf_opencl_backend, "opencl", "GF_OPENCL=1 with ocl-icd-opencl-dev")

#define BUILT_1(desc, nm, lacks) &desc
#define BUILT_0(desc, nm, lacks) &(const struct gf_backend_desc){.name = nm, .missing = lacks}
#define BUILT(on, ...) BUILT_(on, __VA_ARGS__)
#define BUILT_(on, ...) BUILT_##on(__VA_ARGS__)
#define DECLARE(on, desc, ...) extern const struct gf_backend_desc desc;
#define ENTRY(on, desc, nm, lacks) BUILT(on, desc, nm, lacks),

BACKENDS(DECLARE)
static const struct gf_backend_desc *const backends[] = {BACKENDS(ENTRY)};
#define N_BACKENDS (sizeof(backends) / sizeof(backends[0]))

static const struct gf_backend_desc *desc_named(const char *name)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

const char *gf_backend_name(size_t i)
{
    return i < N_BACKENDS ? backends[i]->name : NULL;
}

static const struct gf_backend_ops *built[N_BACKENDS];
static size_t n_built;
static pthread_once_t built_once = PTHREAD_ONCE_INIT;

static void list_built(void)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (backends[i]->ops)
            built[n_built++] = backends[i]->ops;
}

const struct gf_backend_ops *const *gf_backend_all(size_t *n)
{
    pthread_once(&built_once, list_built);
    *n = n_built;
    return built;
}

#define MAX_DEVICES 32

/* Whether backend j (built) claims a device named `name`. */
static bool claims(size_t j, const char *name)
{
    struct gf_device_info d[MAX_DEVICES];
    size_t n = backends[j]->ops->list_devices(d, MAX_DEVICES);
    for (size_t k = 0; k < n && k < MAX_DEVICES; k++)
        if (strcmp(d[k].name, name) == 0 && backends[j]->is_default_on(&d[k]))
            return true;
    return false;
}

/* Devices of backend i with is_default as `auto` sees it: the backend's
 * claim, dropped where a backend listed before it claims a device of the
 * same name.  Returns how many exist (0: none, or not built). */
static size_t devices_of(size_t i, struct gf_device_info *out, size_t max)
{
    const struct gf_backend_desc *b = backends[i];
    if (!b->ops)
        return 0;
    size_t n = b->ops->list_devices(out, max);
    for (size_t k = 0; k < n && k < max; k++) {
        out[k].is_default = b->is_default_on(&out[k]);
        for (size_t j = 0; j < i && out[k].is_default; j++)
            if (backends[j]->ops && claims(j, out[k].name))
                out[k].is_default = false;
    }
    return n;
}

size_t gf_backend_devices(const char *name, struct gf_device_info *out, size_t max)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return devices_of(i, out, max);
    return 0;
}

/* `--backend auto`: the first default device that is a GPU, in list order,
 * else the first default device (the reference's); with `device`, among those
 * whose name contains it. */
static enum gf_status open_auto(const char *device, struct gf_backend **out)
{
    const struct gf_backend_desc *pick = NULL;
    char pick_dev[sizeof(((struct gf_device_info *)0)->name)] = "";
    for (size_t i = 0; i < N_BACKENDS; i++) {
        struct gf_device_info d[MAX_DEVICES];
        size_t n = devices_of(i, d, MAX_DEVICES);
        for (size_t k = 0; k < n && k < MAX_DEVICES; k++) {
            if (!d[k].is_default || (device && !strstr(d[k].name, device)))
                continue;
            if (d[k].is_gpu)
                return backends[i]->open(d[k].name, out);
            if (!pick) {
                pick = backends[i];
                snprintf(pick_dev, sizeof(pick_dev), "%s", d[k].name);
            }
        }
    }
    if (pick)
        return pick->open(pick_dev, out);
    /* no backend is the default on such a device: the reference backend's
     * message names the device it has */
    return backends[0]->open(device, out);
}

struct gf_backend *gf_backend_get(const char *name)
{
    struct gf_backend *be = NULL;
    return gf_backend_open(name ? name : backends[0]->name, NULL, &be) == GF_OK ? be : NULL;
}

enum gf_status gf_backend_open(const char *name, const char *device, struct gf_backend **out)
{
    *out = NULL;
    if (!name || !*name) {
        const char *env = getenv("GRAPHFUSE_BACKEND");
        name = env && *env ? env : "auto";
    }
    if (strcmp(name, "auto") == 0)
        return open_auto(device, out);
    const struct gf_backend_desc *b = desc_named(name);
    if (b && !b->ops)
        return gf_error(GF_ERR_UNSUPPORTED, "backend '%s' is not available: graphfuse was built "
                        "without it (make %s builds it)", name, b->missing);
    if (b)
        return b->open(device, out);
    char names[256] = "";
    for (size_t i = 0; i < N_BACKENDS; i++)
        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s, ",
                 backends[i]->name);
    return gf_error(GF_ERR_INVALID, "unknown backend '%s' (%sor auto)", name, names);
}

/* ---- registry -------------------------------------------------------------- */

/* The kernel tables of backend `name` (none for an unknown or absent one). */
static const struct gf_kernel_table *const *backend_tables(const char *name)
{
    static const struct gf_kernel_table *const none[] = {NULL};
    const struct gf_backend_desc *b = desc_named(name);
    return b && b->tables ? b->tables : none;
}

const struct gf_kernel *gf_kernel_find(const struct gf_backend *be, const struct gf_node *n,
                                       const struct gf_tview *in, size_t n_in)
{
    enum gf_dtype dt = n_in && (in[0].data || in[0].host) ? in[0].dtype : GF_UNDEFINED;
    for (const struct gf_kernel_table *const *t = backend_tables(be->ops->name); *t; t++) {
        for (size_t i = 0; i < (*t)->count; i++) {
            const struct gf_kernel *k = &(*t)->kernels[i];
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
    for (const struct gf_kernel_table *const *t = backend_tables(backend); *t; t++)
        for (size_t i = 0; i < (*t)->count && *n < 64; i++)
            if ((*t)->kernels[i].op == op)
                found[(*n)++] = &(*t)->kernels[i];
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
