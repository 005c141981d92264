/*
 * fuzz_load: bytes -> model (gf_model_load_buffer, external data refused),
 * then shape inference and a save / load round trip of what was accepted.
 */
#include <stdlib.h>

#include "gf_graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gf_model *m;
    if (gf_model_load_buffer(data, size, NULL, NULL, &m) != GF_OK)
        return 0;
    (void)gf_graph_infer_shapes(m->graph);
    uint8_t *buf;
    size_t len;
    if (gf_model_save_buffer(m, &buf, &len) == GF_OK) {
        struct gf_model *r;
        if (gf_model_load_buffer(buf, len, NULL, NULL, &r) == GF_OK)
            gf_model_free(r);
        free(buf);
    }
    gf_model_free(m);
    return 0;
}
