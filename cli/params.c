/*
 * What train says about its parameter set: `train --list-params` and the
 * notes printed before the first step (constants left out, parameters the
 * exporter may have merged).  The rule itself is passes/params.c.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gf_exec.h"

/* "256x64", "64", "scalar" */
static void shape_text(const struct gf_param_class *c, char *buf, size_t len)
{
    size_t p = 0;
    buf[0] = '\0';
    if (c->rank == 0)
        snprintf(buf, len, "scalar");
    for (int d = 0; d < c->rank && d < 8 && p < len; d++)
        p += (size_t)snprintf(buf + p, len - p, "%s%lld", d ? "x" : "", (long long)c->dims[d]);
}

void cli_list_params(const struct gf_trainer *t, const char *freeze, const char *trainable)
{
    size_t n = gf_trainer_class_count(t), trained = 0;
    printf("%-40s %-12s %-18s %s\n", "initializer", "shape", "read by", "status");
    for (size_t i = 0; i < n; i++) {
        const struct gf_param_class *c = gf_trainer_class(t, i);
        char shape[64];
        shape_text(c, shape, sizeof(shape));
        bool on = gf_trainer_is_trained(t, c->name);
        trained += on;
        const char *why = on ? "trained"
                        : trainable ? "not matched by --trainable"
                        : c->kind == GF_PARAM_TRAINED && freeze ? "frozen (--freeze)"
                        : c->kind == GF_PARAM_TRAINED ? "not trained (not float32)"
                        : gf_param_kind_name(c->kind);
        printf("%-40s %-12s %-18s %s", c->name, shape, c->readers, why);
        if (on && c->merged)
            printf("; read by %zu %s nodes: the exporter may have merged equal parameters "
                   "(--untie)", c->n_roles, c->role);
        printf("\n");
    }
    printf("%zu of %zu float initializers trained\n", trained, n);
}

void cli_param_notes(const struct gf_trainer *t)
{
    size_t n = gf_trainer_class_count(t), consts = 0, values = 0;
    for (size_t i = 0; i < n; i++) {
        const struct gf_param_class *c = gf_trainer_class(t, i);
        if (c->kind != GF_PARAM_TRAINED && c->kind != GF_PARAM_SCALAR) {
            consts++;
            values += c->nelem;
        }
    }
    if (consts)
        printf("constants: %zu float initializers (%zu values) are masks, tables or "
               "positions, not trained (--list-params says which)\n", consts, values);
    for (size_t i = 0; i < n; i++) {
        const struct gf_param_class *c = gf_trainer_class(t, i);
        if (c->merged && gf_trainer_is_trained(t, c->name))
            printf("warning: '%s' is read by %zu %s nodes: the exporter may have merged "
                   "parameters that held equal values, which PyTorch trains apart; "
                   "--untie %s (or --untie all) trains each use on its own\n",
                   c->name, c->n_roles, c->role, c->name);
    }
}
