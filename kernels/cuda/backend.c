/*
 * The CUDA backend: devices, memory, copies, the stream.
 *
 * One struct gf_backend per device, opened on first use and kept until exit,
 * with one non-blocking stream that every kernel, copy and cuBLASLt call of
 * the backend goes to, in order.  Memory is plain cudaMalloc (never managed
 * memory): the planner asks for one block per plan and cuts views out of it
 * by pointer arithmetic (nothing to release per view).  copy_in returns once
 * the host bytes are taken (pageable memory is staged before
 * cudaMemcpyAsync returns); copy_out and sync wait for the stream.
 *
 * Without a driver or a device (CI), list_devices finds none and open says
 * so (GF_ERR_UNSUPPORTED); the CUDA runtime prints nothing of its own.
 *
 * Graph capture (CUDA Graphs): capture_begin puts the stream in capture
 * mode (cudaStreamCaptureModeThreadLocal: this thread may make no unsafe
 * call meanwhile), kernels and device copies are then recorded, and
 * capture_end instantiates them as one executable graph that graph_launch
 * replays on the stream.  While capturing, alloc, release, sync, copy_in
 * and copy_out are refused with an error naming the call: nothing runs
 * during a capture, so a wait would wait for nothing, a host copy would be
 * replayed from a host address long gone, and memory cannot be made.
 *
 * Deferred checks (checks_begin ... checks_report): the data checks that
 * kernels make on the device write the first bad position into a slot of
 * device memory registered with its message, read once per run after the
 * run's final synchronization, instead of each kernel copying its flag
 * back and waiting (which no graph can hold).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "device_common.h"

#define MAX_DEVICES 32

extern const struct gf_backend_ops gf_cuda_ops;

/* ---- devices ------------------------------------------------------------- */

/* How many devices the runtime sees; 0 with *why set when none (no driver,
 * a driver too old for this runtime, no device). */
static int device_count(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    *why = NULL;
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it */
        *why = e == cudaErrorInsufficientDriver ? "no CUDA driver (or one older than this "
                                                  "CUDA runtime)"
               : e == cudaErrorNoDevice ? "no CUDA device"
                                        : cudaGetErrorString(e);
        return 0;
    }
    if (n == 0)
        *why = "no CUDA device";
    return n;
}

static void versions(char *buf, size_t size)
{
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(buf, size, "CUDA driver %d.%d, runtime %d.%d", drv / 1000, drv % 1000 / 10,
             rt / 1000, rt % 1000 / 10);
}

/* Every CUDA device is an NVIDIA GPU: CUDA is the default on all of them
 * (listed before OpenCL in the registry, it takes them from OpenCL, which
 * names the same devices alike: "NVIDIA H100 80GB HBM3"). */
static bool cu_is_default_on(const struct gf_device_info *d)
{
    return d->is_gpu;
}

static bool describe(int dev, struct gf_device_info *info)
{
    struct cudaDeviceProp p;
    memset(info, 0, sizeof(*info));
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    snprintf(info->platform, sizeof(info->platform), "CUDA %d.%d (sm_%d%d)", rt / 1000,
             rt % 1000 / 10, p.major, p.minor);
    snprintf(info->name, sizeof(info->name), "%s", p.name);
    versions(info->driver, sizeof(info->driver));
    info->memory = p.totalGlobalMem;
    info->compute_units = p.multiProcessorCount;
    info->is_gpu = true;
    info->is_default = cu_is_default_on(info);
    return true;
}

static size_t cu_list_devices(struct gf_device_info *out, size_t max)
{
    const char *why;
    int n = device_count(&why);
    size_t k = 0;
    for (int i = 0; i < n; i++)
        if (k >= max || describe(i, &out[k]))
            k++;
    return k;
}

/* The device whose name contains `want` (NULL: the first);
 * GF_ERR_UNSUPPORTED naming what is missing or what exists otherwise. */
static enum gf_status pick_device(const char *want, int *out)
{
    const char *why;
    int n = device_count(&why);
    if (n == 0)
        return gf_error(GF_ERR_UNSUPPORTED, "backend 'cuda' is not available: %s",
                        why);
    char names[1024] = "";
    for (int i = 0; i < n && i < MAX_DEVICES; i++) {
        struct gf_device_info d;
        if (!describe(i, &d))
            continue;
        if (!want || strstr(d.name, want)) {
            *out = i;
            return GF_OK;
        }
        gf_dev_name_list(names, sizeof(names), d.name);
    }
    if (!want)
        return gf_error(GF_ERR_UNSUPPORTED, "backend 'cuda' is not available: no CUDA device "
                        "could be queried");
    return gf_error(GF_ERR_UNSUPPORTED, "backend 'cuda' has no device matching '%s' "
                    "(available: %s)", want, *names ? names : "none");
}

/* ---- the current device ---------------------------------------------------- */

static _Thread_local int current = -1; /* this thread's cudaSetDevice, as we set it */

bool gf_cu_use(struct gf_backend *be)
{
    int dev = gf_cu_of(be)->device;
    if (current == dev)
        return true;
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        gf_error(GF_ERR_INTERNAL, "CUDA: cannot use device %d ('%s'): %s", dev,
                 gf_cu_of(be)->device_name, cudaGetErrorString(e));
        return false;
    }
    current = dev;
    return true;
}

cudaStream_t gf_cu_stream(const struct gf_kernel_args *a)
{
    gf_cu_use(a->backend); /* a failure shows in the launch's error */
    return gf_cu_of(a->backend)->stream;
}

enum gf_status gf_cu_check(const struct gf_kernel_args *a, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return GF_OK;
    cudaGetLastError();
    return gf_kernel_error(a, e == cudaErrorMemoryAllocation ? GF_ERR_NOMEM : GF_ERR_INTERNAL,
                           "CUDA %s failed: %s", what, cudaGetErrorString(e));
}

_Static_assert(GF_CU_MAX_RANK == GF_MAX_RANK, "launch.h's rank is the kernels' rank");

void gf_cu_nd_init(struct gf_cu_nd *nd, int rank, const int64_t *dims, int n,
                   const int64_t st[][GF_MAX_RANK])
{
    memset(nd, 0, sizeof(*nd));
    nd->rank = gf_nd_merge(rank, dims, n, st, nd->dims, nd->st);
}

/* ---- open and close -------------------------------------------------------- */

static enum gf_status open_device(struct gf_backend *be, int dev)
{
    struct gf_cu *cu = calloc(1, sizeof(*cu));
    if (!cu)
        return gf_error(GF_ERR_NOMEM, "out of memory opening the CUDA backend");
    struct gf_device_info info;
    describe(dev, &info);
    cu->device = dev;
    snprintf(cu->device_name, sizeof(cu->device_name), "%s", info.name);
    snprintf(cu->driver, sizeof(cu->driver), "%s", info.driver);
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e == cudaSuccess)
        e = cudaSetDevice(dev);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cudaGetLastError();
        free(cu);
        return gf_error(GF_ERR_UNSUPPORTED, "backend 'cuda': cannot open device '%s': %s",
                        info.name, cudaGetErrorString(e));
    }
    current = dev;
    cu->sm_count = p.multiProcessorCount;
    cu->max_threads = (size_t)p.maxThreadsPerBlock;
    be->priv = cu;
    be->align = 256; /* cudaMalloc's alignment; vector loads need 16 */
    be->host_memory = false;
    be->n_threads = 1;
    return GF_OK;
}

static enum gf_status cu_init(struct gf_backend *be, const char *device)
{
    int dev;
    enum gf_status st = pick_device(device, &dev);
    return st != GF_OK ? st : open_device(be, dev);
}

static void cu_free(struct gf_backend *be)
{
    struct gf_cu *cu = gf_cu_of(be);
    if (!cu)
        return;
    if (gf_cu_use(be)) {
        cudaStreamSynchronize(cu->stream);
        gf_cu_blas_free(cu);
        cudaStreamDestroy(cu->stream);
    }
    if (cu->check_dev && gf_cu_use(be))
        cudaFree(cu->check_dev);
    if (cu->check_host)
        cudaFreeHost(cu->check_host);
    free(cu->checks);
    free(cu->blocks);
    free(cu);
    be->priv = NULL;
}

/* One backend per device, kept open until exit (gf_dev_open_once). */
static enum gf_status cu_open(const char *device, struct gf_backend **out)
{
    *out = NULL;
    int dev;
    enum gf_status st = pick_device(device, &dev);
    if (st != GF_OK)
        return st;
    return gf_dev_open_once(&gf_cuda_ops, "CUDA", dev, open_device, out);
}

/* ---- memory and copies ------------------------------------------------------ */

static enum gf_status cu_status(struct gf_backend *be, cudaError_t e, const char *what,
                                size_t n)
{
    if (e == cudaSuccess)
        return GF_OK;
    cudaGetLastError();
    return gf_error(e == cudaErrorMemoryAllocation ? GF_ERR_NOMEM : GF_ERR_INTERNAL,
                    "CUDA: %s of %zu bytes on '%s' failed: %s", what, n,
                    gf_cu_of(be)->device_name, cudaGetErrorString(e));
}

/* A call made while the stream is captured: refused, the first one kept for
 * capture_end's message. */
static enum gf_status refuse(struct gf_backend *be, const char *what, size_t n)
{
    struct gf_cu *cu = gf_cu_of(be);
    char call[128];
    if (n)
        snprintf(call, sizeof(call), "%s of %zu bytes", what, n);
    else
        snprintf(call, sizeof(call), "%s", what);
    if (!cu->refused[0])
        snprintf(cu->refused, sizeof(cu->refused), "%s", call);
    return gf_error(GF_ERR_INTERNAL, "CUDA graph capture on '%s': %s is not allowed while "
                    "kernels are captured (nothing may allocate, free, synchronize or copy "
                    "host memory then)", cu->device_name, call);
}

/* ---- device memory bookkeeping --------------------------------------------
 * A plain array of the live blocks: a training run holds a few hundred
 * (the planned block, workspaces, parameters, gradients, optimizer state),
 * so a linear search on release costs nothing next to cudaFree. */
static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;

void gf_cu_mem_add(struct gf_cu *cu, void *p, size_t n)
{
    pthread_mutex_lock(&mem_mu);
    if (cu->n_blocks == cu->cap_blocks) {
        size_t cap = cu->cap_blocks ? 2 * cu->cap_blocks : 64;
        struct gf_cu_block *b = realloc(cu->blocks, cap * sizeof(*b));
        if (b) /* else the block goes uncounted: bookkeeping, not correctness */
            cu->blocks = b, cu->cap_blocks = cap;
    }
    if (cu->n_blocks < cu->cap_blocks) {
        cu->blocks[cu->n_blocks++] = (struct gf_cu_block){p, n};
        cu->bytes_now += n;
        if (cu->bytes_now > cu->bytes_peak)
            cu->bytes_peak = cu->bytes_now;
    }
    pthread_mutex_unlock(&mem_mu);
}

void gf_cu_mem_remove(struct gf_cu *cu, void *p)
{
    pthread_mutex_lock(&mem_mu);
    for (size_t i = cu->n_blocks; i-- > 0;)
        if (cu->blocks[i].p == p) {
            cu->bytes_now -= cu->blocks[i].n;
            cu->blocks[i] = cu->blocks[--cu->n_blocks];
            break;
        }
    pthread_mutex_unlock(&mem_mu);
}

static void cu_memory(const struct gf_backend *be, uint64_t *now, uint64_t *peak)
{
    const struct gf_cu *cu = gf_cu_of(be);
    pthread_mutex_lock(&mem_mu);
    *now = cu ? cu->bytes_now : 0;
    *peak = cu ? cu->bytes_peak : 0;
    pthread_mutex_unlock(&mem_mu);
}

static void *cu_alloc(struct gf_backend *be, size_t bytes)
{
    void *p = NULL;
    if (gf_cu_of(be)->capturing) {
        refuse(be, "an allocation", bytes);
        return NULL;
    }
    if (!gf_cu_use(be))
        return NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : be->align);
    if (e != cudaSuccess) {
        cudaGetLastError();
        gf_error(GF_ERR_NOMEM, "CUDA: cannot allocate %zu bytes on '%s': %s", bytes,
                 gf_cu_of(be)->device_name, cudaGetErrorString(e));
        return NULL;
    }
    gf_cu_mem_add(gf_cu_of(be), p, bytes ? bytes : be->align);
    return p;
}

static void cu_release(struct gf_backend *be, void *p)
{
    if (p && gf_cu_of(be)->capturing) { /* cudaFree waits: kept (a leak, no corruption) */
        refuse(be, "freeing memory", 0);
        return;
    }
    if (p && gf_cu_use(be)) {
        gf_cu_mem_remove(gf_cu_of(be), p);
        /* cudaFree waits for the device; the stream's work on p is done */
        if (cudaFree(p) != cudaSuccess)
            cudaGetLastError();
    }
}

static enum gf_status cu_copy_in(struct gf_backend *be, void *dst, const void *host, size_t n)
{
    if (n == 0)
        return GF_OK;
    if (gf_cu_of(be)->capturing)
        return refuse(be, "an upload (copy_in)", n);
    if (!gf_cu_use(be))
        return GF_ERR_INTERNAL;
    return cu_status(be, cudaMemcpyAsync(dst, host, n, cudaMemcpyHostToDevice,
                                         gf_cu_of(be)->stream), "upload", n);
}

static enum gf_status cu_copy_out(struct gf_backend *be, void *host, const void *src, size_t n)
{
    if (n == 0)
        return GF_OK;
    if (gf_cu_of(be)->capturing)
        return refuse(be, "a download (copy_out)", n);
    if (!gf_cu_use(be))
        return GF_ERR_INTERNAL;
    cudaStream_t s = gf_cu_of(be)->stream;
    cudaError_t e = cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    return cu_status(be, e, "download", n);
}

static enum gf_status cu_copy(struct gf_backend *be, void *dst, const void *src, size_t n)
{
    if (n == 0 || dst == src) /* two views of the same bytes: nothing to move */
        return GF_OK;
    if (!gf_cu_use(be))
        return GF_ERR_INTERNAL;
    return cu_status(be, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice,
                                         gf_cu_of(be)->stream), "device copy", n);
}

static enum gf_status cu_sync(struct gf_backend *be)
{
    if (gf_cu_of(be)->capturing)
        return refuse(be, "a synchronization", 0);
    if (!gf_cu_use(be))
        return GF_ERR_INTERNAL;
    return cu_status(be, cudaStreamSynchronize(gf_cu_of(be)->stream), "finishing the stream",
                     0);
}

/* Bytes [off, off + n) of a block: the pointer itself (n == 0: NULL, the
 * empty tensor). */
static void *cu_view(struct gf_backend *be, void *base, size_t off, size_t n)
{
    (void)be;
    return n ? (unsigned char *)base + off : NULL;
}

/* ---- graph capture ------------------------------------------------------------ */

static enum gf_status cu_capture_begin(struct gf_backend *be)
{
    struct gf_cu *cu = gf_cu_of(be);
    if (cu->capturing)
        return gf_error(GF_ERR_INTERNAL, "CUDA graph capture on '%s': already capturing",
                        cu->device_name);
    if (!gf_cu_use(be))
        return GF_ERR_INTERNAL;
    cudaGetLastError(); /* a stale error must not end the capture */
    cudaError_t e = cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess)
        return cu_status(be, e, "beginning a graph capture", 0);
    cu->capturing = true;
    cu->refused[0] = 0;
    return GF_OK;
}

static enum gf_status cu_capture_end(struct gf_backend *be, void **graph, size_t *n_nodes)
{
    struct gf_cu *cu = gf_cu_of(be);
    *graph = NULL;
    *n_nodes = 0;
    if (!cu->capturing)
        return gf_error(GF_ERR_INTERNAL, "CUDA graph capture on '%s': not capturing",
                        cu->device_name);
    cudaGraph_t g = NULL;
    gf_cu_use(be);
    cudaError_t e = cudaStreamEndCapture(cu->stream, &g);
    cu->capturing = false;
    enum gf_status st = GF_OK;
    if (cu->refused[0])
        st = gf_error(GF_ERR_INTERNAL, "CUDA graph capture on '%s': %s was asked for while "
                      "capturing", cu->device_name, cu->refused);
    else if (e != cudaSuccess || !g)
        st = cu_status(be, e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated,
                       "ending a graph capture", 0);
    cudaGraphExec_t x = NULL;
    if (st == GF_OK) {
        cudaGraphGetNodes(g, NULL, n_nodes);
        e = cudaGraphInstantiate(&x, g, 0);
        if (e != cudaSuccess) {
            x = NULL;
            st = cu_status(be, e, "instantiating a captured graph", 0);
        }
    }
    if (g)
        cudaGraphDestroy(g);
    cudaGetLastError();
    *graph = x;
    if (!x)
        *n_nodes = 0;
    return st;
}

static enum gf_status cu_graph_launch(struct gf_backend *be, void *graph)
{
    if (gf_cu_of(be)->capturing)
        return refuse(be, "a graph launch", 0);
    if (!gf_cu_use(be))
        return GF_ERR_INTERNAL;
    return cu_status(be, cudaGraphLaunch((cudaGraphExec_t)graph, gf_cu_of(be)->stream),
                     "launching a captured graph", 0);
}

static void cu_graph_free(struct gf_backend *be, void *graph)
{
    if (graph && gf_cu_use(be) && cudaGraphExecDestroy((cudaGraphExec_t)graph) != cudaSuccess)
        cudaGetLastError();
}

/* ---- deferred checks ------------------------------------------------------------
 * GF_CU_CHECKS int slots of device memory, made on the first run that
 * defers, and their pinned host copy.  checks_begin resets every slot in
 * use (one cudaMemsetAsync), checks_end copies them to the host (one
 * cudaMemcpyAsync into pinned memory: no staging), both on the stream
 * outside any graph; the run's final synchronization waits for them.  A
 * registration is found again by (owner, node, key), so a node keeps its
 * slot from run to run (a captured graph holds its address). */

static enum gf_status cu_checks_begin(struct gf_backend *be, const void *owner)
{
    struct gf_cu *cu = gf_cu_of(be);
    if (cu->capturing)
        return refuse(be, "starting deferred checks", 0);
    if (!gf_cu_use(be))
        return GF_ERR_INTERNAL;
    if (!cu->check_dev) {
        size_t bytes = GF_CU_CHECKS * sizeof(int);
        cudaError_t e = cudaMalloc((void **)&cu->check_dev, bytes);
        if (e == cudaSuccess)
            gf_cu_mem_add(cu, cu->check_dev, bytes);
        else
            cu->check_dev = NULL;
        if (e == cudaSuccess && (e = cudaMallocHost((void **)&cu->check_host, bytes)) !=
                                    cudaSuccess)
            cu->check_host = NULL;
        if (e == cudaSuccess && !(cu->checks = calloc(GF_CU_CHECKS, sizeof(*cu->checks))))
            e = cudaErrorMemoryAllocation;
        if (e == cudaSuccess) /* every slot reset once: those past the table stay so */
            e = cudaMemsetAsync(cu->check_dev, 0x7f, bytes, cu->stream);
        if (e != cudaSuccess) /* no deferral: the kernels check on the spot */
            return cu_status(be, e, "the deferred checks' slots", bytes);
    }
    cu->check_owner = owner;
    cu->deferring = true;
    if (!cu->n_checks)
        return GF_OK;
    return cu_status(be, cudaMemsetAsync(cu->check_dev, 0x7f, cu->n_checks * sizeof(int),
                                         cu->stream), "resetting the deferred checks",
                     cu->n_checks * sizeof(int));
}

static enum gf_status cu_checks_end(struct gf_backend *be)
{
    struct gf_cu *cu = gf_cu_of(be);
    bool was = cu->deferring;
    cu->deferring = false;
    if (!was || !cu->n_checks)
        return GF_OK;
    if (cu->capturing)
        return refuse(be, "ending deferred checks", 0);
    if (!gf_cu_use(be))
        return GF_ERR_INTERNAL;
    return cu_status(be, cudaMemcpyAsync(cu->check_host, cu->check_dev,
                                         cu->n_checks * sizeof(int), cudaMemcpyDeviceToHost,
                                         cu->stream), "reading the deferred checks",
                     cu->n_checks * sizeof(int));
}

static enum gf_status cu_checks_report(struct gf_backend *be)
{
    struct gf_cu *cu = gf_cu_of(be);
    for (size_t i = 0; i < cu->n_checks; i++) {
        const struct gf_cu_check *c = &cu->checks[i];
        int pos = cu->check_host[i];
        if (c->owner != cu->check_owner || !c->report || pos < 0 || pos >= GF_CU_CHECK_OK)
            continue;
        struct gf_kernel_args a = {.node = c->node, .backend = be};
        return c->report(&a, c, pos);
    }
    return GF_OK;
}

static void cu_checks_release(struct gf_backend *be, const void *owner)
{
    struct gf_cu *cu = gf_cu_of(be);
    for (size_t i = 0; cu && i < cu->n_checks; i++)
        if (cu->checks[i].owner == owner)
            cu->checks[i].owner = NULL, cu->checks[i].report = NULL;
}

int *gf_cu_defer_check(const struct gf_kernel_args *a, int key, gf_cu_report_fn report,
                       const void *ctx, size_t len)
{
    struct gf_cu *cu = gf_cu_of(a->backend);
    if (!cu->deferring || !cu->check_dev || len > GF_CU_CHECK_CTX)
        return NULL;
    size_t k, free_slot = SIZE_MAX;
    for (k = 0; k < cu->n_checks; k++) {
        const struct gf_cu_check *c = &cu->checks[k];
        if (c->owner == cu->check_owner && c->node == a->node && c->key == key)
            break;
        if (!c->owner && free_slot == SIZE_MAX)
            free_slot = k;
    }
    if (k == cu->n_checks) {
        /* a new check: a freed slot (reset by this run's checks_begin), else
         * one past the table (never written since the slots were made) */
        if (free_slot != SIZE_MAX)
            k = free_slot;
        else if (cu->n_checks < GF_CU_CHECKS)
            k = cu->n_checks++;
        else
            return NULL;
    }
    struct gf_cu_check *c = &cu->checks[k];
    c->owner = cu->check_owner;
    c->node = a->node;
    c->key = key;
    c->report = report;
    memcpy(c->ctx, ctx, len);
    return cu->check_dev + k;
}

static const char *cu_device_name(const struct gf_backend *be)
{
    return gf_cu_of(be)->device_name;
}

static const char *cu_driver_version(const struct gf_backend *be)
{
    return gf_cu_of(be)->driver;
}

const struct gf_backend_ops gf_cuda_ops = {
    .name = "cuda",
    .init = cu_init,
    .free = cu_free,
    .alloc = cu_alloc,
    .release = cu_release,
    .memory = cu_memory,
    .copy_in = cu_copy_in,
    .copy_out = cu_copy_out,
    .sync = cu_sync,
    .device_name = cu_device_name,
    .view = cu_view,
    .view_release = NULL,
    .copy = cu_copy,
    .list_devices = cu_list_devices,
    .driver_version = cu_driver_version,
    .capture_begin = cu_capture_begin,
    .capture_end = cu_capture_end,
    .graph_launch = cu_graph_launch,
    .graph_free = cu_graph_free,
    .checks_begin = cu_checks_begin,
    .checks_end = cu_checks_end,
    .checks_report = cu_checks_report,
    .checks_release = cu_checks_release,
};

extern const struct gf_kernel_table *const gf_cuda_tables[]; /* tables.c */

const struct gf_backend_desc gf_cuda_backend = {
    .name = "cuda",
    .ops = &gf_cuda_ops,
    .open = cu_open,
    .is_default_on = cu_is_default_on,
    .tables = gf_cuda_tables,
};
