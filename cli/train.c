/*
 * graphfuse train — the training command, a thin front over the trainer
 * of executor/gf_exec.h.  Everything that can be wrong with the options,
 * the model, the data or the checkpoint is found before the first step,
 * so bad input leaves no file behind (exit 2); outputs are written
 * atomically (the model, checkpoints) or opened only once training starts
 * (the log, flushed after every row).  Exit codes as in graphfuse.c; a
 * NaN/Inf stops training with exit 1 (a failed check).  SIGINT / SIGTERM
 * finish the step in progress, write the checkpoint and -o, and exit 130;
 * a second one exits at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "gf_exec.h"
#include "gf_graph.h"

int cmd_train(int argc, char **argv);

struct train_args {
    const char *model, *data, *tokens, *out, *log, *ckpt, *resume;
    const char *safetensors; /* --save-safetensors: the parameters by PyTorch name */
    const char *precision;   /* --precision: the trainer's option */
    const char *dump_graph;  /* --dump-graph: the training graph, written once */
    const char *plot;        /* --plot: the loss curve at the end (cli/plot.c) */
    char plot_log[64];       /* --plot without --log: the rows' temporary file */
    struct gf_trainer_opts to;
    struct gf_token_opts tk;
    int64_t ckpt_every;
    bool list_params;
    char ckpt_buf[4096];
};



/* ---- option values ------------------------------------------------------------ */

static bool to_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool to_int64(const char *s, int64_t lo, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo)
        return false;
    *out = v;
    return true;
}


static const char *const flags[] = {"--nesterov", "--fuse", "--no-fuse", "--no-tie",
                                    "--list-params", "--profile", "--autotune",
                                    "--no-cuda-graph"};

static bool is_flag(const char *a)
{
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (strcmp(a, flags[i]) == 0)
            return true;
    return false;
}

/* Sets the option of flag `a` (one of flags[]). */
static void flag_option(const char *a, struct train_args *t)
{
    if (strcmp(a, "--nesterov") == 0)
        t->to.optim.nesterov = true;
    else if (strcmp(a, "--fuse") == 0 || strcmp(a, "--no-fuse") == 0)
        t->to.fuse = a[2] == 'f';
    else if (strcmp(a, "--no-tie") == 0)
        t->to.no_tie = true;
    else if (strcmp(a, "--list-params") == 0)
        t->list_params = true;
    else if (strcmp(a, "--autotune") == 0)
        t->to.exec.autotune = true;
    else if (strcmp(a, "--no-cuda-graph") == 0)
        t->to.exec.no_cuda_graph = true;
    else
        t->to.exec.profile = true;
}

/* Options whose value is a string. */
static bool string_option(const char *a, const char *v, struct train_args *t)
{
    static const struct { const char *name; size_t off; } opts[] = {
        {"--data", offsetof(struct train_args, data)},
        {"--tokens", offsetof(struct train_args, tokens)},
        {"-o", offsetof(struct train_args, out)},
        {"--output", offsetof(struct train_args, out)},
        {"--log", offsetof(struct train_args, log)},
        {"--checkpoint", offsetof(struct train_args, ckpt)},
        {"--resume", offsetof(struct train_args, resume)},
        {"--save-safetensors", offsetof(struct train_args, safetensors)},
        {"--precision", offsetof(struct train_args, precision)},
        {"--dump-graph", offsetof(struct train_args, dump_graph)},
        {"--plot", offsetof(struct train_args, plot)},
    };
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
        if (strcmp(a, opts[i].name) == 0) {
            *(const char **)((char *)t + opts[i].off) = v;
            return true;
        }
    if (strcmp(a, "--loss") == 0)
        t->to.loss = v;
    else if (strcmp(a, "--freeze") == 0)
        t->to.freeze = v;
    else if (strcmp(a, "--trainable") == 0)
        t->to.trainable = v;
    else if (strcmp(a, "--untie") == 0)
        t->to.untie = v;
    else if (strcmp(a, "--disable") == 0)
        t->to.disable = v;
    else if (strcmp(a, "--backend") == 0)
        t->to.exec.backend = v;
    else if (strcmp(a, "--device") == 0)
        t->to.exec.device = v;
    else if (strcmp(a, "--tune-cache") == 0)
        t->to.exec.tune_cache = v;
    else
        return false;
    return true;
}

/* Options whose value is a real number. */
static double *real_option(const char *a, struct train_args *t)
{
    struct gf_optim_opts *o = &t->to.optim;
    static const char *names[] = {"--lr", "--momentum", "--dampening", "--beta1", "--beta2",
                                  "--eps", "--weight-decay", "--clip-grad-norm", "--min-lr",
                                  "--loss-scale"};
    double *dst[] = {&o->lr, &o->momentum, &o->dampening, &o->beta1, &o->beta2, &o->eps,
                     &o->weight_decay, &t->to.clip_grad_norm, &t->to.min_lr,
                     &t->to.loss_scale};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(a, names[i]) == 0)
            return dst[i];
    return NULL;
}

/* Options whose value is a whole number: its minimum in *lo. */
static int64_t *int_option(const char *a, struct train_args *t, int64_t *lo)
{
    static const char *names[] = {"--steps", "--warmup", "--batch", "--seq",
                                  "--checkpoint-every", "--token-bytes", "--loss-scale-window"};
    static const int64_t mins[] = {0, 0, 1, 1, 1, 2, 1};
    int64_t *dst[] = {&t->to.steps, &t->to.warmup, &t->tk.batch, &t->tk.seq, &t->ckpt_every,
                      NULL, &t->to.loss_scale_window};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(a, names[i]) == 0) {
            *lo = mins[i];
            return dst[i];
        }
    return NULL;
}

/* Options with a value of their own kind; returns 0, or an exit code. */
static int other_option(const char *a, const char *v, struct train_args *t, bool *known)
{
    int64_t n;
    *known = true;
    if (strcmp(a, "--accumulate") == 0) {
        if (!to_int64(v, 1, &n) || n > INT_MAX)
            return cli_usage("train", "--accumulate: bad count '%s' (1 or more)", v);
        t->to.accumulate = (int)n;
    } else if (strcmp(a, "--seed") == 0) {
        if (!to_int64(v, 0, &n))
            return cli_usage("train", "--seed: bad seed '%s' (a whole number >= 0)", v);
        t->tk.seed = (uint64_t)n;
    } else if (strcmp(a, "--threads") == 0) {
        if (!to_int64(v, 1, &n) || n > 1024)
            return cli_usage("train", "--threads: bad thread count '%s' (1 or more)", v);
        t->to.exec.n_threads = (int)n;
    } else if (strcmp(a, "--max-memory") == 0) {
        if (!cli_parse_size(v, &t->to.exec.max_memory))
            return cli_usage("train", "--max-memory: bad memory size '%s' "
                             "(a finite size of 1 byte or more, e.g. 512M)", v);
    } else if (strcmp(a, "--schedule") == 0) {
        if (strcmp(v, "constant") == 0)
            t->to.schedule = GF_LR_CONSTANT;
        else if (strcmp(v, "cosine") == 0)
            t->to.schedule = GF_LR_COSINE;
        else
            return cli_usage("train", "--schedule: unknown schedule '%s' (constant or cosine)", v);
    } else if (strcmp(a, "--token-bytes") == 0) {
        if (!to_int64(v, 2, &n) || (n != 2 && n != 4))
            return cli_usage("train", "--token-bytes: bad value '%s' (2 or 4)", v);
        t->tk.token_bytes = (int)n;
    } else {
        *known = strcmp(a, "--optimizer") == 0; /* read first, by parse_args */
    }
    return 0;
}

/* One option with a value; returns 0, or an exit code. */
static int value_option(const char *a, const char *v, struct train_args *t, bool *known)
{
    int64_t lo, n;
    double *r;
    int64_t *ip;
    *known = true;
    if (string_option(a, v, t))
        return 0;
    if ((r = real_option(a, t)))
        return to_double(v, r) ? 0 : cli_usage("train", "%s: bad number '%s'", a, v);
    if ((ip = int_option(a, t, &lo))) {
        if (!to_int64(v, lo, &n))
            return cli_usage("train", "%s: bad value '%s' (a whole number >= %lld)", a, v,
                             (long long)lo);
        *ip = n;
        return 0;
    }
    return other_option(a, v, t, known);
}

/* --optimizer first: it decides the defaults the other options change. */
static int pick_optimizer(int argc, char **argv, struct train_args *t)
{
    enum gf_optim_kind kind = GF_OPTIM_SGD;
    for (int i = 0; i < argc; i++) {
        bool missing = false;
        const char *v = cli_opt_value(argc, argv, &i, "--optimizer", &missing);
        if (missing)
            return cli_usage("train", "--optimizer needs a value");
        if (v && !gf_optim_parse(v, &kind))
            return cli_usage("train", "--optimizer: unknown optimizer '%s' (sgd or adamw)", v);
    }
    gf_trainer_opts_init(&t->to, kind);
    t->to.steps = 100;
    t->to.fuse = true; /* fused forward and backward; --no-fuse for the graph as exported */
    return 0;
}

static int parse_args(int argc, char **argv, struct train_args *t)
{
    int rc = pick_optimizer(argc, argv, t);
    for (int i = 0; rc == 0 && i < argc; i++) {
        const char *a = argv[i];
        char name[64];
        const char *v = cli_opt_split(a, name, sizeof(name)); /* --name=VALUE */
        bool known;
        if (a[0] != '-' || !a[1]) {
            if (t->model)
                return cli_usage("train", "more than one model given ('%s')", a);
            t->model = a;
        } else if (is_flag(name)) {
            if (v)
                return cli_usage("train", "%s takes no value", name);
            flag_option(name, t);
        } else if (!v && i + 1 == argc) {
            return cli_usage("train", "%s needs a value", a);
        } else if ((rc = value_option(name, v ? v : argv[++i], t, &known)) == 0 && !known) {
            return cli_usage("train", "unknown option '%s'", a);
        }
    }
    return rc;
}

/* Consistency of the options taken together. */
static int check_args(struct train_args *t)
{
    if (!t->model)
        return cli_usage("train", "no model given");
    if (!t->data == !t->tokens && !(t->list_params && !t->data && !t->tokens))
        return cli_usage("train", "give the training data: --data DIR or --tokens FILE");
    if (t->tokens && (!t->tk.batch || !t->tk.seq))
        return cli_usage("train", "--tokens needs --batch B and --seq T");
    if (!t->tokens && (t->tk.batch || t->tk.seq || t->tk.token_bytes))
        return cli_usage("train", "--batch, --seq and --token-bytes go with --tokens");
    if (t->ckpt_every && !t->ckpt && !t->out)
        return cli_usage("train", "--checkpoint-every needs --checkpoint FILE (or -o OUT)");
    if (t->ckpt_every && !t->ckpt) {
        size_t n = strlen(t->out);
        if (n > 5 && strcmp(t->out + n - 5, ".onnx") == 0)
            n -= 5;
        snprintf(t->ckpt_buf, sizeof(t->ckpt_buf), "%.*s.ckpt.onnx", (int)n, t->out);
        t->ckpt = t->ckpt_buf;
    }
    if (t->to.optim.nesterov && t->to.optim.kind != GF_OPTIM_SGD)
        return cli_usage("train", "--nesterov goes with --optimizer sgd");
    return 0;
}

/* What --log may be: a regular file, or a character device (/dev/null,
 * /dev/full); never a FIFO, whose open or writes would block. */
static bool log_file_ok(mode_t mode)
{
    return S_ISREG(mode) || S_ISCHR(mode);
}

/* Opens the log without blocking (O_NONBLOCK: a FIFO without a reader
 * fails with ENXIO instead of waiting) and only if log_file_ok; "r+"
 * (append) or "w" (truncate) as fopen's.  NULL on failure: errno set, or
 * *not_regular. */
static FILE *open_log_file(const char *path, bool append, bool *not_regular)
{
    *not_regular = false;
    int fd = open(path, (append ? O_RDWR : O_WRONLY | O_CREAT) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                  0666);
    if (fd < 0) {
        *not_regular = errno == ENXIO;
        return NULL;
    }
    struct stat st;
    int e = 0;
    if (fstat(fd, &st) != 0)
        e = errno;
    else if (!log_file_ok(st.st_mode))
        *not_regular = true;
    else {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        if (!append && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0)
            e = errno;
    }
    FILE *f = e || *not_regular ? NULL : fdopen(fd, append ? "r+" : "w");
    if (!f) {
        if (!e && !*not_regular)
            e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

/* The folder of an output file must exist and be writable before training
 * starts, so that an hour of training does not end in "cannot write". */
static int check_writable(const char *path, const char *what)
{
    if (!path)
        return 0;
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
             slash ? path : ".");
    if (access(dir, W_OK) != 0) {
        fprintf(stderr, "graphfuse: train: %s %s: cannot write into '%s': %s\n", what, path,
                dir, strerror(errno));
        return EXIT_INPUT;
    }
    struct stat st; /* the log is written in place: a FIFO would block, a folder fail late */
    if (strcmp(what, "--log") == 0 && stat(path, &st) == 0 && !log_file_ok(st.st_mode)) {
        fprintf(stderr, "graphfuse: train: %s %s: not a regular file\n", what, path);
        return EXIT_INPUT;
    }
    return 0;
}

/* ---- the run -------------------------------------------------------------------- */

struct run {
    struct gf_model *m;
    struct gf_trainer *t;
    struct gf_data *d;
    FILE *log;
    bool bar;         /* progress bar on stderr: stdout is a terminal */
    double t0;        /* when this run's first step started (monotonic seconds) */
    int64_t first;    /* the step it started at (> 0 after --resume) */
    bool interrupted; /* SIGINT / SIGTERM stopped the loop after a whole step */
    int signal;       /* which one */
    int log_err;      /* errno of the first failed --log write (a full disk), else 0 */
};

/* ---- interruption: SIGINT / SIGTERM end training after the current step ---------- */

enum { EXIT_INTERRUPTED = 130 }; /* 128 + SIGINT, as a shell reports Ctrl-C */

static volatile sig_atomic_t stop_signal;

/* The first signal asks the loop to stop; a second one means "now". */
static void on_stop_signal(int sig)
{
    if (stop_signal) {
        gf_file_temp_cleanup(); /* a save in progress leaves no temporary file */
        _exit(EXIT_INTERRUPTED);
    }
    stop_signal = sig;
}

struct saved_handlers {
    struct sigaction intr, term;
};

/* SA_RESTART: a write to a pipe or the log must not fail with EINTR. */
static void catch_stop_signals(struct saved_handlers *old)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    stop_signal = 0;
    sigaction(SIGINT, &sa, &old->intr);
    sigaction(SIGTERM, &sa, &old->term);
}

static void restore_stop_signals(const struct saved_handlers *old)
{
    sigaction(SIGINT, &old->intr, NULL);
    sigaction(SIGTERM, &old->term, NULL);
}

static void print_setup(const struct train_args *a, const struct run *r)
{
    size_t n = gf_trainer_param_count(r->t), elems = 0, tied = 0;
    struct gf_param_info p;
    for (size_t i = 0; i < n; i++) {
        gf_trainer_get_param(r->t, i, &p);
        elems += p.tied_to ? 0 : p.nelem;
        tied += p.tied_to != NULL;
    }
    printf("train: %s: loss '%s', %zu tensors (%zu values) trained\n", a->model,
           gf_trainer_loss_name(r->t), n - tied, elems);
    for (size_t i = 0; i < n; i++) {
        gf_trainer_get_param(r->t, i, &p);
        if (p.tied_to)
            printf("tied: '%s' is a copy of '%s'%s: one parameter\n", p.name, p.tied_to,
                   p.transposed ? " (transposed)" : "");
    }
    cli_param_notes(r->t);
    printf("data: %s\n", gf_data_describe(r->d));
    const struct gf_trainer_opts *o = &a->to;
    if (o->optim.kind == GF_OPTIM_ADAMW)
        printf("optimizer: adamw lr %g betas (%g, %g) eps %g weight_decay %g", o->optim.lr,
               o->optim.beta1, o->optim.beta2, o->optim.eps, o->optim.weight_decay);
    else
        printf("optimizer: sgd lr %g momentum %g dampening %g%s weight_decay %g", o->optim.lr,
               o->optim.momentum, o->optim.dampening, o->optim.nesterov ? " nesterov" : "",
               o->optim.weight_decay);
    printf("; schedule %s, warmup %lld; clip %s; %d micro-batch%s per step; %s\n",
           o->schedule == GF_LR_COSINE ? "cosine" : "constant", (long long)o->warmup,
           o->clip_grad_norm > 0 ? "on" : "off", o->accumulate, o->accumulate > 1 ? "es" : "",
           o->fuse && !gf_trainer_fuse_note(r->t) ? "fused" : "not fused");
    if (gf_trainer_fuse_note(r->t))
        printf("fuse: left out, training unfused: %s\n", gf_trainer_fuse_note(r->t));
    if (a->to.clip_grad_norm > 0)
        printf("clip: global gradient norm %g\n", a->to.clip_grad_norm);
    if (a->to.precision != GF_PRECISION_FP32)
        printf("precision: %s (the trainer's copy of the model; -o and checkpoints keep "
               "fp32)\n", gf_precision_name(a->to.precision));
    if (a->to.precision == GF_PRECISION_FP16)
        printf("loss scaling: initial scale %g, doubled after %lld good steps, halved and the "
               "step skipped when the gradient is not finite\n",
               a->to.loss_scale > 0 ? a->to.loss_scale : 65536.0,
               (long long)(a->to.loss_scale_window > 0 ? a->to.loss_scale_window : 2000));
}

/* --save-safetensors needs parameters with PyTorch names: found before
 * training, not after it. */
static int check_torch_names(const struct train_args *a, const struct run *r)
{
    struct gf_weights *w;
    enum gf_status st = gf_weights_map(r->m, &w);
    gf_weights_free(w);
    if (st != GF_OK) {
        fprintf(stderr, "graphfuse: train: --save-safetensors %s: %s: %s\n", a->safetensors,
                a->model, gf_last_error());
        return EXIT_INPUT;
    }
    return 0;
}

/* The trained parameters under their PyTorch names (cli/weights.c). */
static int save_safetensors(const struct train_args *a, const struct run *r)
{
    struct gf_model *m = NULL;
    struct gf_weights *w = NULL;
    size_t bytes = 0;
    enum gf_status st = gf_trainer_export(r->t, &m);
    if (st == GF_OK)
        st = gf_weights_map(m, &w);
    if (st == GF_OK)
        st = gf_weights_save_safetensors(w, a->safetensors, &bytes);
    if (st == GF_OK)
        printf("wrote %s: %zu tensors by PyTorch name, %zu bytes (%zu float initializer%s "
               "holding no parameter left out)\n", a->safetensors, gf_weights_count(w), bytes,
               gf_weights_skipped_count(w), gf_weights_skipped_count(w) == 1 ? "" : "s");
    gf_weights_free(w);
    gf_model_free(m);
    return st == GF_OK ? 0 : cli_fail(st);
}

static int setup(struct train_args *a, struct run *r)
{
    enum gf_precision prec = GF_PRECISION_FP32;
    if (a->precision && !gf_precision_parse(a->precision, &prec))
        return cli_usage("train", "--precision: unknown precision '%s' (fp32, tf32, bf16 or fp16)",
                         a->precision);
    a->to.precision = prec; /* the trainer's copy only: -o keeps the fp32 graph */
    enum gf_status st = gf_model_load(a->model, NULL, &r->m);
    if (st != GF_OK)
        return cli_fail(st);
    if ((st = gf_trainer_new(r->m, &a->to, &r->t)) != GF_OK) {
        gf_error_prefix(a->model);
        return cli_fail(st);
    }
    if (a->dump_graph) {
        const char *path = a->dump_graph;
        st = gf_model_dump_file(gf_trainer_model(r->t), gf_dump_format_of_path(path), path);
        if (st != GF_OK)
            return cli_fail(st);
    }
    if (a->list_params) { /* the list, and no training */
        cli_list_params(r->t, a->to.freeze, a->to.trainable);
        return -1;
    }
    if (a->data)
        st = gf_data_open_dir(r->t, a->data, &r->d);
    else
        st = gf_data_open_tokens(r->t, a->tokens, &a->tk, &r->d);
    if (st == GF_OK && a->resume)
        st = gf_trainer_load_checkpoint(r->t, r->d, a->resume);
    if (st != GF_OK)
        return cli_fail(st);
    int rc = check_writable(a->out, "-o");
    if (rc == 0)
        rc = check_writable(a->log, "--log");
    if (rc == 0)
        rc = check_writable(a->safetensors, "--save-safetensors");
    if (rc == 0 && a->safetensors)
        rc = check_torch_names(a, r);
    if (rc == 0)
        rc = check_writable(a->ckpt, "--checkpoint");
    if (rc == 0)
        print_setup(a, r);
    if (rc == 0 && a->resume)
        printf("resumed: %s at step %lld\n", a->resume, (long long)gf_trainer_get_step(r->t));
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds as h:mm:ss, or m:ss under an hour. */
static const char *clock_text(double sec, char *buf, size_t n)
{
    long long t = sec > 0 && sec < 1e9 ? (long long)(sec + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, n, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%lld:%02lld", t / 60, t % 60);
    return buf;
}

/* The bar, the loss, the time since this run's first step and the time
 * left at this run's pace so far. */
static void progress(const struct run *r, int64_t done, int64_t total, double loss)
{
    if (!r->bar)
        return;
    const int width = 30;
    int fill = total > 0 ? (int)(width * done / total) : width;
    double el = now_s() - r->t0;
    int64_t ran = done - r->first;
    char a[32], b[32];
    fprintf(stderr, "\r[%.*s%*s] %lld/%lld loss %.4f  %s elapsed, ETA %s ", fill,
            "##############################", width - fill, "", (long long)done,
            (long long)total, loss, clock_text(el, a, sizeof(a)),
            ran > 0 ? clock_text(el / (double)ran * (double)(total - done), b, sizeof(b)) : "?");
    fflush(stderr);
}

static void clear_progress(const struct run *r)
{
    if (r->bar)
        fprintf(stderr, "\r\033[K");
}

static void report_step(struct run *r, const struct gf_train_stats *s, int64_t total)
{
    double tps = s->ms > 0 ? (double)s->tokens / (s->ms / 1000.0) : 0.0;
    clear_progress(r);
    printf("step %5lld/%lld  loss %.6f  grad_norm %.4f  lr %.3e  %.1f ms  %.0f tok/s",
           (long long)s->step + 1, (long long)total, s->loss, s->grad_norm, s->lr, s->ms, tps);
    if (s->loss_scale > 0) /* fp16: GradScaler's scale, the steps skipped so far */
        printf("  scale %g  skipped %lld%s", s->loss_scale, (long long)s->n_skipped,
               s->skipped ? " (this step: gradient not finite)" : "");
    putchar('\n');
    fflush(stdout);
    if (r->log) { /* flushed: a killed run keeps every row it reported */
        fprintf(r->log, "%lld,%.9g,%.9g,%.9g,%.3f,%.1f", (long long)s->step, s->loss,
                s->grad_norm, s->lr, s->ms, tps);
        if (s->loss_scale > 0)
            fprintf(r->log, ",%.9g,%lld", s->loss_scale, (long long)s->n_skipped);
        fputc('\n', r->log);
        if ((fflush(r->log) != 0 || ferror(r->log)) && !r->log_err)
            r->log_err = errno ? errno : EIO;
    }
    progress(r, s->step + 1, total, s->loss);
}

/* With --resume, the rows of an existing log from step `start` on (a run
 * killed after its last checkpoint wrote them) are cut off, so that the
 * resumed rows follow without repeating a step.  Leaves f at its end and
 * returns the rows cut, or -1 on a failure (errno). */
static long trim_log(FILE *f, int64_t start)
{
    char line[512];
    long keep = 0, dropped = 0;
    while (fgets(line, sizeof(line), f)) {
        char *end;
        long long step = strtoll(line, &end, 10);
        if (end != line && *end == ',' && step >= start)
            dropped++;
        else if (dropped == 0)
            keep += (long)strlen(line);
    }
    if (ferror(f) || fflush(f) != 0 || (dropped && ftruncate(fileno(f), keep) != 0) ||
        fseek(f, 0, SEEK_END) != 0)
        return -1;
    if (keep > 0) { /* a last line cut short gets its newline */
        int c = fseek(f, -1, SEEK_END) == 0 ? fgetc(f) : '\n';
        fseek(f, 0, SEEK_END);
        if (c != '\n')
            fputc('\n', f);
    }
    return dropped;
}

/* The log is opened after the first step went well: bad input leaves none.
 * A new run starts it afresh; --resume appends to it (the header only if
 * it is empty). */
static enum gf_status open_log(const char *path, bool append, int64_t start, bool scaled,
                               struct run *r)
{
    long dropped = 0;
    bool not_regular = false;
    errno = ENOENT;
    if (append && (r->log = open_log_file(path, true, &not_regular)))
        dropped = trim_log(r->log, start);
    else if (!not_regular && errno == ENOENT)
        r->log = open_log_file(path, false, &not_regular);
    if (!r->log || dropped < 0) {
        clear_progress(r);
        fprintf(stderr, "graphfuse: train: --log %s: %s\n", path,
                not_regular ? "not a regular file" : strerror(errno));
        return GF_ERR_IO;
    }
    if (dropped > 0) {
        clear_progress(r);
        printf("log: %s: %ld row%s from step %lld on dropped (written after the checkpoint)\n",
               path, dropped, dropped > 1 ? "s" : "", (long long)start);
    }
    if (ftell(r->log) == 0)
        fputs(scaled ? "step,loss,grad_norm,lr,ms,tokens_per_s,loss_scale,skipped\n"
                     : "step,loss,grad_norm,lr,ms,tokens_per_s\n", r->log);
    errno = 0;
    if (fflush(r->log) != 0 || ferror(r->log)) {
        clear_progress(r);
        fprintf(stderr, "graphfuse: train: --log %s: write failed: %s\n", path,
                strerror(errno ? errno : EIO));
        return GF_ERR_IO;
    }
    return GF_OK;
}

/* The steps; returns an exit code.  A stop signal ends the loop after the
 * step in progress (r->interrupted). */
static int train_loop(struct train_args *a, struct run *r)
{
    struct gf_train_stats s;
    double first = NAN, last = NAN, total_ms = 0;
    int64_t start = gf_trainer_get_step(r->t), done = 0;
    r->t0 = now_s();
    r->first = start;
    for (int64_t i = start; i < a->to.steps; i++, done++) {
        if (stop_signal) { /* checked before a step: a signal during the last one is late */
            r->interrupted = true;
            r->signal = stop_signal;
            break;
        }
        enum gf_status st = gf_trainer_step(r->t, r->d, &s);
        if (st != GF_OK) {
            clear_progress(r);
            int rc = cli_fail(st);
            return s.diverged ? EXIT_CHECK : rc;
        }
        if (!r->log && a->log && /* after a good step */
            (st = open_log(a->log, a->resume != NULL, start,
                                   a->to.precision == GF_PRECISION_FP16, r)) != GF_OK)
            return EXIT_INPUT;
        errno = 0;
        report_step(r, &s, a->to.steps);
        if (r->log_err) { /* a full disk: stop now, not after every step lost its row */
            clear_progress(r);
            fprintf(stderr, "graphfuse: train: --log %s: write failed: %s\n", a->log,
                    strerror(r->log_err));
            return EXIT_INPUT;
        }
        first = i == start ? s.loss : first;
        last = s.loss;
        total_ms += s.ms;
        if (a->ckpt_every && (s.step + 1) % a->ckpt_every == 0 &&
            (st = gf_trainer_save_checkpoint(r->t, r->d, a->ckpt)) != GF_OK) {
            clear_progress(r);
            return cli_fail(st);
        }
    }
    clear_progress(r);
    if (done)
        printf("trained %lld steps in %.2f s: loss %.6f -> %.6f\n", (long long)done,
               total_ms / 1000.0, first, last);
    else
        printf("nothing to train: at step %lld of %lld\n", (long long)start,
               (long long)a->to.steps);
    return 0;
}

/* After a stop signal: the checkpoint (if asked for) so that --resume goes
 * on from here, then -o as at the end of training (finish). */
static int save_interrupted(struct train_args *a, struct run *r)
{
    enum gf_status st;
    if (a->ckpt && (st = gf_trainer_save_checkpoint(r->t, r->d, a->ckpt)) != GF_OK)
        return cli_fail(st);
    return 0;
}

static void print_interrupted(const struct train_args *a, const struct run *r)
{
    char saved[4 * 4200] = "";
    size_t n = 0;
    const char *what[] = {"checkpoint ", "model ", "safetensors ", "log "};
    const char *path[] = {a->ckpt, a->out, a->safetensors, a->log};
    for (int i = 0; i < 4; i++)
        if (path[i] && n < sizeof(saved))
            n += (size_t)snprintf(saved + n, sizeof(saved) - n, "%s%s%s", n ? ", " : "",
                                  what[i], path[i]);
    printf("train: interrupted by %s at step %lld of %lld: %s%s\n",
           r->signal == SIGTERM ? "SIGTERM" : "SIGINT", (long long)gf_trainer_get_step(r->t),
           (long long)a->to.steps, n ? "saved " : "nothing saved (no output option)", saved);
    fflush(stdout);
}

static int finish(struct train_args *a, struct run *r, int rc)
{
    if (rc == 0 && r->interrupted)
        rc = save_interrupted(a, r);
    if (r->log && fclose(r->log) != 0 && rc == 0) {
        fprintf(stderr, "graphfuse: train: --log %s: write failed: %s\n", a->log,
                strerror(errno));
        rc = EXIT_INPUT;
    }
    r->log = NULL;
    if (rc == 0)
        gf_trainer_print_backend(r->t, stdout);
    if (rc == 0 && a->to.exec.profile)
        gf_trainer_print_profile(r->t, stdout);
    enum gf_status st;
    if (rc == 0 && a->out && (st = gf_trainer_save(r->t, a->out)) != GF_OK)
        rc = cli_fail(st);
    else if (rc == 0 && a->out)
        printf("wrote %s\n", a->out);
    if (rc == 0 && a->safetensors)
        rc = save_safetensors(a, r);
    if (rc == 0 && r->interrupted) {
        print_interrupted(a, r);
        rc = EXIT_INTERRUPTED;
    }
    return rc;
}

int cmd_train(int argc, char **argv)
{
    struct train_args a;
    struct run r = {.bar = isatty(STDOUT_FILENO) == 1};
    struct saved_handlers old;
    memset(&a, 0, sizeof(a));
    int rc = parse_args(argc, argv, &a);
    if (rc == 0)
        rc = check_args(&a);
    if (rc == 0 && a.plot && !a.log) { /* the rows go to a temporary log */
        snprintf(a.plot_log, sizeof(a.plot_log), "/tmp/graphfuse-plot-XXXXXX");
        int fd = mkstemp(a.plot_log);
        if (fd < 0) {
            fprintf(stderr, "graphfuse: train: --plot: cannot create a temporary log: %s\n",
                    strerror(errno));
            rc = EXIT_INPUT;
        } else {
            close(fd);
            a.log = a.plot_log;
        }
    }
    if (rc == 0)
        rc = setup(&a, &r);
    if (rc == -1) { /* --list-params */
        gf_trainer_free(r.t);
        gf_model_free(r.m);
        return 0;
    }
    bool caught = rc == 0;
    if (caught) {
        catch_stop_signals(&old);
        rc = train_loop(&a, &r);
    }
    if (r.t)
        rc = finish(&a, &r, rc); /* a second signal while saving exits at once */
    if (caught)
        restore_stop_signals(&old);
    if (r.log)
        fclose(r.log);
    r.log = NULL;
    if (rc == 0 && a.plot) /* the picture of the rows written */
        rc = cli_plot_log(a.log, a.plot, a.model);
    if (a.plot_log[0])
        unlink(a.plot_log);
    gf_data_free(r.d);
    gf_trainer_free(r.t);
    gf_model_free(r.m);
    return rc;
}
