/* tune_cache.h — the autotune cache inside the executor (internal): entries,
 * their keys, and the tuner object that holds them (executor/tune_cache.c
 * reads and writes the YAML file; executor/autotune.c builds keys and
 * tunes). */
#ifndef GF_TUNE_CACHE_H
#define GF_TUNE_CACHE_H

#include "gf_tune.h"

#define TC_STR 2048 /* longest key field; longer ones end in a hash */

/* What identifies an entry: every field must match. */
struct tune_key {
    char device[256];
    char driver[128];
    char version[32];   /* graphfuse version that tuned it */
    char backend[32];
    char op[160];       /* "MatMul", "graphfuse.MatMulEpilogue" */
    char dtype[256];    /* "float", or one per input: "float,int64,-" */
    char shapes[TC_STR]; /* inputs->outputs: "64x32,32x16->64x16"; "scalar"; "-" omitted */
    char attrs[TC_STR];  /* "activation=gelu;transB=1", "" without attributes */
};

struct tune_entry {
    struct tune_key key;
    char impl[128];                     /* kernel impl name */
    char impl_backend[32];              /* its backend (key.backend, or "cpu") */
    int n_knobs;
    char knob[GF_TUNE_MAX_KNOBS][48];
    int value[GF_TUNE_MAX_KNOBS];
    double default_ms, best_ms;
    long n_tried, n_rejected;
    char tuned[32];                     /* ISO 8601 UTC */
    int line;                           /* in the file, for messages; 0: recorded here */
    bool warned;                        /* a lookup already reported it unusable */
};

struct tc_list {
    struct tune_entry *v;
    size_t n, cap;
    size_t *slot, n_slots; /* hash of the keys: index + 1 per slot, 0 empty */
};

struct gf_tuner {
    char path[4096];
    struct tc_list file;   /* usable entries read from the file at open */
    struct tc_list mine;   /* recorded since open (saved or not) */
    bool dirty;            /* `mine` has entries not yet written */
    char **warn;
    size_t n_warn;
    bool bad_file;         /* the file exists but was ignored: keep a .bak when replacing */
};

/* Adds a warning (printf-style) to t. */
void tc_warn(struct gf_tuner *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The entry with this key: recorded here first, then the file's; NULL. */
struct tune_entry *tc_find(struct gf_tuner *t, const struct tune_key *k);
/* Adds e to the recorded entries (replacing one with the same key). */
enum gf_status tc_put(struct gf_tuner *t, const struct tune_entry *e);

#endif /* GF_TUNE_CACHE_H */
