/*
 * graphfuse generate — samples words from a character-level language model
 * (such as the one `make demo` trains): each word starts from the
 * separator token alone; each step runs the model on the word so far and
 * samples the next token from softmax(logits[last] / temperature); the
 * next separator ends the word.  Token ids map to characters through
 * --chars: the character at position k is token k's; '\n' (written \n) is
 * the separator; a space marks an id never to sample (<pad>, <bos>, <unk>).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gf_exec.h"
#include "gf_graph.h"

int cmd_generate(int argc, char **argv);

/* The tokenization of models/README.md: 0 <pad>, 1 <bos>, 2 '\n', 3 <unk>,
 * 4 "'", 5..30 a..z (capitals and the apostrophe are not sampled). */
#define DEFAULT_CHARS "  \\n  abcdefghijklmnopqrstuvwxyz"
#define MAX_CONTEXT 64

struct gen {
    const char *model;
    char chars[512];
    size_t n_chars;
    int64_t words, max_len;
    double temperature;
    uint64_t rng;
};



/* Copies s with \n and \\ unescaped. */
static bool set_chars(struct gen *g, const char *s)
{
    size_t n = 0;
    for (; *s && n + 1 < sizeof(g->chars); s++) {
        if (s[0] == '\\' && (s[1] == 'n' || s[1] == '\\'))
            g->chars[n++] = *++s == 'n' ? '\n' : '\\';
        else
            g->chars[n++] = *s;
    }
    g->chars[n] = 0;
    g->n_chars = n;
    return !*s && memchr(g->chars, '\n', n) != NULL;
}

static bool number(const char *s, double lo, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v >= lo) || !isfinite(v))
        return false;
    *out = v;
    return true;
}

/* -n, --seed, --max-len, --temperature: a number into g. */
static int number_option(const char *name, const char *v, struct gen *g)
{
    bool temp = strcmp(name, "--temperature") == 0;
    double x;
    if (!number(v, temp ? 1e-6 : 0, &x))
        return cli_usage("generate", "%s: bad value '%s' (%s)", name, v,
                         temp ? "a number > 0" : "a whole number >= 0");
    if (strcmp(name, "-n") == 0)
        g->words = (int64_t)x;
    else if (strcmp(name, "--seed") == 0)
        g->rng = (uint64_t)x;
    else if (strcmp(name, "--max-len") == 0)
        g->max_len = (int64_t)x;
    else
        g->temperature = x;
    return 0;
}

static int parse_gen(int argc, char **argv, struct gen *g)
{
    static const char *const numbers[] = {"-n", "--seed", "--max-len", "--temperature"};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        bool missing = false;
        int rc = -1;
        if ((v = cli_opt_value(argc, argv, &i, "--chars", &missing))) {
            if (!set_chars(g, v))
                return cli_usage("generate", "--chars needs a separator \\n among its "
                                 "characters");
            continue;
        }
        for (size_t k = 0; rc < 0 && !missing && k < 4; k++)
            if ((v = cli_opt_value(argc, argv, &i, numbers[k], &missing)))
                rc = number_option(numbers[k], v, g);
        if (rc > 0)
            return rc;
        if (rc == 0)
            continue;
        if (missing)
            return cli_usage("generate", "%s needs a value", a);
        if (a[0] == '-' && a[1])
            return cli_usage("generate", "unknown option '%s'", a);
        if (g->model)
            return cli_usage("generate", "more than one model given ('%s')", a);
        g->model = a;
    }
    return g->model ? 0 : cli_usage("generate", "no model given");
}

static uint64_t next_random(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Samples from softmax(logits / T) over the ids --chars allows. */
static int64_t sample(struct gen *g, const float *logits, int64_t vocab)
{
    double mx = -INFINITY, sum = 0, p[4096];
    int64_t n = vocab < (int64_t)g->n_chars ? vocab : (int64_t)g->n_chars;
    for (int64_t k = 0; k < n && k < 4096; k++)
        if (g->chars[k] != ' ' && logits[k] > mx)
            mx = logits[k];
    for (int64_t k = 0; k < n && k < 4096; k++)
        sum += p[k] = g->chars[k] != ' ' ? exp((logits[k] - mx) / g->temperature) : 0;
    double u = (double)(next_random(&g->rng) >> 11) / 9007199254740992.0 * sum;
    for (int64_t k = 0; k < n && k < 4096; k++)
        if ((u -= p[k]) < 0 && p[k] > 0)
            return k;
    return (int64_t)(strchr(g->chars, '\n') - g->chars);
}

struct lm {
    struct gf_model *m, *arena;
    struct gf_session *s;
};

/* Feeds ctx[0..len) as a [1, len] tensor to every input; *row receives the
 * logits of the last position (a borrowed pointer). */
static enum gf_status run_context(struct lm *lm, const int64_t *ctx, int64_t len,
                                  const float **row, int64_t *vocab)
{
    size_t n_in = gf_session_input_count(lm->s), n_out;
    struct gf_tensor *in[16], **out;
    int64_t dims[2] = {1, len};
    if (n_in == 0 || n_in > 16)
        return gf_error(GF_ERR_UNSUPPORTED, "generate: the model takes %zu inputs", n_in);
    for (size_t i = 0; i < n_in; i++) {
        const struct gf_value *v = gf_session_input(lm->s, i);
        enum gf_dtype dt = v->type.dtype;
        if (dt != GF_INT64 && dt != GF_INT32)
            return gf_error(GF_ERR_UNSUPPORTED, "generate: input '%s' is %s, not token ids",
                            v->name, gf_dtype_name(dt));
        if (!(in[i] = gf_tensor_new(lm->arena, v->name, dt, 2, dims, NULL)))
            return gf_error(GF_ERR_NOMEM, "out of memory");
        for (int64_t k = 0; k < len; k++)
            if (dt == GF_INT64)
                ((int64_t *)in[i]->data)[k] = ctx[k];
            else
                ((int32_t *)in[i]->data)[k] = (int32_t)ctx[k];
    }
    enum gf_status st = gf_session_run(lm->s, n_in, in, &out, &n_out);
    for (size_t o = 0; st == GF_OK && o < n_out; o++) {
        const struct gf_tensor *t = out[o];
        if (t->dtype == GF_FLOAT && t->rank == 3 && t->dims[1] == len &&
            (strcmp(t->name, "logits") == 0 || o + 1 == n_out || !*row)) {
            *vocab = t->dims[2];
            *row = (const float *)t->data + (size_t)(len - 1) * (size_t)t->dims[2];
            if (strcmp(t->name, "logits") == 0)
                break;
        }
    }
    if (st == GF_OK && !*row)
        st = gf_error(GF_ERR_UNSUPPORTED, "generate: no float [batch, seq, vocab] output "
                      "(logits)");
    return st;
}

/* One word: tokens sampled after a separator until the next one (or
 * max_len letters); each word starts from the separator alone. */
static enum gf_status one_word(struct gen *g, struct lm *lm, int64_t sep, char *word)
{
    int64_t ctx[MAX_CONTEXT + 1] = {sep}, len = 1;
    for (;;) {
        const float *row = NULL;
        int64_t vocab = 0;
        enum gf_status st = run_context(lm, ctx, len, &row, &vocab);
        if (st != GF_OK)
            return st;
        int64_t id = len > g->max_len ? sep : sample(g, row, vocab);
        if (id == sep)
            break;
        word[len - 1] = g->chars[id];
        ctx[len++] = id;
    }
    word[len - 1] = 0;
    return GF_OK;
}

int cmd_generate(int argc, char **argv)
{
    struct gen g = {.words = 10, .max_len = 24, .temperature = 1.0, .rng = 1};
    set_chars(&g, DEFAULT_CHARS);
    int rc = parse_gen(argc, argv, &g);
    if (rc != 0)
        return rc;
    struct lm lm = {0};
    enum gf_status st = gf_model_load(g.model, NULL, &lm.m);
    if (st == GF_OK && !(lm.arena = gf_model_new(8, "generate")))
        st = gf_error(GF_ERR_NOMEM, "out of memory");
    if (st == GF_OK)
        st = gf_session_new(lm.m, NULL, &lm.s);
    int64_t sep = (int64_t)(strchr(g.chars, '\n') - g.chars);
    char word[MAX_CONTEXT + 1];
    if (g.max_len > MAX_CONTEXT - 1)
        g.max_len = MAX_CONTEXT - 1;
    for (int64_t w = 0; st == GF_OK && w < g.words; w++)
        if ((st = one_word(&g, &lm, sep, word)) == GF_OK)
            printf("%s\n", word);
    if (st != GF_OK) {
        gf_error_prefix(g.model);
        rc = cli_fail(st);
    }
    gf_session_free(lm.s);
    gf_model_free(lm.arena);
    gf_model_free(lm.m);
    return rc;
}
