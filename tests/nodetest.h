/*
 * Runs single-node ONNX backend tests (Debian's libonnx-testdata) straight
 * through CPU kernels, without the executor: inputs from input_*.pb, output
 * shapes and dtypes from output_*.pb, results compared with the recorded
 * outputs (|got - want| <= atol + rtol * |want|, NaN matching NaN).
 * Include from one test file; call nodetest_run_ops().
 */
#ifndef GF_NODETEST_H
#define GF_NODETEST_H

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gf_kernels.h"

#define NODETEST_DIR "/usr/share/libonnx-testdata/data/node"

struct nodetest_counts {
    int passed, failed, unsupported;
};

static double nodetest_elem(const struct gf_tview *t, size_t i)
{
    struct gf_tensor tmp = {.dtype = t->dtype, .nelem = t->nelem, .data = t->data};
    return gf_tensor_get_f64(&tmp, i);
}

/* Worst error of one output, or -1 on a shape / dtype mismatch. */
static double nodetest_compare(const struct gf_tview *got, const struct gf_tensor *want,
                               double rtol, double atol, bool *ok)
{
    *ok = true;
    if (got->dtype != want->dtype || got->nelem != want->nelem) {
        *ok = false;
        return -1;
    }
    if (want->dtype == GF_STRING)
        return 0;
    double worst = 0;
    for (size_t i = 0; i < want->nelem; i++) {
        double g = nodetest_elem(got, i), w = gf_tensor_get_f64(want, i);
        if (isnan(w) && isnan(g))
            continue;
        if (isinf(w) && g == w)
            continue;
        double err = fabs(g - w);
        if (!(err <= atol + rtol * fabs(w)))
            *ok = false;
        if (err > worst || isnan(err))
            worst = err;
    }
    return worst;
}

static void nodetest_view(struct gf_tview *v, const struct gf_tensor *t)
{
    memset(v, 0, sizeof(*v));
    v->dtype = t->dtype;
    gf_tview_set_shape(v, t->rank, t->dims);
    v->data = t->data;
}

/* One test directory: returns 1 pass, 0 fail, -1 unsupported/skipped. */
static int nodetest_one(const char *dir, const char *name, bool verbose)
{
    char path[1400];
    snprintf(path, sizeof(path), "%s/%s/model.onnx", dir, name);
    struct gf_model *m;
    if (gf_model_load(path, NULL, &m) != GF_OK)
        return -1;
    struct gf_node *n = m->graph->first;
    int result = -1;
    if (!n || n->next || n->op == GF_OP_UNKNOWN)
        goto out;
    struct gf_backend *be = gf_backend_get("cpu");
    for (int set = 0;; set++) {
        char sd[1100];
        snprintf(sd, sizeof(sd), "%s/%s/test_data_set_%d", dir, name, set);
        DIR *d = opendir(sd);
        if (!d)
            break;
        closedir(d);
        struct gf_tview in[16] = {0}, out[16] = {0};
        struct gf_tensor *want[16] = {0};
        size_t n_in = n->n_inputs, n_out = n->n_outputs;
        if (n_in > 16 || n_out > 16)
            goto out;
        /* graph inputs come from input_K.pb in graph-input order */
        for (size_t i = 0; i < m->graph->n_inputs; i++) {
            struct gf_tensor *t;
            snprintf(path, sizeof(path), "%s/input_%zu.pb", sd, i);
            if (gf_tensor_load(m, path, &t) != GF_OK)
                goto out;
            /* libonnx-testdata 1.12 records bfloat16 data as uint16 */
            if (t->dtype == GF_UINT16 && m->graph->inputs[i]->type.dtype == GF_BFLOAT16)
                t->dtype = GF_BFLOAT16;
            for (size_t k = 0; k < n_in; k++)
                if (n->inputs[k] == m->graph->inputs[i])
                    nodetest_view(&in[k], t);
        }
        for (size_t k = 0; k < n_in; k++)
            if (n->inputs[k] && n->inputs[k]->init)
                nodetest_view(&in[k], n->inputs[k]->init);
        for (size_t i = 0; i < m->graph->n_outputs; i++) {
            snprintf(path, sizeof(path), "%s/output_%zu.pb", sd, i);
            if (gf_tensor_load(m, path, &want[i]) != GF_OK)
                goto out;
            if (want[i]->dtype == GF_UINT16 && m->graph->outputs[i]->type.dtype == GF_BFLOAT16)
                want[i]->dtype = GF_BFLOAT16;
        }
        /* outputs not listed as graph outputs get no buffer (omitted) */
        void *bufs[16] = {0};
        for (size_t k = 0; k < n_out; k++) {
            for (size_t i = 0; i < m->graph->n_outputs; i++) {
                if (n->outputs[k] == m->graph->outputs[i]) {
                    out[k].dtype = want[i]->dtype;
                    gf_tview_set_shape(&out[k], want[i]->rank, want[i]->dims);
                    bufs[k] = calloc(1, gf_tview_bytes(&out[k]) + 64);
                    out[k].data = bufs[k];
                }
            }
        }
        const struct gf_kernel *k = gf_kernel_find(be, n, in, n_in);
        if (!k) {
            for (size_t i = 0; i < n_out; i++)
                free(bufs[i]);
            goto out;
        }
        struct gf_kernel_args a = {.node = n, .in = in, .n_in = n_in, .out = out,
                                   .n_out = n_out, .n_threads = 2, .backend = be};
        void *ws = NULL;
        if (k->workspace)
            ws = a.workspace = calloc(1, k->workspace(&a) + 64);
        enum gf_status st = k->run(&a);
        free(ws);
        bool all_ok = st == GF_OK;
        if (st != GF_OK && verbose)
            printf("FAIL %s: %s\n", name, gf_last_error());
        for (size_t i = 0; st == GF_OK && i < m->graph->n_outputs; i++) {
            for (size_t j = 0; j < n_out; j++) {
                if (n->outputs[j] != m->graph->outputs[i])
                    continue;
                bool ok;
                double err = nodetest_compare(&out[j], want[i], 1e-3, 1e-7, &ok);
                if (!ok && verbose)
                    printf("FAIL %s set %d output %zu: worst error %g%s\n", name, set, i, err,
                           err < 0 ? " (shape or dtype differs)" : "");
                all_ok = all_ok && ok;
            }
        }
        for (size_t i = 0; i < n_out; i++)
            free(bufs[i]);
        result = all_ok ? 1 : 0;
        if (!all_ok)
            break;
    }
out:
    gf_model_free(m);
    return result;
}

/* Runs every single-node test whose op is in `ops` (NULL-terminated list of
 * op_type names); prints failures and a summary line. */
static struct nodetest_counts nodetest_run_ops(const char *const *ops, bool verbose)
{
    struct nodetest_counts c = {0};
    DIR *d = opendir(NODETEST_DIR);
    if (!d)
        return c;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "test_", 5) != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s/model.onnx", NODETEST_DIR, e->d_name);
        struct gf_model *m;
        if (gf_model_load(path, NULL, &m) != GF_OK)
            continue;
        const struct gf_node *n = m->graph->first;
        bool mine = false;
        for (size_t i = 0; n && !n->next && ops[i]; i++)
            mine |= strcmp(n->op_type, ops[i]) == 0 && (!n->domain || !*n->domain);
        gf_model_free(m);
        if (!mine)
            continue;
        int r = nodetest_one(NODETEST_DIR, e->d_name, verbose);
        if (r > 0)
            c.passed++;
        else if (r == 0)
            c.failed++;
        else {
            c.unsupported++;
            if (verbose)
                printf("UNSUPPORTED %s\n", e->d_name);
        }
    }
    closedir(d);
    printf("node tests: %d passed, %d failed, %d unsupported\n", c.passed, c.failed,
           c.unsupported);
    return c;
}

#endif
