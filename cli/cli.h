/* cli.h — what the subcommands share: exit codes, messages, option values. */
#ifndef GF_CLI_H
#define GF_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gf_graph.h"
#include "gf_passes.h"

/* 0 success, 1 a failed check, 2 bad usage or input, 3 unsupported, 4 bug. */
enum { EXIT_CHECK = 1, EXIT_INPUT = 2, EXIT_UNSUPPORTED = 3, EXIT_INTERNAL = 4 };

/* The exit code for a library status. */
int cli_exit_code(enum gf_status st);
/* Prints the library's message (one line) and returns the exit code of st. */
int cli_fail(enum gf_status st);
/* Prints "graphfuse: [CMD: ]<fmt, args> (see graphfuse [CMD] --help)" and
 * returns EXIT_INPUT; cmd may be NULL. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The one option syntax of every subcommand: an option with a value takes
 * it as "--opt VALUE" or "--opt=VALUE".  When argv[*i] is option `name`,
 * returns its value and moves *i onto the argument it used; else NULL, and
 * *missing is set when argv[*i] is `name` with no value after it. */
const char *cli_opt_value(int argc, char **argv, int *i, const char *name, bool *missing);
/* For parsers that look options up in tables: the name of option `arg`
 * ("--opt" of "--opt=VALUE") into name[cap], and the value after '=', else
 * NULL.  A name too long for cap is cut (and so matches no option). */
const char *cli_opt_split(const char *arg, char *name, size_t cap);
/* The loss curve of a `train --log` CSV drawn into out (.svg: SVG, else
 * PNG) by gnuplot, written whole or not at all (cli/plot.c); title NULL:
 * the log's name.  Returns 0 or an exit code, the message printed. */
int cli_plot_log(const char *csv, const char *out, const char *title);
/* Whether `arg` asks for help (-h, --help). */
bool cli_is_help(const char *arg);

/* The help texts (cli/help.c): `graphfuse --help`'s usage, and a command's
 * synopsis and options (false for an unknown command). */
void cli_print_usage(FILE *f);
bool cli_print_command_help(const char *cmd);
/* "512", "64K", "1.5M", "2G" -> bytes; false when malformed, not finite,
 * under one byte or over SIZE_MAX. */
bool cli_parse_size(const char *s, size_t *out);

/* A symbolic dimension's size given on the command line (--dim seq=256). */
struct cli_dim {
    char name[64];
    int64_t size;
};
/* "NAME=SIZE" with SIZE a whole number >= 1; false when malformed. */
bool cli_parse_dim(const char *s, struct cli_dim *out);
/* The size given for symbolic dimension `name`, else `fallback`. */
int64_t cli_dim_size(const struct cli_dim *dims, int n, const char *name, int64_t fallback);

/* How run and tune make a session's inputs (cli/inputs.c). */
#define CLI_MAX_INPUTS 256
struct cli_inputs {
    const char *specs[64]; /* --input NAME=FILE.pb */
    int n_specs;
    bool random;           /* inputs without a file get random values, else are missing */
    struct cli_dim dims[64];
    int n_dims;
    int64_t dim_default;   /* size of a symbolic dim no --dim names; < 0: an error */
};
struct gf_session;
/* in[gf_session_input_count(s)] from the files and, for the others, random
 * values of the declared dtype and shape (the same for run and tune, so
 * both plan alike).  0, else the exit code after printing one message. */
int cli_make_inputs(struct gf_model *m, struct gf_session *s, const char *path,
                    const struct cli_inputs *a, struct gf_tensor **in);

/* run, bench and compare's input options at argv[*i] (--input / -i
 * NAME=FILE.pb, --random-inputs, --dim NAME=SIZE) into a, moving *i onto
 * the last argument used: 1 when it was one, 0 when not, or an exit code
 * (>= 2) after a usage message naming the option. */
int cli_input_option(const char *cmd, int argc, char **argv, int *i, struct cli_inputs *a);

/* The tolerances of test and compare: |got - want| <= atol + rtol * |want|. */
#define CLI_DEFAULT_RTOL 1e-3
#define CLI_DEFAULT_ATOL 1e-7
/* --rtol R / --atol A at argv[*i] (a number >= 0), as cli_input_option. */
int cli_tolerance_option(const char *cmd, int argc, char **argv, int *i, double *rtol,
                         double *atol);

/* The session's options shared by run, test, bench and compare at argv[*i]
 * (--backend, --device, --threads, --precision, --profile, ...), as
 * cli_input_option (cli/graphfuse.c). */
struct gf_exec_opts;
int cli_exec_option(const char *cmd, int argc, char **argv, int *i, struct gf_exec_opts *o,
                    enum gf_precision *prec);
/* --precision: the autocast pass, before fusion; errors name path. */
enum gf_status cli_apply_precision(struct gf_model *m, const char *path, enum gf_precision p);
/* Cleanup then fusion, in memory (optimize, run --fuse, test --fuse). */
enum gf_status cli_optimize_model(struct gf_model *m, const char *path,
                                  const struct gf_fuse_opts *fo, struct gf_fuse_report *rep,
                                  struct gf_cleanup_stats *cs);
/* The test-layout files "DIR/PREFIX_K.pb" (K = 0, 1, ...) into t[cap]:
 * how many; *st says whether one failed to load. */
size_t cli_load_set(struct gf_model *m, const char *dir, const char *prefix,
                    struct gf_tensor **t, size_t cap, enum gf_status *st);

/* Loads path, applies --precision and (fuse) cleanup and fusion, opens a
 * session with o: 0, else the exit code after one message (cli/bench.c). */
struct gf_session;
int cli_open_model(const char *path, enum gf_precision prec, bool fuse,
                   const struct gf_exec_opts *o, struct gf_model **m, struct gf_session **s);

/* Fusion for graphfuse's own executor (run/test/tune --fuse): the default
 * patterns plus the opt-in ones its kernels run (attention). */
extern const struct gf_fuse_opts cli_run_fuse_opts;

/* train --list-params: every float initializer, its shape, the ops that
 * read it and whether it is trained or why not (cli/params.c). */
struct gf_trainer;
void cli_list_params(const struct gf_trainer *t, const char *freeze, const char *trainable);
/* The lines train prints about its parameter set: float initializers left
 * as constants, and a warning per parameter the exporter may have merged. */
void cli_param_notes(const struct gf_trainer *t);

#endif /* GF_CLI_H */
