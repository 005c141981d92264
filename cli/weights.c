/*
 * graphfuse export-weights MODEL -o FILE.safetensors [--list]
 *
 * The parameters of an exported model, a trained one (train -o) or a
 * checkpoint, under their PyTorch names and in PyTorch's layout, as a
 * safetensors file (gf_weights_map / gf_weights_save_safetensors), so that
 * model.load_state_dict(safetensors.torch.load_file(FILE)) takes them
 * back.  Bad input: one message naming the file, exit 2, no output.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gf_exec.h"

int cmd_export_weights(int argc, char **argv);

/* What was written and left out, in a few lines (list: every parameter, and
 * every name left out). */
void cli_weights_report(const struct gf_weights *w, bool list)
{
    size_t n = gf_weights_count(w), values = 0;
    struct gf_weight_info wi;
    for (size_t i = 0; i < n; i++) {
        gf_weights_get(w, i, &wi);
        values += wi.t->nelem;
        if (list)
            printf("  %-48s <- %s%s\n", wi.torch_name, wi.onnx_name,
                   wi.transposed ? " (transposed)" : "");
    }
    printf("parameters: %zu (%zu values)\n", n, values);
    size_t k = gf_weights_skipped_count(w);
    if (k) {
        printf("skipped: %zu float initializer%s holding no parameter (constants, buffers):",
               k, k > 1 ? "s" : "");
        for (size_t i = 0; i < k && (i < 8 || list); i++)
            printf("%s %s", i ? "," : "", gf_weights_get_skipped(w, i));
        printf("%s\n", k > 8 && !list ? ", ..." : "");
    }
    k = gf_weights_unread_count(w);
    if (k) {
        printf("not in the graph: %zu parameter%s of the exported program (folded into a "
               "constant, dropped, or tied to one written):", k, k > 1 ? "s" : "");
        for (size_t i = 0; i < k && (i < 8 || list); i++)
            printf("%s %s", i ? "," : "", gf_weights_get_unread(w, i));
        printf("%s\n", k > 8 && !list ? ", ..." : "");
    }
    if (gf_weights_copy_count(w))
        printf("copies: %zu initializer%s holding parameters written from another one\n",
               gf_weights_copy_count(w), gf_weights_copy_count(w) > 1 ? "s" : "");
    if (gf_weights_state_count(w))
        printf("left out: %zu checkpoint state tensors (graphfuse.optim.*, graphfuse.train.*)\n",
               gf_weights_state_count(w));
}

int cmd_export_weights(int argc, char **argv)
{
    const char *model = NULL, *out = NULL;
    bool list = false;
    for (int i = 0; i < argc; i++) {
        const char *v;
        bool missing = false;
        if ((v = cli_opt_value(argc, argv, &i, "-o", &missing)) ||
            (v = cli_opt_value(argc, argv, &i, "--output", &missing))) {
            out = v;
        } else if (missing) {
            return cli_usage("export-weights", "%s needs a file name", argv[i]);
        } else if (strcmp(argv[i], "--list") == 0) {
            list = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage("export-weights", "unknown option '%s'", argv[i]);
        } else if (model) {
            return cli_usage("export-weights", "more than one model given ('%s')", argv[i]);
        } else {
            model = argv[i];
        }
    }
    if (!model || !out)
        return cli_usage("export-weights", "usage: export-weights MODEL -o FILE.safetensors%s",
                         "");
    struct gf_model *m;
    struct gf_weights *w = NULL;
    size_t bytes = 0;
    enum gf_status st = gf_model_load(model, NULL, &m);
    if (st != GF_OK)
        return cli_fail(st);
    if ((st = gf_weights_map(m, &w)) != GF_OK)
        gf_error_prefix(model);
    else
        st = gf_weights_save_safetensors(w, out, &bytes);
    int rc = st == GF_OK ? 0 : cli_fail(st);
    if (rc == 0) {
        printf("export-weights: %s\n", model);
        cli_weights_report(w, list);
        printf("wrote %s: %zu tensors, %zu bytes\n", out, gf_weights_count(w), bytes);
    }
    gf_weights_free(w);
    gf_model_free(m);
    return rc;
}
