/*
 * fuzz_optimize: bytes -> model -> what `graphfuse optimize` does in memory
 * (shape inference, cleanup with constant folding on the CPU kernels, every
 * fusion pattern), then a save to memory.
 */
#include <stdlib.h>

#include "gf_exec.h"
#include "gf_passes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gf_model *m;
    if (gf_model_load_buffer(data, size, NULL, NULL, &m) != GF_OK)
        return 0;
    struct gf_cleanup_stats cs;
    struct gf_fuse_report rep = {0};
    if (gf_graph_infer_shapes(m->graph) == GF_OK &&
        gf_pass_cleanup(m->graph, &(struct gf_cleanup_opts){.eval = gf_exec_eval_node},
                        &cs) == GF_OK &&
        gf_pass_fuse(m, NULL, &rep) == GF_OK) {
        uint8_t *buf;
        size_t len;
        if (gf_model_save_buffer(m, &buf, &len) == GF_OK)
            free(buf);
    }
    gf_fuse_report_free(&rep);
    gf_model_free(m);
    return 0;
}
