/* Round trip over every model.onnx in Debian's libonnx-testdata:
 * load -> save -> load must give an equal model, and saving the reloaded
 * model must give the same bytes again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <ftw.h>
#include <unistd.h>

#include "gf_graph.h"

#define TESTDATA "/usr/share/libonnx-testdata/data"

static int n_models, n_failed;
static char tmpdir[] = "/tmp/gf_roundtrip_XXXXXX";

static void check_one(const char *path)
{
    struct gf_model *a = NULL, *b = NULL;
    char out[4096], why[512];
    n_models++;
    if (gf_model_load(path, NULL, &a) != GF_OK) {
        printf("FAIL load %s: %s\n", path, gf_last_error());
        n_failed++;
        return;
    }
    snprintf(out, sizeof(out), "%s/m.onnx", tmpdir);
    if (gf_model_save(a, out, NULL) != GF_OK || gf_model_load(out, NULL, &b) != GF_OK) {
        printf("FAIL save/reload %s: %s\n", path, gf_last_error());
        n_failed++;
    } else if (!gf_model_equal(a, b, why, sizeof(why))) {
        printf("FAIL %s: %s\n", path, why);
        n_failed++;
    } else {
        uint8_t *x, *y;
        size_t nx, ny;
        if (gf_model_save_buffer(a, &x, &nx) != GF_OK ||
            gf_model_save_buffer(b, &y, &ny) != GF_OK) {
            printf("FAIL save_buffer %s\n", path);
            n_failed++;
        } else {
            if (nx != ny || memcmp(x, y, nx) != 0) {
                printf("FAIL %s: second save gives different bytes\n", path);
                n_failed++;
            }
            free(x);
            free(y);
        }
    }
    gf_model_free(a);
    gf_model_free(b);
}

static int visit(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (type == FTW_F && strcmp(path + strlen(path) - 11, "/model.onnx") == 0)
        check_one(path);
    return 0;
}

static void test_roundtrip_all(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(tmpdir));
    assert_int_equal(nftw(TESTDATA, visit, 16, FTW_PHYS), 0);
    char m[4200];
    snprintf(m, sizeof(m), "%s/m.onnx", tmpdir);
    remove(m);
    rmdir(tmpdir);
    printf("round trip: %d models, %d failures\n", n_models, n_failed);
    assert_true(n_models >= 1000);
    assert_int_equal(n_failed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
