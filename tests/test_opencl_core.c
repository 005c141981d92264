/* The OpenCL backend core: opening, device listing, errors for bad device
 * names, memory (views, copies), and the program cache on disk (a second
 * context loads the binary; a damaged cache file is rebuilt; on PoCL, which
 * caches its own builds, nothing is written unless GRAPHFUSE_CL_CACHE=1).
 * The cache is tried on fused_norm.cl's smallest variant (-DONLY=7: colsum
 * and expand): PoCL compiles every kernel of a program to hand out its
 * binary, 7 s for the whole of elementwise.cl. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "opencl/ocl.h"
#include "backend_util.h"

extern const struct gf_backend_ops gf_opencl_ops; /* kernels/opencl/backend.c */

static char cache_dir[256];

static void need_opencl(void)
{
    if (!bt_only("opencl"))
        skip();
}

static void test_open_and_list(void **state)
{
    (void)state;
    need_opencl();
    struct gf_backend *be = bt_only("opencl"), *again = NULL;
    assert_string_equal(be->ops->name, "opencl");
    assert_false(be->host_memory);
    assert_true(be->align >= 64 && (be->align & (be->align - 1)) == 0);
    assert_true(gf_backend_open("opencl", be->ops->device_name(be), &again) == GF_OK);
    assert_ptr_equal(again, be); /* one backend per device, kept open */
    struct gf_device_info d[16];
    size_t n = gf_opencl_ops.list_devices(d, 16);
    assert_true(n >= 1);
    bool found = false;
    for (size_t i = 0; i < n && i < 16; i++) {
        assert_true(d[i].name[0] && d[i].platform[0]);
        assert_true(d[i].compute_units > 0 && d[i].memory > 0);
        assert_int_equal(d[i].is_default, d[i].is_gpu);
        found |= strcmp(d[i].name, be->ops->device_name(be)) == 0;
    }
    assert_true(found);
    assert_true(be->ops->driver_version(be)[0]);
    /* the backend table lists cpu first, opencl after it */
    size_t nb;
    const struct gf_backend_ops *const *all = gf_backend_all(&nb);
    assert_true(nb >= 2);
    assert_string_equal(all[0]->name, "cpu");
    bool listed = false;
    for (size_t i = 1; i < nb; i++)
        listed |= strcmp(all[i]->name, "opencl") == 0;
    assert_true(listed);
}

static void test_bad_device(void **state)
{
    (void)state;
    need_opencl();
    struct gf_backend *be = (struct gf_backend *)1;
    assert_int_equal(gf_backend_open("opencl", "no-such-device-xyz", &be), GF_ERR_UNSUPPORTED);
    assert_null(be);
    const char *msg = gf_last_error();
    if (!strstr(msg, "no-such-device-xyz") || !strstr(msg, bt_only("opencl")->ops->device_name(
                                                              bt_only("opencl"))))
        fail_msg("message lacks the name asked for or the devices available: %s", msg);
}

static void test_memory(void **state)
{
    (void)state;
    need_opencl();
    struct gf_backend *be = bt_only("opencl");
    size_t al = be->align, n = 3 * al + 40;
    unsigned char *src = malloc(n), *dst = calloc(1, n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    void *block = be->ops->alloc(be, n);
    assert_non_null(block);
    assert_int_equal(be->ops->copy_in(be, block, src, n), GF_OK);
    /* a view of bytes [al, al + 100) reads those bytes */
    void *v = be->ops->view(be, block, al, 100);
    assert_non_null(v);
    assert_int_equal(be->ops->copy_out(be, dst, v, 100), GF_OK);
    assert_memory_equal(dst, src + al, 100);
    /* a view of a view is cut from the block: bytes [2al, 2al + 50) */
    void *v2 = be->ops->view(be, block, al, 2 * al);
    void *vv = be->ops->view(be, v2, al, 50);
    assert_non_null(vv);
    assert_int_equal(be->ops->copy_out(be, dst, vv, 50), GF_OK);
    assert_memory_equal(dst, src + 2 * al, 50);
    /* device copy between views, then a round trip of the whole block */
    void *w = be->ops->view(be, block, 0, 40);
    void *tail = be->ops->view(be, block, 3 * al, 40);
    assert_int_equal(be->ops->copy(be, tail, w, 40), GF_OK);
    assert_int_equal(be->ops->sync(be), GF_OK);
    assert_int_equal(be->ops->copy_out(be, dst, block, n), GF_OK);
    assert_memory_equal(dst + 3 * al, src, 40);
    assert_memory_equal(dst, src, 3 * al);
    /* an empty view is NULL, with nothing to release */
    assert_null(be->ops->view(be, block, 0, 0));
    /* views live as long as their block (no view_release: see backend.c) */
    assert_null(be->ops->view_release);
    be->ops->release(be, block);
    free(src);
    free(dst);
}

/* Files in the cache directory. */
static int cache_files(char names[][512], int max)
{
    DIR *d = opendir(cache_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.' && n < max)
            snprintf(names[n++], 512, "%s/%s", cache_dir, e->d_name);
    if (d)
        closedir(d);
    return n;
}

/* A fresh context on the same device (empty in-memory program cache). */
static struct gf_backend fresh(void)
{
    struct gf_backend b = {.ops = &gf_opencl_ops};
    assert_int_equal(gf_opencl_ops.init(&b, bt_only("opencl")->ops->device_name(bt_only("opencl"))),
                     GF_OK);
    return b;
}

/* Runs fused_norm.cl's colsum (one partial row, scale -1: y = -x) from b's
 * program cache on 5 floats and checks the result. */
static void check_neg(struct gf_backend *b, const char *opts)
{
    cl_kernel k = gf_cl_kernel(b, "fused_norm.cl", "colsum", opts);
    if (!k)
        fail_msg("%s", gf_last_error());
    assert_ptr_equal(gf_cl_kernel(b, "fused_norm.cl", "colsum", opts), k); /* cached */
    float x[5] = {1, -2, 3.5f, 0, 7}, y[5];
    void *dx = b->ops->alloc(b, sizeof(x)), *dy = b->ops->alloc(b, sizeof(y));
    assert_int_equal(b->ops->copy_in(b, dx, x, sizeof(x)), GF_OK);
    cl_uint po = 0, rows = 1, n = 5;
    cl_float scale = -1;
    assert_true(gf_cl_args(k, 6, sizeof(cl_mem), &dx, sizeof(cl_mem), &dy, sizeof(po), &po,
                           sizeof(rows), &rows, sizeof(n), &n, sizeof(scale), &scale));
    assert_int_equal(clSetKernelArg(k, 6, 4 * sizeof(float), NULL), CL_SUCCESS);
    struct gf_kernel_args a = {.backend = b};
    size_t global[2] = {8, 1}, local[2] = {4, 1};
    assert_int_equal(gf_cl_run(&a, k, 2, global, local), GF_OK);
    assert_int_equal(b->ops->copy_out(b, y, dy, sizeof(y)), GF_OK);
    for (int i = 0; i < 5; i++)
        assert_true(y[i] == -x[i]);
    b->ops->release(b, dx);
    b->ops->release(b, dy);
}

static bool is_pocl(void)
{
    return strstr(gf_cl_of(bt_only("opencl"))->platform_name, "Portable Computing Language");
}

static void test_program_cache(void **state)
{
    (void)state;
    need_opencl();
    char names[8][512];
    /* a unique option string keeps earlier runs' files out of the way */
    char opts[64];
    snprintf(opts, sizeof(opts), "-DVEC=1 -DONLY=7 -DGF_TEST_NONCE=%ld", (long)getpid());
    /* GRAPHFUSE_CL_CACHE=0: nothing written on any device; unset: nothing
     * on PoCL, which caches its builds itself */
    for (int off = 0; off < 2; off++) {
        if (off)
            setenv("GRAPHFUSE_CL_CACHE", "0", 1);
        else
            unsetenv("GRAPHFUSE_CL_CACHE");
        if (!off && !is_pocl())
            continue;
        struct gf_backend b0 = fresh();
        check_neg(&b0, opts);
        assert_int_equal(gf_cl_of(&b0)->n_built, 1);
        assert_int_equal(gf_cl_of(&b0)->n_loaded, 0);
        assert_int_equal(cache_files(names, 8), 0);
        gf_opencl_ops.free(&b0);
    }

    setenv("GRAPHFUSE_CL_CACHE", "1", 1); /* the cache on every device, PoCL included */
    struct gf_backend b1 = fresh();
    check_neg(&b1, opts);
    assert_int_equal(gf_cl_of(&b1)->n_built, 1);
    assert_int_equal(gf_cl_of(&b1)->n_loaded, 0);
    assert_int_equal(cache_files(names, 8), 1);
    gf_opencl_ops.free(&b1);

    struct gf_backend b2 = fresh(); /* loads the binary */
    check_neg(&b2, opts);
    assert_int_equal(gf_cl_of(&b2)->n_built, 0);
    assert_int_equal(gf_cl_of(&b2)->n_loaded, 1);
    gf_opencl_ops.free(&b2);

    /* damage the file: flip bytes in the middle, then truncate it */
    for (int round = 0; round < 2; round++) {
        struct stat sb;
        assert_int_equal(stat(names[0], &sb), 0);
        if (round == 0) {
            FILE *f = fopen(names[0], "r+b");
            assert_non_null(f);
            fseek(f, sb.st_size / 2, SEEK_SET);
            fwrite("garbage!", 1, 8, f);
            fclose(f);
        } else {
            assert_int_equal(truncate(names[0], sb.st_size / 3), 0);
        }
        struct gf_backend b3 = fresh();
        check_neg(&b3, opts); /* rebuilt from source and rewritten */
        assert_int_equal(gf_cl_of(&b3)->n_built, 1);
        assert_int_equal(gf_cl_of(&b3)->n_loaded, 0);
        gf_opencl_ops.free(&b3);
        struct gf_backend b4 = fresh();
        check_neg(&b4, opts);
        assert_int_equal(gf_cl_of(&b4)->n_loaded, 1);
        gf_opencl_ops.free(&b4);
    }
    assert_int_equal(cache_files(names, 8), 1); /* no temporary files left */
    unsetenv("GRAPHFUSE_CL_CACHE");
}

static void test_build_error(void **state)
{
    (void)state;
    need_opencl();
    struct gf_backend *be = bt_only("opencl");
    /* a macro that breaks the source: the message names the file and
     * quotes the build log */
    assert_null(gf_cl_kernel(be, "elementwise.cl", "un_neg", "-DVEC=4 -Dun_neg=1"));
    if (!strstr(gf_last_error(), "elementwise.cl") || !strstr(gf_last_error(), "error"))
        fail_msg("build error lacks the file name or the log: %s", gf_last_error());
    assert_null(gf_cl_kernel(be, "no_such_file.cl", "k", NULL));
    assert_null(gf_cl_kernel(be, "elementwise.cl", "no_such_kernel", NULL));
    if (!strstr(gf_last_error(), "no_such_kernel"))
        fail_msg("message lacks the kernel name: %s", gf_last_error());
    assert_non_null(gf_cl_source("elementwise.cl"));
    assert_null(gf_cl_source("nope.cl"));
}

static int setup(void **state)
{
    (void)state;
    snprintf(cache_dir, sizeof(cache_dir), "/tmp/gf_test_clcache_%ld", (long)getpid());
    setenv("GRAPHFUSE_CACHE_DIR", cache_dir, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char names[64][512];
    int n = cache_files(names, 64);
    for (int i = 0; i < n; i++)
        remove(names[i]);
    rmdir(cache_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_and_list),
        cmocka_unit_test(test_bad_device),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_program_cache),
        cmocka_unit_test(test_build_error),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
