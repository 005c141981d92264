/* The CPU backend: host memory (64-byte aligned), one device ("host CPU"),
 * the default on it; the reference every other backend falls back to per
 * node, so it stays first in the registry's list. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu.h"

#define CPU_DEVICE "host CPU"

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static enum gf_status cpu_init(struct gf_backend *be, const char *device)
{
    (void)device;
    if (be->n_threads <= 0)
        be->n_threads = online_cpus();
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
    return CPU_DEVICE;
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
    snprintf(out->name, sizeof(out->name), CPU_DEVICE);
    snprintf(out->driver, sizeof(out->driver), "graphfuse %s", GF_VERSION);
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    out->memory = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
    out->compute_units = online_cpus();
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

static void cpu_start(void)
{
    cpu_init(&cpu_backend, NULL);
}

static enum gf_status cpu_open(const char *device, struct gf_backend **out)
{
    *out = NULL;
    if (device && !strstr(CPU_DEVICE, device))
        return gf_error(GF_ERR_UNSUPPORTED, "backend 'cpu' has no device '%s' (it runs on "
                        "'" CPU_DEVICE "')", device);
    pthread_once(&cpu_once, cpu_start);
    *out = &cpu_backend;
    return GF_OK;
}

static bool cpu_is_default_on(const struct gf_device_info *d)
{
    (void)d; /* its one device */
    return true;
}

extern const struct gf_kernel_table *const gf_cpu_tables[]; /* tables.c */

const struct gf_backend_desc gf_cpu_backend = {
    .name = "cpu",
    .ops = &cpu_ops,
    .open = cpu_open,
    .is_default_on = cpu_is_default_on,
    .tables = gf_cpu_tables,
};
