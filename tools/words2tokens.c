/*
 * words2tokens — turns a word list (one word per line, such as
 * /usr/share/dict/words) into a flat file of uint16 token ids for
 * `graphfuse train --tokens`, with the character table of the bundled
 * language models (models/README.md, "Tokenization"):
 *
 *     1 <bos> at the start, 5..30 'a'..'z', 2 '\n' after each word
 *
 * Only lowercase ASCII words are kept: proper nouns, possessives ("cat's")
 * and words with accents are skipped, so the model learns plain English
 * spelling.  The words are shuffled (seeded: the same file every time).
 * The output is written to a temporary file and renamed.
 *
 *     words2tokens [--seed S] WORDS OUT.u16
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { TOK_BOS = 1, TOK_NEWLINE = 2, TOK_A = 5 };

struct words {
    char **w;
    size_t n, cap, skipped, tokens;
};

/* Keeps a line that is a lowercase a-z word. */
static int keep(struct words *ws, char *line)
{
    size_t n = strcspn(line, "\r\n");
    line[n] = 0;
    bool ok = n > 0;
    for (size_t i = 0; i < n && ok; i++)
        ok = line[i] >= 'a' && line[i] <= 'z';
    if (!ok) {
        ws->skipped++;
        return 0;
    }
    if (ws->n == ws->cap) {
        size_t cap = ws->cap ? 2 * ws->cap : 1024;
        char **w = realloc(ws->w, cap * sizeof(*w));
        if (!w)
            return -1;
        ws->w = w;
        ws->cap = cap;
    }
    return (ws->w[ws->n++] = strdup(line)) ? 0 : -1;
}

static uint64_t next_random(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fisher-Yates: a sorted list would teach the model that a word starts
 * like the one before it. */
static void shuffle(struct words *ws, uint64_t seed)
{
    for (size_t i = ws->n; i > 1; i--) {
        size_t j = (size_t)(next_random(&seed) % i);
        char *x = ws->w[i - 1];
        ws->w[i - 1] = ws->w[j];
        ws->w[j] = x;
    }
}

static int put(FILE *f, uint16_t id, struct words *ws)
{
    unsigned char b[2] = {(unsigned char)(id & 0xff), (unsigned char)(id >> 8)};
    ws->tokens++;
    return fwrite(b, 1, 2, f) == 2 ? 0 : -1;
}

static int write_tokens(FILE *out, struct words *ws)
{
    if (put(out, TOK_BOS, ws) != 0)
        return -1;
    for (size_t k = 0; k < ws->n; k++) {
        for (const char *c = ws->w[k]; *c; c++)
            if (put(out, (uint16_t)(TOK_A + (*c - 'a')), ws) != 0)
                return -1;
        if (put(out, TOK_NEWLINE, ws) != 0)
            return -1;
    }
    return 0;
}

static int read_words(const char *path, struct words *ws)
{
    FILE *in = fopen(path, "r");
    char line[4096];
    if (!in) {
        fprintf(stderr, "words2tokens: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), in))
        rc = keep(ws, line);
    if (rc == 0 && ferror(in))
        rc = -1;
    fclose(in);
    if (rc != 0)
        fprintf(stderr, "words2tokens: %s: read failed\n", path);
    else if (ws->n == 0)
        fprintf(stderr, "words2tokens: %s: no lowercase word\n", path), rc = -1;
    return rc;
}

/* Writes to a temporary file in the target's folder, then renames. */
static int write_file(const char *path, struct words *ws)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    FILE *out = fd >= 0 && fchmod(fd, 0644) == 0 ? fdopen(fd, "wb") : NULL;
    int rc = out ? write_tokens(out, ws) : -1;
    if (out)
        rc |= fclose(out);
    else if (fd >= 0)
        close(fd);
    if (rc != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "words2tokens: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t seed = 1;
    int a = 1;
    if (argc == 5 && strcmp(argv[1], "--seed") == 0) {
        seed = strtoull(argv[2], NULL, 10);
        a = 3;
    }
    if (argc - a != 2) {
        fprintf(stderr, "usage: words2tokens [--seed S] WORDS OUT.u16\n");
        return 2;
    }
    struct words ws = {0};
    int rc = read_words(argv[a], &ws);
    if (rc == 0) {
        shuffle(&ws, seed);
        rc = write_file(argv[a + 1], &ws);
    }
    if (rc == 0)
        printf("words2tokens: %zu words kept (shuffled, seed %llu), %zu skipped (not "
               "lowercase a-z), %zu tokens -> %s\n", ws.n, (unsigned long long)seed,
               ws.skipped, ws.tokens, argv[a + 1]);
    for (size_t k = 0; k < ws.n; k++)
        free(ws.w[k]);
    free(ws.w);
    return rc == 0 ? 0 : 2;
}
