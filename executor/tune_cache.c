/*
 * The autotune cache file (YAML, through libyaml): reading it at open,
 * merging and writing it at save.  Layout (one entry per tuned key):
 *
 *     # graphfuse autotune cache ...
 *     graphfuse: 0.1.0          # version that wrote the file
 *     format: 1
 *     entries:
 *     - device: NVIDIA H200
 *       driver: 570.86.15
 *       graphfuse: 0.1.0        # version that tuned the entry (key)
 *       backend: opencl
 *       op: MatMul
 *       dtype: float
 *       shapes: 4096x4096,4096x4096->4096x4096
 *       attrs: ''
 *       impl: tiled
 *       impl_backend: opencl
 *       config: {tile_m: 64, tile_n: 64, tile_k: 16, wg: 256}
 *       default_ms: 12.5
 *       best_ms: 3.1
 *       tried: 48
 *       rejected: 0
 *       tuned: 2025-01-31T12:00:00Z
 *
 * A file that cannot be used is reported once (file and line) and treated
 * as empty; see gf_tune.h for the rules on saving.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "tune_cache.h"

#define FORMAT 1
#define MAX_FILE (64u << 20)

/* ---- lists and warnings ---------------------------------------------------------------------- */

static bool same_key(const struct tune_key *a, const struct tune_key *b)
{
    return strcmp(a->device, b->device) == 0 && strcmp(a->driver, b->driver) == 0 &&
           strcmp(a->version, b->version) == 0 && strcmp(a->backend, b->backend) == 0 &&
           strcmp(a->op, b->op) == 0 && strcmp(a->dtype, b->dtype) == 0 &&
           strcmp(a->shapes, b->shapes) == 0 && strcmp(a->attrs, b->attrs) == 0;
}

/* FNV-1a over every key field (with its terminator, so fields cannot run
 * into each other). */
static size_t key_hash(const struct tune_key *k)
{
    const char *f[] = {k->device, k->driver, k->version, k->backend,
                       k->op,     k->dtype,  k->shapes,  k->attrs};
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        for (const unsigned char *p = (const unsigned char *)f[i];; p++) {
            h = (h ^ *p) * 1099511628211ull;
            if (!*p)
                break;
        }
    return (size_t)h;
}

/* The slot holding k, or the empty slot where it would go. */
static size_t *list_slot(struct tc_list *l, const struct tune_key *k)
{
    size_t mask = l->n_slots - 1;
    for (size_t i = key_hash(k) & mask;; i = (i + 1) & mask)
        if (!l->slot[i] || same_key(&l->v[l->slot[i] - 1].key, k))
            return &l->slot[i];
}

/* Keeps the table at most half full: rebuilt at twice the size. */
static bool list_rehash(struct tc_list *l, size_t want)
{
    if (l->n_slots && want * 2 <= l->n_slots)
        return true;
    size_t n = l->n_slots ? l->n_slots : 32;
    while (want * 2 > n)
        n *= 2;
    size_t *s = calloc(n, sizeof(*s));
    if (!s)
        return false;
    free(l->slot);
    l->slot = s;
    l->n_slots = n;
    for (size_t i = 0; i < l->n; i++)
        *list_slot(l, &l->v[i].key) = i + 1;
    return true;
}

static enum gf_status list_add(struct tc_list *l, const struct tune_entry *e)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        struct tune_entry *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return gf_error(GF_ERR_NOMEM, "out of memory (autotune cache)");
        l->v = v;
        l->cap = cap;
    }
    if (!list_rehash(l, l->n + 1))
        return gf_error(GF_ERR_NOMEM, "out of memory (autotune cache)");
    l->v[l->n++] = *e;
    *list_slot(l, &e->key) = l->n;
    return GF_OK;
}

static struct tune_entry *list_find(struct tc_list *l, const struct tune_key *k)
{
    if (!l->n_slots)
        return NULL;
    size_t *s = list_slot(l, k);
    return *s ? &l->v[*s - 1] : NULL;
}

/* Empties l, keeping its memory. */
static void list_clear(struct tc_list *l)
{
    l->n = 0;
    if (l->slot)
        memset(l->slot, 0, l->n_slots * sizeof(*l->slot));
}

static void list_free(struct tc_list *l)
{
    free(l->v);
    free(l->slot);
    *l = (struct tc_list){0};
}

/* Puts e into l, replacing the entry with its key. */
static enum gf_status list_put(struct tc_list *l, const struct tune_entry *e)
{
    struct tune_entry *old = list_find(l, &e->key);
    if (old) {
        *old = *e;
        return GF_OK;
    }
    return list_add(l, e);
}

void tc_warn(struct gf_tuner *t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    char **w = realloc(t->warn, (t->n_warn + 1) * sizeof(*w));
    if (!w)
        return;
    t->warn = w;
    if ((w[t->n_warn] = strdup(buf)))
        t->n_warn++;
}

struct tune_entry *tc_find(struct gf_tuner *t, const struct tune_key *k)
{
    struct tune_entry *e = list_find(&t->mine, k);
    return e ? e : list_find(&t->file, k);
}

enum gf_status tc_put(struct gf_tuner *t, const struct tune_entry *e)
{
    enum gf_status st = list_put(&t->mine, e);
    t->dirty |= st == GF_OK;
    return st;
}

/* ---- reading --------------------------------------------------------------------------------- */

struct reader {
    const char *path;
    yaml_document_t *doc;
    char *why;   /* message when the file is unusable */
    size_t why_len;
};

static bool bad(struct reader *r, const yaml_node_t *at, const char *fmt, const char *arg)
{
    char msg[512];
    snprintf(msg, sizeof(msg), fmt, arg);
    snprintf(r->why, r->why_len, "%s:%zu: %s", r->path, at ? at->start_mark.line + 1 : 1, msg);
    return false;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static bool get_str(struct reader *r, const yaml_node_t *v, const char *key, char *dst,
                    size_t len)
{
    const char *s = scalar(v);
    if (!s)
        return bad(r, v, "'%s' must be a string", key);
    if (strlen(s) >= len)
        return bad(r, v, "'%s' is too long", key);
    memcpy(dst, s, strlen(s) + 1);
    return true;
}

static bool get_num(struct reader *r, const yaml_node_t *v, const char *key, double *out)
{
    const char *s = scalar(v);
    char *end;
    if (s) {
        errno = 0;
        *out = strtod(s, &end);
    }
    if (!s || !*s || *end || errno || !(*out >= 0))
        return bad(r, v, "'%s' must be a non-negative number", key);
    return true;
}

/* An integer in [lo, hi]: "4294967424" is refused, never wrapped to 128. */
static bool get_int(struct reader *r, const yaml_node_t *v, const char *key, long lo, long hi,
                    long *out)
{
    const char *s = scalar(v);
    char *end;
    if (s) {
        errno = 0;
        *out = strtol(s, &end, 10);
    }
    if (!s || !*s || *end || (errno && errno != ERANGE))
        return bad(r, v, "'%s' must be an integer", key);
    if (errno == ERANGE || *out < lo || *out > hi) {
        char msg[200];
        snprintf(msg, sizeof(msg), "'%s' is out of range (%ld to %ld)", key, lo, hi);
        return bad(r, v, "%s", msg);
    }
    return true;
}

static bool get_config(struct reader *r, const yaml_node_t *v, struct tune_entry *e)
{
    if (v->type != YAML_MAPPING_NODE)
        return bad(r, v, "'config' must be a mapping of knob names to integers%s", "");
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(r->doc, p->key);
        yaml_node_t *x = yaml_document_get_node(r->doc, p->value);
        long val;
        if (e->n_knobs == GF_TUNE_MAX_KNOBS)
            return bad(r, k, "'config' has too many knobs%s", "");
        if (!get_str(r, k, "config", e->knob[e->n_knobs], sizeof(e->knob[0])) ||
            !get_int(r, x, e->knob[e->n_knobs], INT_MIN, INT_MAX, &val))
            return false;
        e->value[e->n_knobs++] = (int)val;
    }
    return true;
}

/* Fields of an entry, by name: the offset of a key string or -1. */
static const struct field {
    const char *name;
    size_t off, len;
} key_fields[] = {
#define KF(name, f) {name, offsetof(struct tune_entry, f), sizeof(((struct tune_entry *)0)->f)}
    KF("device", key.device), KF("driver", key.driver), KF("graphfuse", key.version),
    KF("backend", key.backend), KF("op", key.op), KF("dtype", key.dtype),
    KF("shapes", key.shapes), KF("attrs", key.attrs), KF("impl", impl),
    KF("impl_backend", impl_backend), KF("tuned", tuned),
#undef KF
};
#define N_KEY_FIELDS (sizeof(key_fields) / sizeof(key_fields[0]))
#define N_REQUIRED 9 /* the first nine */

static bool read_entry(struct reader *r, const yaml_node_t *m, struct tune_entry *e)
{
    memset(e, 0, sizeof(*e));
    e->line = (int)m->start_mark.line + 1;
    if (m->type != YAML_MAPPING_NODE)
        return bad(r, m, "an entry must be a mapping%s", "");
    bool seen[N_KEY_FIELDS] = {0}, config = false;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(r->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(r->doc, p->value);
        const char *name = scalar(k);
        long n;
        bool ok = true;
        if (!name)
            return bad(r, k, "entry keys must be strings%s", "");
        size_t f = 0;
        while (f < N_KEY_FIELDS && strcmp(key_fields[f].name, name) != 0)
            f++;
        if (f < N_KEY_FIELDS) {
            ok = get_str(r, v, name, (char *)e + key_fields[f].off, key_fields[f].len);
            seen[f] = true;
        } else if (strcmp(name, "config") == 0) {
            ok = get_config(r, v, e);
            config = true;
        } else if (strcmp(name, "default_ms") == 0) {
            ok = get_num(r, v, name, &e->default_ms);
        } else if (strcmp(name, "best_ms") == 0) {
            ok = get_num(r, v, name, &e->best_ms);
        } else if (strcmp(name, "tried") == 0 || strcmp(name, "rejected") == 0) {
            ok = get_int(r, v, name, 0, LONG_MAX, &n);
            *(name[0] == 't' ? &e->n_tried : &e->n_rejected) = n;
        } /* other keys: from a later version, ignored */
        if (!ok)
            return false;
    }
    for (size_t f = 0; f < N_REQUIRED; f++)
        if (!seen[f])
            return bad(r, m, "entry has no '%s'", key_fields[f].name);
    if (!config)
        return bad(r, m, "entry has no '%s'", "config");
    if (!e->impl_backend[0])
        snprintf(e->impl_backend, sizeof(e->impl_backend), "%s", e->key.backend);
    return true;
}

static bool read_doc(struct reader *r, struct tc_list *out)
{
    yaml_node_t *root = yaml_document_get_root_node(r->doc);
    if (!root)
        return bad(r, NULL, "the file is empty%s", "");
    if (root->type != YAML_MAPPING_NODE)
        return bad(r, root, "not a graphfuse autotune cache (the top level is not a "
                   "mapping)%s", "");
    yaml_node_t *entries = NULL, *format = NULL;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        const char *name = scalar(yaml_document_get_node(r->doc, p->key));
        yaml_node_t *v = yaml_document_get_node(r->doc, p->value);
        if (name && strcmp(name, "entries") == 0)
            entries = v;
        else if (name && strcmp(name, "format") == 0)
            format = v;
    }
    long fmt;
    if (!format)
        return bad(r, root, "not a graphfuse autotune cache (no 'format' key)%s", "");
    if (!get_int(r, format, "format", LONG_MIN, LONG_MAX, &fmt))
        return false;
    if (fmt != FORMAT)
        return bad(r, format, "cache format %s is not the one this graphfuse reads (1)",
                   scalar(format));
    if (!entries)
        return bad(r, root, "no 'entries' list%s", "");
    if (entries->type == YAML_SCALAR_NODE && !*scalar(entries))
        return true; /* "entries:" with nothing */
    if (entries->type != YAML_SEQUENCE_NODE)
        return bad(r, entries, "'entries' must be a list%s", "");
    size_t count = (size_t)(entries->data.sequence.items.top - entries->data.sequence.items.start);
    if (count > out->cap) { /* one allocation, not a copy per doubling */
        struct tune_entry *v = realloc(out->v, count * sizeof(*v));
        if (!v)
            return bad(r, NULL, "out of memory%s", "");
        out->v = v;
        out->cap = count;
    }
    if (!list_rehash(out, count))
        return bad(r, NULL, "out of memory%s", "");
    for (yaml_node_item_t *i = entries->data.sequence.items.start;
         i < entries->data.sequence.items.top; i++) {
        struct tune_entry e;
        if (!read_entry(r, yaml_document_get_node(r->doc, *i), &e))
            return false;
        if (list_put(out, &e) != GF_OK)
            return bad(r, NULL, "out of memory%s", "");
    }
    return true;
}

/* Reads the cache file into out (emptied first).  1: read; 0: there is
 * none; -1: its content is unusable, -2: the path cannot be read (a
 * directory, no permission), with why set ("FILE:LINE: ..."). */
static int read_file(const char *path, struct tc_list *out, char *why, size_t why_len)
{
    list_clear(out);
    struct stat st;
    int fd = gf_file_open_read(path, 0, &st);
    if (fd < 0) {
        if (fd == -1 && errno == ENOENT)
            return 0;
        bool dir = fd == GF_FILE_NOT_REGULAR && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
        snprintf(why, why_len, "%s: %s", path, dir ? "is a directory" : gf_file_open_error(fd));
        return -2;
    }
    if ((size_t)st.st_size > MAX_FILE) {
        close(fd);
        snprintf(why, why_len, "%s: larger than %u MiB", path, MAX_FILE >> 20);
        return -1;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        snprintf(why, why_len, "%s: %s", path, strerror(errno));
        close(fd);
        return -2;
    }
    yaml_parser_t p;
    yaml_document_t doc;
    struct reader r = {.path = path, .doc = &doc, .why = why, .why_len = why_len};
    int rc = -1;
    if (!yaml_parser_initialize(&p)) {
        snprintf(why, why_len, "%s: out of memory", path);
        fclose(f);
        return -1;
    }
    yaml_parser_set_input_file(&p, f);
    if (!yaml_parser_load(&p, &doc)) {
        snprintf(why, why_len, "%s:%zu: %s", path, p.problem_mark.line + 1,
                 p.problem ? p.problem : "YAML error");
    } else {
        rc = read_doc(&r, out) ? 1 : -1;
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&p);
    fclose(f);
    if (rc < 0)
        list_clear(out);
    return rc;
}

/* ---- the tuner object ------------------------------------------------------------------------ */

static void default_path(char *buf, size_t len)
{
    const char *env = getenv("GRAPHFUSE_TUNE_CACHE"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (env && *env)
        snprintf(buf, len, "%s", env);
    else if (xdg && *xdg)
        snprintf(buf, len, "%s/graphfuse/autotune.yaml", xdg);
    else
        snprintf(buf, len, "%s/.cache/graphfuse/autotune.yaml", home && *home ? home : ".");
}

enum gf_status gf_tuner_open(const char *path, struct gf_tuner **out)
{
    struct gf_tuner *t = calloc(1, sizeof(*t));
    *out = NULL;
    if (!t)
        return gf_error(GF_ERR_NOMEM, "out of memory (autotuner)");
    if (path && *path)
        snprintf(t->path, sizeof(t->path), "%s", path);
    else
        default_path(t->path, sizeof(t->path));
    char why[1024];
    int rc = read_file(t->path, &t->file, why, sizeof(why));
    t->bad_file = rc < 0;
    if (rc == -1)
        tc_warn(t, "%s; autotune cache ignored (replaced when new entries are saved, the old "
                "file kept as %s.bak)", why, t->path);
    else if (rc == -2)
        tc_warn(t, "%s; autotune cache not used", why);
    size_t stale = 0;
    const char *other = NULL;
    for (size_t i = 0; i < t->file.n; i++)
        if (strcmp(t->file.v[i].key.version, GF_VERSION) != 0) {
            stale++;
            other = t->file.v[i].key.version;
        }
    if (stale)
        tc_warn(t, "%s: %zu entr%s tuned by graphfuse %s%s (this is %s) ignored: stale; "
                "`graphfuse tune` tunes again", t->path, stale, stale == 1 ? "y" : "ies", other,
                stale > 1 ? " or another version" : "", GF_VERSION);
    *out = t;
    return GF_OK;
}

void gf_tuner_free(struct gf_tuner *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_warn; i++)
        free(t->warn[i]);
    free(t->warn);
    list_free(&t->file);
    list_free(&t->mine);
    free(t);
}

const char *gf_tuner_path(const struct gf_tuner *t)
{
    return t->path;
}

size_t gf_tuner_warning_count(const struct gf_tuner *t)
{
    return t->n_warn;
}

const char *gf_tuner_warning(const struct gf_tuner *t, size_t i)
{
    return i < t->n_warn ? t->warn[i] : NULL;
}

size_t gf_tuner_recorded(const struct gf_tuner *t)
{
    return t->mine.n;
}

/* ---- writing --------------------------------------------------------------------------------- */

static bool emit(yaml_emitter_t *em, yaml_event_t *ev, int ok)
{
    return ok && yaml_emitter_emit(em, ev);
}

static bool emit_str(yaml_emitter_t *em, const char *s)
{
    yaml_event_t ev;
    return emit(em, &ev, yaml_scalar_event_initialize(
                             &ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                             *s ? YAML_ANY_SCALAR_STYLE : YAML_SINGLE_QUOTED_SCALAR_STYLE));
}

static bool emit_pair(yaml_emitter_t *em, const char *k, const char *v)
{
    return emit_str(em, k) && emit_str(em, v);
}

static bool emit_num(yaml_emitter_t *em, const char *k, const char *fmt, double v)
{
    char buf[64];
    snprintf(buf, sizeof(buf), fmt, v);
    return emit_pair(em, k, buf);
}

static bool emit_entry(yaml_emitter_t *em, const struct tune_entry *e)
{
    yaml_event_t ev;
    bool ok = emit(em, &ev, yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                                YAML_BLOCK_MAPPING_STYLE));
    for (size_t f = 0; ok && f < N_KEY_FIELDS; f++) {
        if (strcmp(key_fields[f].name, "tuned") == 0)
            continue;
        ok = emit_pair(em, key_fields[f].name, (const char *)e + key_fields[f].off);
        if (ok && strcmp(key_fields[f].name, "impl_backend") == 0) {
            ok = emit_str(em, "config") &&
                 emit(em, &ev, yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                                   YAML_FLOW_MAPPING_STYLE));
            for (int i = 0; ok && i < e->n_knobs; i++)
                ok = emit_num(em, e->knob[i], "%.0f", e->value[i]);
            ok = ok && emit(em, &ev, yaml_mapping_end_event_initialize(&ev));
        }
    }
    ok = ok && emit_num(em, "default_ms", "%.6g", e->default_ms) &&
         emit_num(em, "best_ms", "%.6g", e->best_ms) &&
         emit_num(em, "tried", "%.0f", (double)e->n_tried) &&
         emit_num(em, "rejected", "%.0f", (double)e->n_rejected) &&
         emit_pair(em, "tuned", e->tuned);
    return ok && emit(em, &ev, yaml_mapping_end_event_initialize(&ev));
}

static bool emit_file(FILE *f, const struct tc_list *l)
{
    fputs("# graphfuse autotune cache: the fastest kernel and knob values found for\n"
          "# each (device, driver, graphfuse version, backend, op, dtype, shapes, attrs).\n"
          "# Written by `graphfuse tune` and `--autotune`; safe to edit or delete.\n", f);
    yaml_emitter_t em;
    yaml_event_t ev;
    if (!yaml_emitter_initialize(&em))
        return false;
    yaml_emitter_set_output_file(&em, f);
    yaml_emitter_set_unicode(&em, 1);
    yaml_emitter_set_width(&em, -1);
    char fmt[8];
    snprintf(fmt, sizeof(fmt), "%d", FORMAT);
    bool ok = emit(&em, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING)) &&
              emit(&em, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1)) &&
              emit(&em, &ev, yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                                 YAML_BLOCK_MAPPING_STYLE)) &&
              emit_pair(&em, "graphfuse", GF_VERSION) && emit_pair(&em, "format", fmt) &&
              emit_str(&em, "entries") &&
              emit(&em, &ev, yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                                  YAML_BLOCK_SEQUENCE_STYLE));
    for (size_t i = 0; ok && i < l->n; i++)
        ok = emit_entry(&em, &l->v[i]);
    ok = ok && emit(&em, &ev, yaml_sequence_end_event_initialize(&ev)) &&
         emit(&em, &ev, yaml_mapping_end_event_initialize(&ev)) &&
         emit(&em, &ev, yaml_document_end_event_initialize(&ev, 1)) &&
         emit(&em, &ev, yaml_stream_end_event_initialize(&ev)) && yaml_emitter_flush(&em);
    yaml_emitter_delete(&em);
    return ok;
}

/* mkdir -p of the folder holding path. */
static void make_parent(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return;
    *slash = 0;
    for (char *s = dir + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(dir, 0755);
            *s = '/';
        }
    mkdir(dir, 0755);
}

/* Writes l to path atomically: PATH.tmp.XXXXXX, fsync, rename, fsync of
 * the folder; a damaged file being replaced is kept as PATH.bak. */
static enum gf_status write_atomic(const char *path, const struct tc_list *l, bool keep_bak)
{
    char *tmp = NULL, bak[4200];
    snprintf(bak, sizeof(bak), "%s.bak", path);
    /* created exclusively: a planted file or symlink at the name is never
     * written through */
    int fd = gf_file_create_temp(path, &tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        enum gf_status st = gf_error(GF_ERR_IO, "%s: cannot write the autotune cache: %s",
                                     path, strerror(errno));
        if (fd >= 0)
            close(fd);
        gf_file_temp_discard(tmp);
        free(tmp);
        return st;
    }
    bool ok = emit_file(f, l) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (ok && keep_bak && rename(path, bak) != 0 && errno != ENOENT)
        ok = false;
    if (!ok || rename(tmp, path) != 0) {
        int err = errno;
        gf_file_temp_discard(tmp);
        free(tmp);
        return gf_error(GF_ERR_IO, "%s: cannot write the autotune cache: %s", path,
                        strerror(err));
    }
    gf_file_temp_done(tmp);
    free(tmp);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return GF_OK;
}

enum gf_status gf_tuner_save(struct gf_tuner *t)
{
    struct stat sb;
    if (!t->dirty)
        return GF_OK;
    if (stat(t->path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return gf_error(GF_ERR_IO, "%s: cannot write the autotune cache: is a directory",
                        t->path);
    make_parent(t->path);
    char lock[4200], why[1024];
    snprintf(lock, sizeof(lock), "%s.lock", t->path);
    int fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return gf_error(GF_ERR_IO, "%s: cannot lock the autotune cache: %s", lock,
                        strerror(errno));
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            close(fd);
            return gf_error(GF_ERR_IO, "%s: cannot lock the autotune cache: %s", lock,
                            strerror(errno));
        }
    /* what other processes wrote since we read it, with our entries merged in */
    struct tc_list cur = {0};
    int rc = read_file(t->path, &cur, why, sizeof(why));
    enum gf_status st = GF_OK;
    if (rc == -1 && !t->bad_file)
        tc_warn(t, "%s; replaced by a fresh autotune cache, the old file kept as %s.bak", why,
                t->path);
    for (size_t i = 0; i < t->mine.n && st == GF_OK; i++)
        st = list_put(&cur, &t->mine.v[i]);
    if (st == GF_OK)
        st = write_atomic(t->path, &cur, rc == -1);
    flock(fd, LOCK_UN);
    close(fd);
    if (st != GF_OK) {
        list_free(&cur);
        return st;
    }
    list_free(&t->file);
    t->file = cur;
    t->bad_file = false;
    t->dirty = false;
    return GF_OK;
}
