/*
 * fuzz_run: bytes -> model -> a CPU session (one thread, no autotune cache,
 * --max-memory 64M) run once on zero-filled inputs of the declared shapes.
 * Bounded so that an input cannot ask for gigabytes or minutes: symbolic or
 * unknown dims are 2, an input of more than 2^16 elements or a dim above
 * 2^12 skips the model, and so does a Loop (its trip count is the model's).
 */
#include <string.h>

#include "gf_exec.h"

#define FZ_MAX_MEMORY (64u << 20)
#define FZ_MAX_ELEMS  (1 << 16)
#define FZ_MAX_DIM    (1 << 12)
#define FZ_MAX_INPUTS 64

static bool has_loop(const struct gf_graph *g)
{
    for (const struct gf_node *n = g->first; n; n = n->next)
        if (strcmp(n->op_type, "Loop") == 0)
            return true;
    return false;
}

/* Zero-filled inputs of the declared shapes; false: the model is skipped. */
static bool make_inputs(struct gf_model *m, struct gf_session *s, struct gf_tensor **in,
                        size_t n_in)
{
    for (size_t i = 0; i < n_in; i++) {
        const struct gf_value *v = gf_session_input(s, i);
        if (v->type.rank > 8 || v->type.dtype == GF_STRING)
            return false;
        int rank = v->type.rank < 0 ? 0 : v->type.rank;
        int64_t dims[8], n = 1;
        for (int d = 0; d < rank; d++) {
            int64_t x = v->type.dims[d].value;
            dims[d] = x < 0 ? 2 : x;
            if (dims[d] > FZ_MAX_DIM || (n *= dims[d]) > FZ_MAX_ELEMS)
                return false;
        }
        enum gf_dtype dt = v->type.dtype == GF_UNDEFINED ? GF_FLOAT : v->type.dtype;
        if (!(in[i] = gf_tensor_new(m, v->name, dt, rank, dims, NULL)))
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gf_model *m;
    if (gf_model_load_buffer(data, size, NULL, NULL, &m) != GF_OK)
        return 0;
    struct gf_session *s = NULL;
    struct gf_exec_opts o = {.backend = "cpu", .n_threads = 1, .max_memory = FZ_MAX_MEMORY,
                             .tune_cache = ""};
    if (!has_loop(m->graph) && gf_graph_infer_shapes(m->graph) == GF_OK &&
        gf_session_new(m, &o, &s) == GF_OK) {
        size_t n_in = gf_session_input_count(s);
        struct gf_tensor *in[FZ_MAX_INPUTS];
        struct gf_tensor **out;
        size_t n_out;
        if (n_in <= FZ_MAX_INPUTS && make_inputs(m, s, in, n_in))
            (void)gf_session_run(s, n_in, in, &out, &n_out);
    }
    gf_session_free(s);
    gf_model_free(m);
    return 0;
}
