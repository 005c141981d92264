/*
 * A session's input tensors as `run` and `tune` build them, so that both
 * plan the same shapes: files given with --input NAME=FILE.pb, the rest
 * random (reproducible, suited to the dtype; the same seed for both) with
 * symbolic dimensions from --dim.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gf_exec.h"

/* Fills a tensor with reproducible values suited to its type. */
static void fill_random(struct gf_tensor *t, unsigned *seed)
{
    for (size_t i = 0; i < t->nelem; i++) {
        *seed = *seed * 1103515245u + 12345u;
        unsigned r = (*seed >> 8) & 0xffff;
        double f = (double)r / 65535.0 * 2 - 1;
        uint8_t *p = (uint8_t *)t->data;
        switch (t->dtype) {
        case GF_FLOAT: { float x = (float)f; memcpy(p + 4 * i, &x, 4); break; }
        case GF_DOUBLE: memcpy(p + 8 * i, &f, 8); break;
        case GF_INT64: { int64_t x = r % 16; memcpy(p + 8 * i, &x, 8); break; }
        case GF_INT32: { int32_t x = (int32_t)(r % 16); memcpy(p + 4 * i, &x, 4); break; }
        case GF_BOOL: p[i] = r & 1; break;
        default: memset(p + gf_dtype_size(t->dtype) * i, 0, gf_dtype_size(t->dtype)); break;
        }
    }
}

/* Input i's file among the specs: the tensor loaded into in[i]. */
static int load_specs(struct gf_model *m, struct gf_session *s, const char *path,
                      const struct cli_inputs *a, struct gf_tensor **in)
{
    size_t n_in = gf_session_input_count(s);
    for (int k = 0; k < a->n_specs; k++) {
        const char *eq = strchr(a->specs[k], '=');
        size_t i, len = (size_t)(eq - a->specs[k]);
        for (i = 0; i < n_in; i++) {
            const char *name = gf_session_input(s, i)->name;
            if (strlen(name) == len && strncmp(name, a->specs[k], len) == 0)
                break;
        }
        if (i == n_in) {
            fprintf(stderr, "graphfuse: %s: the model has no input named '%.*s'\n", path,
                    (int)len, a->specs[k]);
            return EXIT_INPUT;
        }
        enum gf_status st = gf_tensor_load(m, eq + 1, &in[i]);
        if (st != GF_OK)
            return cli_fail(st);
    }
    return 0;
}

/* Whether symbolic dimension `name` appears before axis d of input i. */
static bool seen_before(struct gf_session *s, size_t i, int d, const char *name)
{
    for (size_t j = 0; j <= i; j++) {
        const struct gf_type *t = &gf_session_input(s, j)->type;
        for (int e = 0; e < (j == i ? d : t->rank); e++)
            if (t->dims[e].param && strcmp(t->dims[e].param, name) == 0)
                return true;
    }
    return false;
}

/* Whether some input of the session has symbolic dimension `name`. */
static bool has_dim(struct gf_session *s, const char *name)
{
    for (size_t i = 0; i < gf_session_input_count(s); i++) {
        const struct gf_type *t = &gf_session_input(s, i)->type;
        for (int d = 0; d < t->rank; d++)
            if (t->dims[d].param && strcmp(t->dims[d].param, name) == 0)
                return true;
    }
    return false;
}

/* Every --dim must name a symbolic dimension of the inputs: a typo would
 * otherwise leave the dimension at its default and the run meaningless. */
static int check_dims(struct gf_session *s, const char *path, const struct cli_inputs *a)
{
    for (int k = 0; k < a->n_dims; k++) {
        if (has_dim(s, a->dims[k].name))
            continue;
        fprintf(stderr, "graphfuse: %s: --dim: no input has a symbolic dimension named '%s' "
                "(the model's symbolic dims:", path, a->dims[k].name);
        int n = 0;
        for (size_t i = 0; i < gf_session_input_count(s); i++) {
            const struct gf_type *t = &gf_session_input(s, i)->type;
            for (int d = 0; d < t->rank; d++) {
                const char *p = t->dims[d].param;
                if (p && *p && !seen_before(s, i, d, p))
                    fprintf(stderr, "%s %s", n++ ? "," : "", p);
            }
        }
        fprintf(stderr, "%s)\n", n ? "" : " none");
        return EXIT_INPUT;
    }
    return 0;
}

int cli_make_inputs(struct gf_model *m, struct gf_session *s, const char *path,
                    const struct cli_inputs *a, struct gf_tensor **in)
{
    size_t n_in = gf_session_input_count(s);
    if (n_in > CLI_MAX_INPUTS)
        return cli_usage(NULL, "the model has too many inputs");
    memset(in, 0, n_in * sizeof(*in));
    int rc = check_dims(s, path, a);
    if (!rc)
        rc = load_specs(m, s, path, a, in);
    unsigned seed = 1234;
    for (size_t i = 0; i < n_in && !rc; i++) {
        if (in[i])
            continue;
        const struct gf_value *v = gf_session_input(s, i);
        if (!a->random) {
            fprintf(stderr, "graphfuse: %s: input '%s' is missing (give --input %s=FILE.pb "
                    "or --random-inputs)\n", path, v->name, v->name);
            return EXIT_INPUT;
        }
        int64_t shape[64];
        int rank = v->type.rank < 0 ? 0 : v->type.rank > 64 ? 64 : v->type.rank;
        for (int d = 0; d < rank; d++) {
            const struct gf_dim *x = &v->type.dims[d];
            shape[d] = x->value >= 0 ? x->value
                                     : cli_dim_size(a->dims, a->n_dims, x->param, a->dim_default);
            if (shape[d] < 0) {
                fprintf(stderr, "graphfuse: %s: input '%s': give the size of %s%s%s with --dim "
                        "%s=SIZE\n", path, v->name, x->param ? "dimension '" : "axis ",
                        x->param ? x->param : "", x->param ? "'" : "",
                        x->param ? x->param : "NAME");
                return EXIT_INPUT;
            }
        }
        enum gf_dtype dt = v->type.dtype == GF_UNDEFINED ? GF_FLOAT : v->type.dtype;
        uint64_t n = 1;
        bool wraps = false;
        for (int d = 0; d < rank; d++) {
            if (shape[d] && n > (uint64_t)INT64_MAX / (uint64_t)shape[d])
                wraps = true;
            else
                n *= (uint64_t)shape[d];
        }
        if (wraps || n > SIZE_MAX / 16 || gf_dtype_bytes(dt, (size_t)n) == SIZE_MAX) {
            /* name the largest size a --dim gave this input: the one to lower */
            const char *big = NULL;
            int64_t bigv = 0;
            for (int d = 0; d < rank; d++) {
                const struct gf_dim *x = &v->type.dims[d];
                if (x->value < 0 && x->param && shape[d] > bigv) {
                    big = x->param;
                    bigv = shape[d];
                }
            }
            if (big)
                fprintf(stderr, "graphfuse: %s: input '%s': --dim %s=%lld is too large (the "
                        "input's size overflows)\n", path, v->name, big, (long long)bigv);
            else
                fprintf(stderr, "graphfuse: %s: input '%s': its size overflows\n", path, v->name);
            return EXIT_INPUT;
        }
        if (!(in[i] = gf_tensor_new(m, v->name, dt, rank, shape, NULL)))
            return cli_fail(GF_ERR_NOMEM);
        fill_random(in[i], &seed);
    }
    return rc;
}

int cli_input_option(const char *cmd, int argc, char **argv, int *i, struct cli_inputs *a)
{
    const char *o = argv[*i], *v;
    bool missing = false;
    if ((v = cli_opt_value(argc, argv, i, "--input", &missing)) ||
        (v = cli_opt_value(argc, argv, i, "-i", &missing))) {
        if (!strchr(v, '='))
            return cli_usage(cmd, "%s: bad input '%s' (want NAME=FILE.pb)", o, v);
        if (a->n_specs == 64)
            return cli_usage(cmd, "%s: too many inputs", o);
        a->specs[a->n_specs++] = v;
    } else if (strcmp(o, "--random-inputs") == 0) {
        a->random = true;
    } else if ((v = cli_opt_value(argc, argv, i, "--dim", &missing))) {
        if (a->n_dims == 64)
            return cli_usage(cmd, "--dim: too many dims");
        if (!cli_parse_dim(v, &a->dims[a->n_dims++]))
            return cli_usage(cmd, "--dim: bad value '%s' (want NAME=SIZE, e.g. seq=256)", v);
    } else if (missing) {
        return cli_usage(cmd, "%s needs a value", o);
    } else {
        return 0;
    }
    return 1;
}

int cli_tolerance_option(const char *cmd, int argc, char **argv, int *i, double *rtol,
                         double *atol)
{
    const char *v;
    bool missing = false, is_atol = false;
    if ((v = cli_opt_value(argc, argv, i, "--rtol", &missing)) ||
        (!missing && (is_atol = true, v = cli_opt_value(argc, argv, i, "--atol", &missing)))) {
        char *end;
        double t = strtod(v, &end);
        if (end == v || *end || !(t >= 0))
            return cli_usage(cmd, "%s: bad tolerance '%s' (a number >= 0)",
                             is_atol ? "--atol" : "--rtol", v);
        *(is_atol ? atol : rtol) = t;
    } else if (missing) {
        return cli_usage(cmd, "%s needs a value", argv[*i]);
    } else {
        return 0;
    }
    return 1;
}
