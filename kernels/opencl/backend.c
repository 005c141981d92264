/*
 * The OpenCL backend: devices, memory, copies, and the program cache.
 *
 * One struct gf_backend per device, opened on first use and kept until exit.
 * Programs are built from the .cl sources embedded at build time
 * (build/gen/cl_sources.c), once per (file, options); the device binary is
 * kept on disk so later runs skip the compiler:
 *
 *     $GRAPHFUSE_CACHE_DIR or ~/.cache/graphfuse/cl/<hash>.bin
 *     hash = FNV-1a over (device, driver, graphfuse version, source, options)
 *     file = "GFCLBIN1" | u64 size | u64 FNV-1a of the binary | binary
 *
 * A cache file that is short, damaged or refused by the driver is ignored
 * and rewritten from a fresh build; the file is written to a temporary name
 * and renamed into place, so readers never see half a file.
 *
 * PoCL's programs are not cached here: PoCL keeps its own cache of built
 * programs and compiled kernels ($POCL_CACHE_DIR, else ~/.cache/pocl), and
 * asking it for a program's binary compiles every kernel of the program,
 * used or not (elementwise.cl: 7.4 s for the binary after 1.0 s for the
 * build; test_opencl_elementwise on a cold machine: 105 CPU-seconds with
 * this cache, 28 without; warm, 0.3 s with it, 0.5 s without).
 * GRAPHFUSE_CL_CACHE=1 uses the cache on every device, =0 on none.  Every program
 * is built with -cl-std=CL1.2 and, where the device has it, IEEE division
 * and square root (-cl-fp32-correctly-rounded-divide-sqrt); never with
 * fast-math options, so kernels compute what the CPU kernels compute.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device_common.h"
#include "ocl.h"

#define MAX_DEVICES 32
#define MAX_PLATFORMS 8

/* build/gen/cl_sources.c, generated from the .cl files by tools/embed_cl.sh */
struct gf_cl_source_file {
    const char *name;
    const char *text;
};
extern const struct gf_cl_source_file gf_cl_sources[];
extern const size_t gf_cl_n_sources;

/* The descriptor kernels/registry.c lists (at the end), and its parts. */
extern const struct gf_backend_ops gf_opencl_ops;
static bool ocl_is_default_on(const struct gf_device_info *d);

/* A built program and the kernels taken from it. */
struct gf_cl_kern {
    char *name;
    cl_kernel k;
    struct gf_cl_kern *next;
};

struct gf_cl_prog {
    char *file, *opts;
    cl_program prog;
    struct gf_cl_kern *kernels;
    struct gf_cl_prog *next;
};

const char *gf_cl_storage_opt(enum gf_dtype dt)
{
    switch (dt) {
    case GF_FLOAT: return "";
    case GF_FLOAT16: return "-DGF_STORE_F16";
    case GF_BFLOAT16: return "-DGF_STORE_BF16";
    default: return NULL;
    }
}

const char *gf_cl_source(const char *file)
{
    for (size_t i = 0; i < gf_cl_n_sources; i++)
        if (strcmp(gf_cl_sources[i].name, file) == 0)
            return gf_cl_sources[i].text;
    return NULL;
}

const char *gf_cl_strerror(cl_int err)
{
    switch (err) {
#define E(x) case x: return #x;
    E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE)
    E(CL_COMPILER_NOT_AVAILABLE) E(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY) E(CL_PROFILING_INFO_NOT_AVAILABLE)
    E(CL_MEM_COPY_OVERLAP) E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE)
    E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    E(CL_COMPILE_PROGRAM_FAILURE) E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE)
    E(CL_INVALID_VALUE) E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM)
    E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT) E(CL_INVALID_QUEUE_PROPERTIES)
    E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR) E(CL_INVALID_MEM_OBJECT)
    E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS) E(CL_INVALID_PROGRAM)
    E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME)
    E(CL_INVALID_KERNEL_DEFINITION) E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX)
    E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE) E(CL_INVALID_KERNEL_ARGS)
    E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE)
    E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET)
    E(CL_INVALID_EVENT_WAIT_LIST) E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION)
    E(CL_INVALID_BUFFER_SIZE) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
    E(CL_INVALID_COMPILER_OPTIONS) E(CL_INVALID_LINKER_OPTIONS)
#undef E
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR (no OpenCL platform)";
    default: return "unknown OpenCL error";
    }
}

/* ---- devices ------------------------------------------------------------- */

static cl_uint get_platforms(cl_platform_id *p, cl_uint max)
{
    cl_uint n = 0;
    if (clGetPlatformIDs(max, p, &n) != CL_SUCCESS)
        return 0;
    return n < max ? n : max;
}

static cl_uint get_devices(cl_platform_id p, cl_device_id *d, cl_uint max)
{
    cl_uint n = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, max, d, &n) != CL_SUCCESS)
        return 0;
    return n < max ? n : max;
}

static void dev_string(cl_device_id d, cl_device_info what, char *buf, size_t size)
{
    buf[0] = 0;
    if (clGetDeviceInfo(d, what, size, buf, NULL) != CL_SUCCESS)
        buf[0] = 0;
    buf[size - 1] = 0;
}

static void describe(cl_platform_id p, cl_device_id d, struct gf_device_info *info)
{
    memset(info, 0, sizeof(*info));
    if (clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof(info->platform), info->platform, NULL))
        info->platform[0] = 0;
    info->platform[sizeof(info->platform) - 1] = 0;
    dev_string(d, CL_DEVICE_NAME, info->name, sizeof(info->name));
    dev_string(d, CL_DRIVER_VERSION, info->driver, sizeof(info->driver));
    cl_device_type type = 0;
    cl_ulong mem = 0;
    cl_uint cu = 0;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof(type), &type, NULL);
    clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(mem), &mem, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cu), &cu, NULL);
    info->memory = mem;
    info->compute_units = (int)cu;
    info->is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
    info->is_default = ocl_is_default_on(info);
}

/* OpenCL is the default backend on GPUs only: on a CPU device (PoCL) the
 * native CPU kernels are faster.  A backend listed before it in the
 * registry that claims the same GPU takes it (docs/backends.md). */
static bool ocl_is_default_on(const struct gf_device_info *d)
{
    return d->is_gpu;
}

static size_t ocl_list_devices(struct gf_device_info *out, size_t max)
{
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = get_platforms(plats, MAX_PLATFORMS);
    size_t n = 0;
    for (cl_uint i = 0; i < np; i++) {
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = get_devices(plats[i], devs, MAX_DEVICES);
        for (cl_uint j = 0; j < nd; j++, n++)
            if (n < max)
                describe(plats[i], devs[j], &out[n]);
    }
    return n;
}

/* Device n of ocl_list_devices' flat list (the platforms in order, each
 * one's devices in order); false past its end. */
static bool device_at(int n, cl_platform_id *pp, cl_device_id *pd)
{
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = get_platforms(plats, MAX_PLATFORMS);
    for (cl_uint i = 0; i < np && n >= 0; i++) {
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = get_devices(plats[i], devs, MAX_DEVICES);
        if ((cl_uint)n < nd) {
            *pp = plats[i];
            *pd = devs[n];
            return true;
        }
        n -= (int)nd;
    }
    return false;
}

/* The device whose name contains `want` (NULL: the first it is the default
 * on, else the first device), as its place in device_at's list;
 * GF_ERR_UNSUPPORTED naming what exists otherwise. */
static enum gf_status pick_device(const char *want, int *out)
{
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = get_platforms(plats, MAX_PLATFORMS);
    if (np == 0)
        return gf_error(GF_ERR_UNSUPPORTED, "backend 'opencl' is not available: no OpenCL "
                        "platform found (install an ICD such as pocl-opencl-icd)");
    char names[1024] = "";
    bool found = false;
    for (int pass = 0; pass < 2 && !found; pass++) {
        int base = 0; /* the place of platform i's first device */
        for (cl_uint i = 0; i < np && !found; i++) {
            cl_device_id devs[MAX_DEVICES];
            cl_uint nd = get_devices(plats[i], devs, MAX_DEVICES);
            for (cl_uint j = 0; j < nd && !found; j++) {
                struct gf_device_info info;
                describe(plats[i], devs[j], &info);
                if (want)
                    found = strstr(info.name, want) != NULL;
                else
                    found = pass == 1 || info.is_default;
                if (found)
                    *out = base + (int)j;
                else if (pass == 0)
                    gf_dev_name_list(names, sizeof(names), info.name);
            }
            base += (int)nd;
        }
        if (want)
            break;
    }
    if (found)
        return GF_OK;
    if (!*names)
        return gf_error(GF_ERR_UNSUPPORTED, "backend 'opencl' is not available: the OpenCL "
                        "platforms have no devices");
    return gf_error(GF_ERR_UNSUPPORTED, "backend 'opencl' has no device matching '%s' "
                    "(available: %s)", want, names);
}

/* ---- open and close ------------------------------------------------------- */

static void fill_limits(struct gf_backend *be, struct gf_cl *cl)
{
    cl_uint align_bits = 0;
    clGetDeviceInfo(cl->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(align_bits), &align_bits,
                    NULL);
    be->align = align_bits / 8 > 64 ? align_bits / 8 : 64;
    be->host_memory = false;
    clGetDeviceInfo(cl->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(cl->max_wg), &cl->max_wg,
                    NULL);
    clGetDeviceInfo(cl->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(cl->local_mem), &cl->local_mem,
                    NULL);
    clGetDeviceInfo(cl->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cl->compute_units),
                    &cl->compute_units, NULL);
    char ext[8192];
    dev_string(cl->device, CL_DEVICE_EXTENSIONS, ext, sizeof(ext));
    cl->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
}

/* Opens a context and queue on device n (device_at) into be. */
static enum gf_status open_device(struct gf_backend *be, int n)
{
    cl_platform_id p;
    cl_device_id d;
    if (!device_at(n, &p, &d))
        return gf_error(GF_ERR_UNSUPPORTED, "backend 'opencl': device %d is gone", n);
    struct gf_cl *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return gf_error(GF_ERR_NOMEM, "out of memory opening the OpenCL backend");
    cl->platform = p;
    cl->device = d;
    struct gf_device_info info;
    describe(p, d, &info);
    snprintf(cl->platform_name, sizeof(cl->platform_name), "%s", info.platform);
    snprintf(cl->device_name, sizeof(cl->device_name), "%s", info.name);
    snprintf(cl->driver, sizeof(cl->driver), "%s", info.driver);
    cl->is_gpu = info.is_gpu;
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)p, 0};
    cl->ctx = clCreateContext(props, 1, &d, NULL, NULL, &err);
    if (err == CL_SUCCESS)
        cl->queue = clCreateCommandQueue(cl->ctx, d, 0, &err);
    if (err != CL_SUCCESS) {
        if (cl->ctx)
            clReleaseContext(cl->ctx);
        free(cl);
        return gf_error(GF_ERR_UNSUPPORTED, "backend 'opencl': cannot open device '%s': %s",
                        info.name, gf_cl_strerror(err));
    }
    be->priv = cl;
    fill_limits(be, cl);
    return GF_OK;
}

static enum gf_status ocl_init(struct gf_backend *be, const char *device)
{
    int n;
    enum gf_status st = pick_device(device, &n);
    return st != GF_OK ? st : open_device(be, n);
}

static void ocl_free(struct gf_backend *be)
{
    struct gf_cl *cl = gf_cl_of(be);
    if (!cl)
        return;
    clFinish(cl->queue);
    while (cl->progs) {
        struct gf_cl_prog *p = cl->progs;
        cl->progs = p->next;
        while (p->kernels) {
            struct gf_cl_kern *k = p->kernels;
            p->kernels = k->next;
            clReleaseKernel(k->k);
            free(k->name);
            free(k);
        }
        clReleaseProgram(p->prog);
        free(p->file);
        free(p->opts);
        free(p);
    }
    clReleaseCommandQueue(cl->queue);
    clReleaseContext(cl->ctx);
    free(cl);
    be->priv = NULL;
}

/* One backend per device, kept open until exit. */
static enum gf_status ocl_open(const char *device, struct gf_backend **out)
{
    int n;
    enum gf_status st = pick_device(device, &n);
    *out = NULL;
    return st != GF_OK ? st : gf_dev_open_once(&gf_opencl_ops, "OpenCL", n, open_device, out);
}

/* ---- memory and copies ------------------------------------------------------ */

static void *ocl_alloc(struct gf_backend *be, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(gf_cl_of(be)->ctx, CL_MEM_READ_WRITE, bytes ? bytes : be->align,
                              NULL, &err);
    if (err != CL_SUCCESS) {
        gf_error(GF_ERR_NOMEM, "OpenCL: cannot allocate %zu bytes on '%s': %s", bytes,
                 gf_cl_of(be)->device_name, gf_cl_strerror(err));
        return NULL;
    }
    return m;
}

static void ocl_release(struct gf_backend *be, void *p)
{
    (void)be;
    if (p)
        clReleaseMemObject((cl_mem)p);
}

static enum gf_status cl_status(cl_int err, const char *what, size_t n)
{
    if (err == CL_SUCCESS)
        return GF_OK;
    return gf_error(err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY ||
                    err == CL_MEM_OBJECT_ALLOCATION_FAILURE ? GF_ERR_NOMEM : GF_ERR_INTERNAL,
                    "OpenCL: %s of %zu bytes failed: %s", what, n, gf_cl_strerror(err));
}

static enum gf_status ocl_copy_in(struct gf_backend *be, void *dst, const void *host, size_t n)
{
    if (n == 0)
        return GF_OK;
    cl_int err = clEnqueueWriteBuffer(gf_cl_of(be)->queue, (cl_mem)dst, CL_TRUE, 0, n, host, 0,
                                      NULL, NULL);
    return cl_status(err, "upload", n);
}

static enum gf_status ocl_copy_out(struct gf_backend *be, void *host, const void *src, size_t n)
{
    if (n == 0)
        return GF_OK;
    cl_int err = clEnqueueReadBuffer(gf_cl_of(be)->queue, (cl_mem)src, CL_TRUE, 0, n, host, 0,
                                     NULL, NULL);
    return cl_status(err, "download", n);
}

/* The buffer a (sub-)buffer lies in and its offset there. */
static cl_mem mem_root(cl_mem m, size_t *off)
{
    cl_mem parent = NULL;
    *off = 0;
    clGetMemObjectInfo(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof(parent), &parent, NULL);
    if (!parent)
        return m;
    clGetMemObjectInfo(m, CL_MEM_OFFSET, sizeof(*off), off, NULL);
    return parent;
}

static enum gf_status ocl_copy(struct gf_backend *be, void *dst, const void *src, size_t n)
{
    size_t doff, soff;
    if (n == 0 || dst == src)
        return GF_OK;
    /* two views of the same bytes (an op run in place): nothing to move */
    if (mem_root((cl_mem)dst, &doff) == mem_root((cl_mem)src, &soff) && doff == soff)
        return GF_OK;
    cl_int err = clEnqueueCopyBuffer(gf_cl_of(be)->queue, (cl_mem)src, (cl_mem)dst, 0, 0, n, 0,
                                     NULL, NULL);
    return cl_status(err, "device copy", n);
}

static enum gf_status ocl_sync(struct gf_backend *be)
{
    return cl_status(clFinish(gf_cl_of(be)->queue), "finishing the queue", 0);
}

/* A sub-buffer for bytes [off, off + n) of base; a view of a view is cut
 * from the parent buffer (OpenCL has no nested sub-buffers).  n == 0 gives
 * NULL, the empty tensor, with no error set. */
static void *ocl_view(struct gf_backend *be, void *base, size_t off, size_t n)
{
    if (n == 0)
        return NULL;
    size_t parent_off;
    cl_mem parent = mem_root((cl_mem)base, &parent_off);
    cl_buffer_region r = {parent_off + off, n};
    cl_int err;
    cl_mem m = clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r,
                                 &err);
    if (err != CL_SUCCESS) {
        gf_error(err == CL_MISALIGNED_SUB_BUFFER_OFFSET ? GF_ERR_INTERNAL : GF_ERR_NOMEM,
                 "OpenCL: cannot make a view of %zu bytes at offset %zu (align %zu): %s", n,
                 off, be->align, gf_cl_strerror(err));
        return NULL;
    }
    return m;
}

static const char *ocl_device_name(const struct gf_backend *be)
{
    return gf_cl_of(be)->device_name;
}

static const char *ocl_driver_version(const struct gf_backend *be)
{
    return gf_cl_of(be)->driver;
}

const struct gf_backend_ops gf_opencl_ops = {
    .name = "opencl",
    .init = ocl_init,
    .free = ocl_free,
    .alloc = ocl_alloc,
    .release = ocl_release,
    .copy_in = ocl_copy_in,
    .copy_out = ocl_copy_out,
    .sync = ocl_sync,
    .device_name = ocl_device_name,
    .view = ocl_view,
    /* Views are not released one by one: NVIDIA's OpenCL (driver 580)
     * segfaults inside clReleaseMemObject on a sub-buffer of a training
     * plan.  A sub-buffer is freed with its parent at exit, so a replaced
     * plan's block stays allocated until then (README, "Backends"). */
    .view_release = NULL,
    .copy = ocl_copy,
    .list_devices = ocl_list_devices,
    .driver_version = ocl_driver_version,
};

extern const struct gf_kernel_table *const gf_opencl_tables[]; /* tables.c */

const struct gf_backend_desc gf_opencl_backend = {
    .name = "opencl",
    .ops = &gf_opencl_ops,
    .open = ocl_open,
    .is_default_on = ocl_is_default_on,
    .tables = gf_opencl_tables,
};

/* ---- the on-disk binary cache ---------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t fnv1a_str(uint64_t h, const char *s)
{
    return fnv1a(h, s, strlen(s) + 1); /* the NUL separates fields */
}

/* Whether programs built for cl go to the disk cache (the header: every
 * device but PoCL's unless $GRAPHFUSE_CL_CACHE says). */
static bool cache_wanted(const struct gf_cl *cl)
{
    const char *env = getenv("GRAPHFUSE_CL_CACHE");
    if (env && *env)
        return strcmp(env, "0") != 0;
    return !strstr(cl->platform_name, "Portable Computing Language");
}

/* Path of the cache file for this program; false when the device's
 * programs are not cached, there is no cache directory (no $HOME) or it
 * cannot be created. */
static bool cache_path(const struct gf_cl *cl, const char *src, const char *opts, char *path,
                       size_t size)
{
    if (!cache_wanted(cl))
        return false;
    char dir[4096];
    const char *env = getenv("GRAPHFUSE_CACHE_DIR");
    const char *home = getenv("HOME");
    if (env && *env)
        snprintf(dir, sizeof(dir), "%s", env);
    else if (home && *home)
        snprintf(dir, sizeof(dir), "%s/.cache/graphfuse/cl", home);
    else
        return false;
    /* mkdir -p */
    for (char *s = dir + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        mkdir(dir, 0755);
        *s = '/';
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return false;
    uint64_t h[2] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
    for (int i = 0; i < 2; i++) {
        h[i] = fnv1a_str(h[i], cl->device_name);
        h[i] = fnv1a_str(h[i], cl->driver);
        h[i] = fnv1a_str(h[i], GF_VERSION);
        h[i] = fnv1a_str(h[i], src);
        h[i] = fnv1a_str(h[i], opts);
    }
    int n = snprintf(path, size, "%s/%016llx%016llx.bin", dir, (unsigned long long)h[0],
                     (unsigned long long)h[1]);
    return n > 0 && (size_t)n < size;
}

static const char cache_magic[8] = {'G', 'F', 'C', 'L', 'B', 'I', 'N', '1'};

/* The cached binary (malloc'd) if the file is whole, else NULL. */
static unsigned char *cache_read(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char magic[8];
    uint64_t hdr[2];
    unsigned char *bin = NULL;
    if (fread(magic, 1, 8, f) == 8 && memcmp(magic, cache_magic, 8) == 0 &&
        fread(hdr, sizeof(hdr), 1, f) == 1 && hdr[0] > 0 && hdr[0] < ((uint64_t)1 << 32) &&
        (bin = malloc(hdr[0]))) {
        if (fread(bin, 1, hdr[0], f) != hdr[0] || fgetc(f) != EOF ||
            fnv1a(0xcbf29ce484222325ULL, bin, hdr[0]) != hdr[1]) {
            free(bin);
            bin = NULL;
        }
    }
    fclose(f);
    *size = bin ? hdr[0] : 0;
    return bin;
}

/* Writes the program's binary to path through a temporary file; failures
 * only cost the next run a rebuild. */
static void cache_write(cl_program prog, const char *path)
{
    size_t size = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, NULL) !=
            CL_SUCCESS || size == 0)
        return;
    unsigned char *bin = malloc(size);
    if (!bin)
        return;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof(bin), &bin, NULL) == CL_SUCCESS) {
        char tmp[4256];
        snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        uint64_t hdr[2] = {size, fnv1a(0xcbf29ce484222325ULL, bin, size)};
        bool ok = f && fwrite(cache_magic, 1, 8, f) == 8 && fwrite(hdr, sizeof(hdr), 1, f) == 1 &&
                  fwrite(bin, 1, size, f) == size;
        if (f && fclose(f) != 0)
            ok = false;
        if (!ok || rename(tmp, path) != 0)
            remove(tmp);
    }
    free(bin);
}

/* ---- programs and kernels ---------------------------------------------------- */

/* "file: build failed: <first lines of the log>" as the error. */
static cl_program build_error(struct gf_cl *cl, cl_program prog, const char *file, cl_int err)
{
    char log[2048] = "";
    size_t n = 0;
    clGetProgramBuildInfo(prog, cl->device, CL_PROGRAM_BUILD_LOG, sizeof(log) - 1, log, &n);
    log[sizeof(log) - 1] = 0;
    /* the first lines, on one line */
    int lines = 0;
    for (char *s = log; *s; s++) {
        if (*s != '\n')
            continue;
        if (++lines == 6) {
            *s = 0;
            break;
        }
        *s = ' ';
    }
    gf_error(GF_ERR_INTERNAL, "OpenCL program %s does not build on '%s' (%s): %s", file,
             cl->device_name, gf_cl_strerror(err), *log ? log : "(no build log)");
    clReleaseProgram(prog);
    return NULL;
}

static cl_program build_from_binary(struct gf_cl *cl, const unsigned char *bin, size_t size,
                                    const char *opts)
{
    cl_int err, status;
    cl_program prog = clCreateProgramWithBinary(cl->ctx, 1, &cl->device, &size, &bin, &status,
                                                &err);
    if (err != CL_SUCCESS || status != CL_SUCCESS) {
        if (prog)
            clReleaseProgram(prog);
        return NULL;
    }
    if (clBuildProgram(prog, 1, &cl->device, opts, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(prog);
        return NULL;
    }
    return prog;
}

static cl_program build_text(struct gf_cl *cl, const char *file, const char *src,
                             const char *user_opts)
{
    /* exact math: IEEE division and sqrt where the device offers them (the
     * default allows 2.5 / 3 ulp), no fast-math options */
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(cl->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof(fp), &fp, NULL);
    char opts[1024];
    snprintf(opts, sizeof(opts), "-cl-std=CL1.2%s%s%s",
             fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT ? " -cl-fp32-correctly-rounded-divide-sqrt"
                                                      : "",
             user_opts && *user_opts ? " " : "", user_opts ? user_opts : "");
    char path[4200];
    bool cached = cache_path(cl, src, opts, path, sizeof(path));
    size_t size = 0;
    unsigned char *bin = cached ? cache_read(path, &size) : NULL;
    cl_program prog = bin ? build_from_binary(cl, bin, size, opts) : NULL;
    free(bin);
    if (prog) {
        cl->n_loaded++;
        return prog;
    }
    cl_int err;
    prog = clCreateProgramWithSource(cl->ctx, 1, &src, NULL, &err);
    if (err != CL_SUCCESS) {
        gf_error(GF_ERR_INTERNAL, "OpenCL program %s: %s", file, gf_cl_strerror(err));
        return NULL;
    }
    err = clBuildProgram(prog, 1, &cl->device, opts, NULL, NULL);
    if (err != CL_SUCCESS)
        return build_error(cl, prog, file, err);
    cl->n_built++;
    if (cached)
        cache_write(prog, path);
    return prog;
}

/* The text of program `file`: storage.cl (the storage type macros) followed
 * by the file's own source; malloc'd, NULL with gf_error set. */
static char *program_text(const char *file)
{
    const char *common = gf_cl_source("storage.cl"), *own = gf_cl_source(file);
    if (!common || !own) {
        gf_error(GF_ERR_INTERNAL, "OpenCL program %s is not embedded in this build",
                 own ? "storage.cl" : file);
        return NULL;
    }
    size_t n1 = strlen(common), n2 = strlen(own);
    char *text = malloc(n1 + n2 + 1);
    if (!text) {
        gf_error(GF_ERR_NOMEM, "out of memory building OpenCL program %s", file);
        return NULL;
    }
    memcpy(text, common, n1);
    memcpy(text + n1, own, n2 + 1);
    return text;
}

static cl_program build_program(struct gf_cl *cl, const char *file, const char *user_opts)
{
    char *text = program_text(file);
    if (!text)
        return NULL;
    cl_program prog = build_text(cl, file, text, user_opts);
    free(text);
    return prog;
}

static struct gf_cl_prog *find_program(struct gf_cl *cl, const char *file, const char *opts)
{
    for (struct gf_cl_prog *p = cl->progs; p; p = p->next)
        if (strcmp(p->file, file) == 0 && strcmp(p->opts, opts) == 0)
            return p;
    cl_program prog = build_program(cl, file, opts);
    if (!prog)
        return NULL;
    struct gf_cl_prog *p = calloc(1, sizeof(*p));
    if (p && (p->file = strdup(file)) && (p->opts = strdup(opts))) {
        p->prog = prog;
        p->next = cl->progs;
        cl->progs = p;
        return p;
    }
    if (p) {
        free(p->file);
        free(p);
    }
    clReleaseProgram(prog);
    gf_error(GF_ERR_NOMEM, "out of memory caching OpenCL program %s", file);
    return NULL;
}

cl_kernel gf_cl_kernel(struct gf_backend *be, const char *file, const char *name,
                       const char *opts)
{
    struct gf_cl *cl = gf_cl_of(be);
    struct gf_cl_prog *p = find_program(cl, file, opts ? opts : "");
    if (!p)
        return NULL;
    for (struct gf_cl_kern *k = p->kernels; k; k = k->next)
        if (strcmp(k->name, name) == 0)
            return k->k;
    cl_int err;
    cl_kernel kern = clCreateKernel(p->prog, name, &err);
    if (err != CL_SUCCESS) {
        gf_error(GF_ERR_INTERNAL, "OpenCL program %s has no kernel %s: %s", file, name,
                 gf_cl_strerror(err));
        return NULL;
    }
    struct gf_cl_kern *k = calloc(1, sizeof(*k));
    if (!k || !(k->name = strdup(name))) {
        free(k);
        clReleaseKernel(kern);
        gf_error(GF_ERR_NOMEM, "out of memory caching OpenCL kernel %s", name);
        return NULL;
    }
    k->k = kern;
    k->next = p->kernels;
    p->kernels = k;
    return kern;
}

/* ---- running kernels ---------------------------------------------------------- */

bool gf_cl_args(cl_kernel k, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        size_t size = va_arg(ap, size_t);
        const void *p = va_arg(ap, const void *);
        cl_int err = clSetKernelArg(k, (cl_uint)i, size, p);
        if (err != CL_SUCCESS) {
            gf_error(GF_ERR_INTERNAL, "OpenCL: setting argument %d (%zu bytes) failed: %s", i,
                     size, gf_cl_strerror(err));
            ok = false;
        }
    }
    va_end(ap);
    return ok;
}

enum gf_status gf_cl_run(const struct gf_kernel_args *a, cl_kernel k, cl_uint dims,
                         const size_t *global, const size_t *local)
{
    size_t g[3];
    for (cl_uint i = 0; i < dims; i++) {
        if (global[i] == 0)
            return GF_OK;
        g[i] = local ? (global[i] + local[i] - 1) / local[i] * local[i] : global[i];
    }
    cl_int err = clEnqueueNDRangeKernel(gf_cl_of(a->backend)->queue, k, dims, NULL, g, local, 0,
                                        NULL, NULL);
    if (err != CL_SUCCESS)
        return gf_kernel_error(a, err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY
                                  ? GF_ERR_NOMEM : GF_ERR_INTERNAL,
                               "OpenCL kernel launch failed: %s", gf_cl_strerror(err));
    return GF_OK;
}

enum gf_status gf_cl_fail(const struct gf_kernel_args *a, const char *what)
{
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", gf_last_error());
    return gf_kernel_error(a, GF_ERR_INTERNAL, "%s: %s", what, msg);
}

/* ---- launch helpers ------------------------------------------------------------- */

size_t gf_cl_grid(const struct gf_kernel_args *a, size_t items, size_t wg)
{
    size_t cap = (size_t)gf_cl_of(a->backend)->compute_units * 8 * wg;
    size_t g = (items + wg - 1) / wg * wg;
    if (g == 0)
        g = wg;
    return g < cap || cap == 0 ? g : cap;
}

bool gf_cl_nd_init(struct gf_cl_nd *nd, int rank, const int64_t *dims, int n,
                   const int64_t st[][GF_MAX_RANK])
{
    int64_t md[GF_MAX_RANK], ms[4][GF_MAX_RANK], total = 1;
    for (int d = 0; d < rank; d++)
        total *= dims[d];
    if (total > INT32_MAX)
        return false;
    int r = gf_nd_merge(rank, dims, n, st, md, ms);
    memset(nd, 0, sizeof(*nd));
    nd->rank = r;
    for (int d = 0; d < 8; d++)
        nd->dims.s[d] = 1;
    for (int d = 0; d < r; d++) {
        nd->dims.s[8 - r + d] = (cl_int)md[d];
        for (int k = 0; k < n; k++) {
            int64_t span = ms[k][d] < 0 ? -ms[k][d] : ms[k][d];
            if (span > INT32_MAX || span * (md[d] - 1) > INT32_MAX)
                return false;
            nd->st[k].s[8 - r + d] = (cl_int)ms[k][d];
        }
    }
    return true;
}
