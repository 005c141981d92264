/*
 * fuzz_tensor: bytes -> a TensorProto file (`--input NAME=FILE.pb`) read by
 * gf_tensor_load, then every element of what was accepted read back.
 */
#include "fuzz_util.h"
#include "gf_graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_temp_path("pb");
    if (!fz_write(path, data, size))
        return 0;
    struct gf_model *m = gf_model_new(8, "fuzz");
    struct gf_tensor *t;
    if (m && gf_tensor_load(m, path, &t) == GF_OK && t->dtype != GF_STRING) {
        volatile double sum = 0;
        for (size_t i = 0; i < t->nelem && i < 4096; i++)
            sum += gf_tensor_get_f64(t, i);
        (void)sum;
    }
    gf_model_free(m);
    return 0;
}
