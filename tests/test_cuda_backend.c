/* The CUDA backend core: without a CUDA device (CI, the development
 * machine) opening it is a clean GF_ERR_UNSUPPORTED that says why, it lists
 * no devices and `--backend auto` is unchanged; on a device: opening (the
 * same backend twice), the device list, memory (alloc, copies in, out and
 * on the device, views at offsets) and a bad device name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

extern const struct gf_backend_desc gf_cuda_backend; /* kernels/cuda/backend.c */

/* The backend on its first device, NULL (once, with why) without one. */
static struct gf_backend *cuda(void)
{
    static int tried;
    static struct gf_backend *be;
    if (!tried++ && gf_cuda_backend.open(NULL, &be) != GF_OK) {
        print_message("no CUDA device: %s (device tests skipped)\n", gf_last_error());
        be = NULL;
    }
    return be;
}

/* Whether the registry lists cuda (it is listed before opencl). */
static bool registered(void)
{
    for (size_t i = 0; gf_backend_name(i); i++)
        if (strcmp(gf_backend_name(i), "cuda") == 0)
            return true;
    return false;
}

static void test_without_device(void **state)
{
    (void)state;
    if (cuda())
        skip();
    struct gf_device_info d[4];
    assert_int_equal(gf_cuda_backend.ops->list_devices(d, 4), 0);
    struct gf_backend *be = (struct gf_backend *)1;
    assert_int_equal(gf_cuda_backend.open(NULL, &be), GF_ERR_UNSUPPORTED);
    assert_null(be);
    if (!strstr(gf_last_error(), "backend 'cuda' is not available: "))
        fail_msg("unclear message: %s", gf_last_error());
    if (!registered())
        return;
    be = (struct gf_backend *)1;
    assert_int_equal(gf_backend_open("cuda", NULL, &be), GF_ERR_UNSUPPORTED);
    assert_null(be);
    assert_int_equal(gf_backend_devices("cuda", d, 4), 0);
    /* auto picks what it picked before: not cuda */
    assert_int_equal(gf_backend_open("auto", NULL, &be), GF_OK);
    assert_string_not_equal(be->ops->name, "cuda");
}

static void test_open_and_list(void **state)
{
    (void)state;
    struct gf_backend *be = cuda(), *again = NULL;
    if (!be)
        skip();
    assert_string_equal(be->ops->name, "cuda");
    assert_false(be->host_memory);
    assert_true(be->align >= 64 && (be->align & (be->align - 1)) == 0);
    const char *name = be->ops->device_name(be);
    assert_true(gf_cuda_backend.open(name, &again) == GF_OK);
    assert_ptr_equal(again, be); /* one backend per device, kept open */
    assert_true(be->ops->driver_version(be)[0]);
    struct gf_device_info d[16];
    size_t n = be->ops->list_devices(d, 16);
    assert_true(n >= 1);
    bool found = false;
    for (size_t i = 0; i < n && i < 16; i++) {
        assert_true(d[i].name[0] && d[i].platform[0] && d[i].driver[0]);
        assert_true(d[i].is_gpu && d[i].is_default);
        assert_true(d[i].compute_units > 0 && d[i].memory > 0);
        found |= strcmp(d[i].name, name) == 0;
    }
    assert_true(found);
    print_message("cuda: %s, %d SMs, %.1f GiB, %s\n", d[0].name, d[0].compute_units,
                  (double)d[0].memory / (1 << 30), d[0].driver);
    if (!registered())
        return;
    /* through the registry: the same backend; the default on its GPUs */
    assert_true(gf_backend_open("cuda", name, &again) == GF_OK);
    assert_ptr_equal(again, be);
    n = gf_backend_devices("cuda", d, 16);
    for (size_t i = 0; i < n && i < 16; i++)
        assert_true(d[i].is_default);
    assert_true(gf_backend_open("auto", NULL, &again) == GF_OK);
    assert_string_equal(again->ops->name, "cuda");
    /* OpenCL, if it sees the same GPU, is opt-in there */
    n = gf_backend_devices("opencl", d, 16);
    for (size_t i = 0; i < n && i < 16; i++)
        if (strcmp(d[i].name, name) == 0)
            assert_false(d[i].is_default);
}

static void test_bad_device(void **state)
{
    (void)state;
    struct gf_backend *be = cuda();
    if (!be)
        skip();
    struct gf_backend *other = (struct gf_backend *)1;
    assert_int_equal(gf_cuda_backend.open("no-such-device-xyz", &other), GF_ERR_UNSUPPORTED);
    assert_null(other);
    const char *msg = gf_last_error();
    if (!strstr(msg, "no-such-device-xyz") || !strstr(msg, be->ops->device_name(be)))
        fail_msg("message lacks the name asked for or the devices available: %s", msg);
}

static void test_memory(void **state)
{
    (void)state;
    struct gf_backend *be = cuda();
    if (!be)
        skip();
    const struct gf_backend_ops *o = be->ops;
    size_t al = be->align, n = 3 * al + 40;
    unsigned char *src = malloc(n), *dst = calloc(1, n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    void *a = o->alloc(be, n), *b = o->alloc(be, n);
    assert_non_null(a);
    assert_non_null(b);
    /* round trip */
    assert_int_equal(o->copy_in(be, a, src, n), GF_OK);
    assert_int_equal(o->copy_out(be, dst, a, n), GF_OK);
    assert_memory_equal(src, dst, n);
    /* device to device, whole */
    memset(dst, 0, n);
    assert_int_equal(o->copy(be, b, a, n), GF_OK);
    assert_int_equal(o->copy_out(be, dst, b, n), GF_OK);
    assert_memory_equal(src, dst, n);
    /* views at offsets: a view of bytes [al, al + 40) of a, then [2 al, ...) of b */
    void *va = o->view(be, a, al, 40), *vb = o->view(be, b, 2 * al, 40);
    assert_non_null(va);
    assert_non_null(vb);
    assert_null(o->view(be, a, al, 0)); /* empty: no memory */
    assert_int_equal(o->copy(be, vb, va, 40), GF_OK);
    assert_int_equal(o->copy_out(be, dst, b, n), GF_OK);
    assert_memory_equal(dst + 2 * al, src + al, 40);
    assert_memory_equal(dst, src, 2 * al); /* around it unchanged */
    assert_memory_equal(dst + 2 * al + 40, src + 2 * al + 40, n - 2 * al - 40);
    /* into a view, out of a view */
    unsigned char part[40], back[40];
    for (int i = 0; i < 40; i++)
        part[i] = (unsigned char)(200 - i);
    assert_int_equal(o->copy_in(be, va, part, 40), GF_OK);
    assert_int_equal(o->copy_out(be, back, va, 40), GF_OK);
    assert_memory_equal(part, back, 40);
    /* zero bytes: nothing, no error */
    assert_int_equal(o->copy_in(be, NULL, part, 0), GF_OK);
    assert_int_equal(o->copy_out(be, back, NULL, 0), GF_OK);
    assert_int_equal(o->copy(be, NULL, NULL, 0), GF_OK);
    assert_int_equal(o->sync(be), GF_OK);
    if (o->view_release) {
        o->view_release(be, va);
        o->view_release(be, vb);
    }
    o->release(be, a);
    o->release(be, b);
    /* too much memory: NULL with a message, not a crash */
    assert_null(o->alloc(be, (size_t)1 << 50));
    assert_true(strstr(gf_last_error(), "cannot allocate") != NULL);
    free(src);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_device),
        cmocka_unit_test(test_open_and_list),
        cmocka_unit_test(test_bad_device),
        cmocka_unit_test(test_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
