/*
 * Cleanup against the ONNX node tests (Debian's libonnx-testdata): every
 * test that passes on the executor as loaded must still pass after
 * gf_pass_cleanup, and the cleaned model must survive save + load.
 *
 *     test_cleanup_conformance [NODE_TEST_DIR] [-v]
 *
 * Prints one line per regression and a summary; exit 1 on any regression.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gf_exec.h"
#include "gf_passes.h"

#define NODE_DIR "/usr/share/libonnx-testdata/data/node"
#define MAX_IO 64
#define RTOL 1e-3 /* the ONNX backend tests' tolerances, as `graphfuse test` */
#define ATOL 1e-7

struct set {
    size_t n_in, n_out;
    struct gf_tensor *in[MAX_IO], *out[MAX_IO];
};

struct totals {
    int models, passing, kept, regressions, reload_failures;
    size_t nodes_before, nodes_after;
};

/* Loads PREFIX_0.pb, PREFIX_1.pb, ... of one test_data_set folder. */
static bool load_files(struct gf_model *m, const char *dir, const char *prefix,
                       struct gf_tensor **t, size_t *n)
{
    for (*n = 0; *n < MAX_IO; (*n)++) {
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s_%zu.pb", dir, prefix, *n);
        if (access(path, F_OK) != 0)
            return true;
        if (gf_tensor_load(m, path, &t[*n]) != GF_OK)
            return false;
    }
    return false;
}

/* Every test_data_set_K of a test folder (tensors in data's arena). */
static int load_sets(struct gf_model *data, const char *dir, struct set *sets, int cap)
{
    int n = 0;
    for (; n < cap; n++) {
        char sd[1600];
        snprintf(sd, sizeof(sd), "%s/test_data_set_%d", dir, n);
        DIR *d = opendir(sd);
        if (!d)
            break;
        closedir(d);
        if (!load_files(data, sd, "input", sets[n].in, &sets[n].n_in) ||
            !load_files(data, sd, "output", sets[n].out, &sets[n].n_out))
            return -1;
    }
    return n;
}

/* True when model m gives the recorded outputs on every set. */
static bool passes(struct gf_model *m, struct set *sets, int n_sets, char *why, size_t len)
{
    struct gf_session *s;
    struct gf_exec_opts o = {.n_threads = 1};
    bool ok = gf_session_new(m, &o, &s) == GF_OK;
    if (!ok)
        snprintf(why, len, "%s", gf_last_error());
    for (int k = 0; ok && k < n_sets; k++) {
        struct gf_tensor **got;
        size_t n_got;
        if (gf_session_run(s, sets[k].n_in, sets[k].in, &got, &n_got) != GF_OK) {
            snprintf(why, len, "%s", gf_last_error());
            ok = false;
            break;
        }
        ok = n_got == sets[k].n_out;
        for (size_t i = 0; ok && i < n_got; i++) {
            double worst;
            struct gf_tensor *want = sets[k].out[i];
            if (want->dtype == GF_UINT16 && got[i]->dtype == GF_BFLOAT16)
                want->dtype = GF_BFLOAT16; /* bfloat16 recorded as uint16 */
            ok = gf_tensor_allclose(got[i], want, RTOL, ATOL, &worst);
            if (!ok)
                snprintf(why, len, "output '%s' differs by %g", got[i]->name, worst);
        }
    }
    gf_session_free(s);
    return ok;
}

/* Cleans a fresh copy of the model and reruns it, then saves and reloads. */
static void check_cleaned(const char *path, const char *name, struct set *sets, int n_sets,
                          struct totals *t, bool verbose)
{
    struct gf_model *m;
    char why[1200] = "";
    if (gf_model_load(path, NULL, &m) != GF_OK)
        return;
    size_t before = m->graph->n_nodes;
    struct gf_cleanup_opts co = {.eval = gf_exec_eval_node};
    if (gf_pass_cleanup(m->graph, &co, NULL) != GF_OK) {
        printf("REGRESSION %s: cleanup failed: %s\n", name, gf_last_error());
        t->regressions++;
    } else if (!passes(m, sets, n_sets, why, sizeof(why))) {
        printf("REGRESSION %s: %s\n", name, why);
        t->regressions++;
    } else {
        uint8_t *buf;
        size_t len;
        struct gf_model *back = NULL;
        if (gf_model_save_buffer(m, &buf, &len) != GF_OK ||
            gf_model_load_buffer(buf, len, NULL, NULL, &back) != GF_OK) {
            printf("REGRESSION %s: cleaned model does not reload: %s\n", name,
                   gf_last_error());
            t->reload_failures++;
        } else {
            t->kept++;
        }
        if (verbose)
            printf("ok %s: %zu -> %zu nodes\n", name, before, m->graph->n_nodes);
        free(buf);
        gf_model_free(back);
    }
    t->nodes_before += before;
    t->nodes_after += m->graph->n_nodes;
    gf_model_free(m);
}

static void one_test(const char *root, const char *name, struct totals *t, bool verbose)
{
    char dir[1200], path[1300], why[1200];
    static struct set sets[8];
    snprintf(dir, sizeof(dir), "%s/%s", root, name);
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    struct gf_model *m, *data = gf_model_new(8, "data");
    if (!data || gf_model_load(path, NULL, &m) != GF_OK) {
        gf_model_free(data);
        return;
    }
    t->models++;
    int n_sets = load_sets(data, dir, sets, 8);
    if (n_sets > 0 && passes(m, sets, n_sets, why, sizeof(why))) {
        t->passing++;
        check_cleaned(path, name, sets, n_sets, t, verbose);
    }
    gf_model_free(m);
    gf_model_free(data);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
    const char *root = NODE_DIR;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0)
            verbose = true;
        else
            root = argv[i];
    }
    struct dirent **ents;
    int n = scandir(root, &ents, NULL, by_name);
    if (n < 0) {
        printf("test_cleanup_conformance: %s: no ONNX node tests (install libonnx-testdata)\n",
               root);
        return 1;
    }
    struct totals t = {0};
    for (int i = 0; i < n; i++) {
        if (ents[i]->d_name[0] != '.')
            one_test(root, ents[i]->d_name, &t, verbose);
        free(ents[i]);
    }
    free(ents);
    printf("cleanup conformance: %d models, %d pass as loaded, %d still pass after cleanup "
           "(%d regressions, %d reload failures); nodes of those %zu -> %zu\n",
           t.models, t.passing, t.kept, t.regressions, t.reload_failures, t.nodes_before,
           t.nodes_after);
    return t.regressions || t.reload_failures || t.passing == 0 ? 1 : 0;
}
