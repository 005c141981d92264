/* The backend list and the kernel registry (generic over the backends:
 * each folder exports a descriptor, kernels/backend.h), kernel views and
 * errors, and the thread pool of gf_parallel_for. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
 * A persistent pool of workers, started on first need.  One loop uses the
 * pool at a time; a loop started while it is busy (another session's
 * thread, or a kernel nested in a parallel loop) runs on its caller.
 *
 * A loop of n items is cut into K chunks, K a function of (n, grain,
 * n_threads) alone (up to PF_SPLIT chunks a thread, none smaller than
 * grain), so the chunk boundaries never depend on which thread ran what
 * or on timing: results stay the same run after run.  The caller and the
 * workers take chunks from one atomic counter, so a worker whose core is
 * busy with another process and has not started yet costs nothing: the
 * caller takes its chunks.  The counter shares a word with the loop's
 * sequence number, so a worker that wakes late for a finished loop cannot
 * take a chunk of the next one.
 *
 * Between loops workers spin on the loop word for a short while (pause,
 * then sched_yield), then sleep on a condition variable; the caller
 * likewise spins briefly before sleeping while the last chunks finish.
 * A small loop (under PF_WAKE_UNITS grains of more than one item) does not
 * wake sleeping workers: the caller runs it alone.  GF_POOL_SPIN_US (microseconds,
 * default 100, 0 = sleep at once) sets the spin.
 *
 * On a busy machine a worker can take a chunk and then lose its core for
 * milliseconds while the caller waits for it, and the workers share the
 * process's CPU time with the caller (the scheduler's autogroups): two
 * threads lose to one.  So the caller judges the pool over windows of
 * PA_WIN_NS of shared loops: it times its own chunks (wall, and CPU time
 * by CLOCK_THREAD_CPUTIME_ID), takes the loop's work as its chunks' CPU
 * time times chunks / its chunks, and puts the pool aside when it did not
 * get its core (CPU / wall of its chunks under PA_STARVED) or when the
 * window took more wall time per unit of work than its loops alone did
 * lately.  Aside, loops run on the caller alone (the same chunks, so the
 * same results) for a back-off that doubles while the pool keeps losing
 * (PA_BACKOFF_MIN..MAX) and halves when it wins; at its end the pool
 * stays aside while the caller alone gets under PA_STARVED of a core,
 * else the next window tries the workers again.  While aside, gf_parallel_width tells kernels
 * to give OpenBLAS one thread too.
 * GF_POOL_ADAPT=0 turns this off (the workers share every loop).
 */
#define PF_MAX 64
#define PF_SPLIT 4      /* chunks per thread, at most */
#define PF_WAKE_UNITS 8 /* grains a loop needs before it wakes sleeping workers */

#if defined(__x86_64__) || defined(__i386__)
#define PF_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define PF_PAUSE() __asm__ __volatile__("yield")
#else
#define PF_PAUSE() ((void)0)
#endif

static struct {
    pthread_mutex_t busy; /* held by the loop using the pool */
    pthread_mutex_t mu;   /* for the condition variables and starting workers */
    pthread_cond_t wake, done;
    int n_workers;
    uint32_t seq; /* the last loop's sequence number (the caller's copy) */
    /* (seq << 8 | threads of the loop): what workers wait on */
    _Atomic uint64_t loop;
    /* (seq << 32 | chunks << 16 | next chunk): what everyone takes from */
    _Atomic uint64_t claim;
    _Atomic size_t finished;   /* chunks finished in this loop */
    _Atomic int sleepers;      /* workers asleep on `wake` */
    _Atomic int caller_asleep; /* the caller sleeps on `done` */
    /* the loop, stable while any chunk of it is not finished */
    void (*fn)(void *ctx, size_t begin, size_t end);
    void *ctx;
    size_t n;
} pf = {.busy = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER,
        .wake = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

/* Whether the pool pays, judged by the caller holding pf.busy (state
 * guarded by pf.busy); times in ns. */
#define PA_WIN_NS 20000000L       /* judge after this much shared-loop wall time */
#define PA_MEASURE_NS 2000000L    /* CPU time alone that makes a measure */
#define PA_STARVED 0.75           /* the caller on its core less than this: busy */
#define PA_BACKOFF_MIN 4000000L   /* first time aside: 4 ms */
#define PA_BACKOFF_MAX 256000000L /* longest: 256 ms */
static struct {
    /* this window of shared loops: wall, work (CPU time, estimated), and
     * the caller's own chunks: wall, CPU */
    double wall, work, own_wall, own_cpu;
    /* loops alone lately (halved at each time aside): wall, CPU */
    double alone_wall, alone_cpu;
    long aside_until; /* pf_now_ns: loops before this run on the caller alone */
    long backoff;
    bool debug;
    unsigned long shared, alone, windows_lost, kept_aside; /* GF_POOL_STATS */
} pa = {.backoff = PA_BACKOFF_MIN};
static bool pf_adapt = true;
/* pa.aside_until != 0, for gf_parallel_width (read without pf.busy) */
static _Atomic bool pa_is_aside;

/* The loop word each worker was started in: a worker created for a loop
 * must still run that loop, published after it was created. */
static uint64_t pf_born[PF_MAX];
static long pf_spin_ns = 100000;
static pthread_once_t pf_once = PTHREAD_ONCE_INIT;

static void pf_print_stats(void)
{
    fprintf(stderr,
            "gf pool: %lu loops shared, %lu alone while aside; %lu windows lost, %lu kept aside\n",
            pa.shared, pa.alone, pa.windows_lost, pa.kept_aside);
}

static void pf_read_env(void)
{
    const char *a = getenv("GF_POOL_ADAPT");
    if (a && strcmp(a, "0") == 0)
        pf_adapt = false;
    const char *st = getenv("GF_POOL_STATS");
    if (st && *st && strcmp(st, "0") != 0) {
        pa.debug = strcmp(st, "2") == 0;
        atexit(pf_print_stats);
    }
    const char *e = getenv("GF_POOL_SPIN_US");
    if (e && *e) {
        char *end;
        long us = strtol(e, &end, 10);
        if (*end == '\0' && us >= 0 && us <= 1000000)
            pf_spin_ns = us * 1000;
    }
}

static long pf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static long pf_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Begin of chunk c of K over [0, n): the first n % K chunks one longer. */
static size_t pf_begin(size_t n, size_t k, size_t c)
{
    size_t q = n / k, r = n % k;
    return c * q + (c < r ? c : r);
}

/* Takes and runs chunks of loop `seq` until none is left, counting them
 * in *ran; true when this thread finished the loop's last chunk. */
static bool pf_run_chunks(uint32_t seq, size_t *ran)
{
    uint64_t c = atomic_load_explicit(&pf.claim, memory_order_acquire);
    for (;;) {
        size_t k = (size_t)(c >> 16 & 0xffff), next = (size_t)(c & 0xffff);
        if ((uint32_t)(c >> 32) != seq || next >= k)
            return false;
        if (!atomic_compare_exchange_weak_explicit(&pf.claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        /* chunk `next` is ours: the loop cannot end before we finish it */
        size_t n = pf.n;
        pf.fn(pf.ctx, pf_begin(n, k, next), pf_begin(n, k, next + 1));
        ++*ran;
        if (atomic_fetch_add(&pf.finished, 1) + 1 == k)
            return true;
        c = atomic_load_explicit(&pf.claim, memory_order_acquire);
    }
}

/* Worker i takes part in each loop of more than i + 1 threads. */
static void *pf_worker(void *arg)
{
    int i = (int)(intptr_t)arg;
    uint64_t seen = pf_born[i];
    for (;;) {
        uint64_t w = atomic_load_explicit(&pf.loop, memory_order_acquire);
        long t0 = 0;
        for (unsigned spin = 0; w == seen && pf_spin_ns > 0; spin++) {
            if ((spin & 63) == 0) {
                long t = pf_now_ns();
                if (spin == 0)
                    t0 = t;
                else if (t - t0 > pf_spin_ns)
                    break;
                else if (t - t0 > pf_spin_ns / 2)
                    sched_yield();
            }
            PF_PAUSE();
            w = atomic_load_explicit(&pf.loop, memory_order_acquire);
        }
        if (w == seen) {
            pthread_mutex_lock(&pf.mu);
            atomic_fetch_add(&pf.sleepers, 1);
            while ((w = atomic_load(&pf.loop)) == seen)
                pthread_cond_wait(&pf.wake, &pf.mu);
            atomic_fetch_sub(&pf.sleepers, 1);
            pthread_mutex_unlock(&pf.mu);
        }
        seen = w;
        if ((int)(w & 0xff) <= i + 1)
            continue;
        size_t ran = 0;
        if (pf_run_chunks((uint32_t)(w >> 8), &ran) && atomic_load(&pf.caller_asleep)) {
            pthread_mutex_lock(&pf.mu);
            pthread_cond_signal(&pf.done);
            pthread_mutex_unlock(&pf.mu);
        }
    }
    return NULL;
}

/* Starts workers up to `want` (under pf.mu, with pf.busy held); returns
 * how many exist. */
static int pf_grow(int want)
{
    while (pf.n_workers < want) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pf_born[pf.n_workers] = atomic_load(&pf.loop);
        int rc = pthread_create(&th, &at, pf_worker, (void *)(intptr_t)pf.n_workers);
        pthread_attr_destroy(&at);
        if (rc != 0)
            break;
        pf.n_workers++;
    }
    return pf.n_workers;
}

/* Puts the pool aside until now + the back-off, which doubles. */
static void pa_aside(long now)
{
    pa.aside_until = now + pa.backoff;
    atomic_store_explicit(&pa_is_aside, true, memory_order_relaxed);
    pa.backoff = pa.backoff * 2 < PA_BACKOFF_MAX ? pa.backoff * 2 : PA_BACKOFF_MAX;
    /* the older loops alone count half */
    pa.alone_wall /= 2;
    pa.alone_cpu /= 2;
}

/* One shared loop took `wall`; the caller ran `mine` of its k chunks in
 * own_wall, own_cpu of its CPU time.  At the end of a window the pool is
 * put aside when the caller was starved of its core (a busy machine,
 * where a second thread mostly waits for a core and the loops wait for
 * it) or when the window took more wall time per unit of work than the
 * caller's loops alone did lately (as if it had its core to itself before
 * any was measured). */
static void pa_judge(long wall, long own_wall, long own_cpu, size_t mine, size_t k, long now)
{
    if (mine == 0)
        return; /* no measure of the work */
    pa.wall += (double)wall;
    pa.work += (double)own_cpu * (double)k / (double)mine;
    pa.own_wall += (double)own_wall;
    pa.own_cpu += (double)own_cpu;
    if (pa.wall < PA_WIN_NS)
        return;
    double on_core = pa.own_wall > 0 ? pa.own_cpu / pa.own_wall : 1.0;
    double alone = pa.alone_cpu >= PA_MEASURE_NS ? pa.alone_wall / pa.alone_cpu : 1.0;
    bool lost = on_core < PA_STARVED || pa.wall > alone * pa.work;
    if (pa.debug)
        fprintf(stderr, "gf pool: window %.1f ms, wall/work %.2f, alone %.2f, on core %.2f: %s\n",
                pa.wall / 1e6, pa.wall / pa.work, alone, on_core, lost ? "aside" : "shared");
    if (lost) {
        pa_aside(now);
        pa.windows_lost++;
    } else {
        pa.backoff = pa.backoff / 2 > PA_BACKOFF_MIN ? pa.backoff / 2 : PA_BACKOFF_MIN;
    }
    pa.wall = pa.work = pa.own_wall = pa.own_cpu = 0;
}

/* Whether the pool is still aside.  At the end of the back-off it stays
 * aside while the caller alone gets under PA_STARVED of its core (no core
 * for a worker either), else the next window tries the workers again. */
static bool pa_still_aside(long now)
{
    if (now < pa.aside_until)
        return true;
    if (pa.alone_cpu >= PA_MEASURE_NS && pa.alone_cpu < PA_STARVED * pa.alone_wall) {
        if (pa.debug)
            fprintf(stderr, "gf pool: alone on core %.2f: still aside\n",
                    pa.alone_cpu / pa.alone_wall);
        pa_aside(now);
        pa.kept_aside++;
        return true;
    }
    pa.aside_until = 0;
    atomic_store_explicit(&pa_is_aside, false, memory_order_relaxed);
    return false;
}

/* How many threads a kernel should give a library's own threads (OpenBLAS)
 * now: 1 while the pool is put aside (the machine is busy; a BLAS call
 * would wait for its threads as a loop waits for its workers), else
 * n_threads. */
int gf_parallel_width(int n_threads)
{
    return atomic_load_explicit(&pa_is_aside, memory_order_relaxed) ? 1 : n_threads;
}

/* The K chunks one after the other on the caller. */
static void pf_serial(size_t n, size_t k, void (*fn)(void *, size_t, size_t), void *ctx)
{
    for (size_t c = 0; c < k; c++)
        fn(ctx, pf_begin(n, k, c), pf_begin(n, k, c + 1));
}

void gf_parallel_for(int n_threads, size_t n, size_t grain,
                     void (*fn)(void *ctx, size_t begin, size_t end), void *ctx)
{
    if (n == 0)
        return;
    if (grain == 0)
        grain = 1;
    size_t units = n / grain;
    int t = n_threads < 1 ? 1 : n_threads > PF_MAX ? PF_MAX : n_threads;
    if ((size_t)t > units)
        t = units ? (int)units : 1;
    if (t <= 1) {
        fn(ctx, 0, n);
        return;
    }
    size_t k = (size_t)t * PF_SPLIT; /* <= 256: fits the claim word's 16 bits */
    k = k < units ? k : units;
    if (pthread_mutex_trylock(&pf.busy) != 0) {
        pf_serial(n, k, fn, ctx);
        return;
    }
    pthread_once(&pf_once, pf_read_env);
    /* every worker asleep and a small loop: not worth a wake-up (grain 1:
     * the caller sized every item to be worth a thread, as fu_run_parts
     * and the GEMM tiles do: a few heavy items are no small loop) */
    if (pf.n_workers >= t - 1 && grain > 1 && units < PF_WAKE_UNITS &&
        atomic_load(&pf.sleepers) == pf.n_workers) {
        pf_serial(n, k, fn, ctx);
        pthread_mutex_unlock(&pf.busy);
        return;
    }
    /* the pool lost lately: the caller alone until the back-off ends */
    if (pa.aside_until) {
        long a0 = pf_now_ns();
        if (pa_still_aside(a0)) {
            pa.alone++;
            long c0 = pf_cpu_ns();
            pf_serial(n, k, fn, ctx);
            pa.alone_cpu += (double)(pf_cpu_ns() - c0);
            pa.alone_wall += (double)(pf_now_ns() - a0);
            pthread_mutex_unlock(&pf.busy);
            return;
        }
    }
    if (pf.n_workers < t - 1) {
        pthread_mutex_lock(&pf.mu);
        pf_grow(t - 1);
        pthread_mutex_unlock(&pf.mu);
        if (pf.n_workers < t - 1)
            t = pf.n_workers + 1; /* the chunks stay as they are */
    }
    long t0 = pf_now_ns();
    uint32_t seq = ++pf.seq;
    pf.fn = fn;
    pf.ctx = ctx;
    pf.n = n;
    atomic_store_explicit(&pf.finished, 0, memory_order_relaxed);
    atomic_store_explicit(&pf.claim, (uint64_t)seq << 32 | (uint64_t)k << 16,
                          memory_order_release);
    atomic_store(&pf.loop, (uint64_t)seq << 8 | (uint64_t)t);
    if (atomic_load(&pf.sleepers) > 0) {
        pthread_mutex_lock(&pf.mu);
        pthread_cond_broadcast(&pf.wake);
        pthread_mutex_unlock(&pf.mu);
    }
    long t_pub = pf_now_ns(), c0 = pf_adapt ? pf_cpu_ns() : 0;
    size_t mine = 0;
    bool last = pf_run_chunks(seq, &mine);
    long c1 = pf_adapt ? pf_cpu_ns() : 0;
    long t_own = pf_now_ns(), t_end = t_own;
    if (!last) {
        /* the last chunks run on workers: spin a little, then sleep */
        for (unsigned spin = 1; atomic_load_explicit(&pf.finished, memory_order_acquire) != k;
             spin++) {
            if ((spin & 63) == 0 && pf_now_ns() - t_own > pf_spin_ns) {
                pthread_mutex_lock(&pf.mu);
                atomic_store(&pf.caller_asleep, 1);
                while (atomic_load(&pf.finished) != k)
                    pthread_cond_wait(&pf.done, &pf.mu);
                atomic_store(&pf.caller_asleep, 0);
                pthread_mutex_unlock(&pf.mu);
                break;
            }
            PF_PAUSE();
        }
        t_end = pf_now_ns();
    }
    pa.shared++;
    if (pf_adapt)
        pa_judge(t_end - t0, t_own - t_pub, c1 - c0, mine, k, t_end);
    pthread_mutex_unlock(&pf.busy);
}
