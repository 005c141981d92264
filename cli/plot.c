/*
 * plot.c — the loss curve of a training log as a picture:
 *
 *     graphfuse plot LOG.csv -o FILE.png [--title TEXT]
 *     graphfuse train ... --plot FILE.png     (the run's own rows, at the end)
 *
 * LOG.csv is `train --log`'s file (step,loss,grad_norm,lr,ms,tokens_per_s
 * and, with fp16 loss scaling, loss_scale,skipped).  The drawing is
 * gnuplot's (Debian's gnuplot-nox: a well-kept plotting program with PNG
 * and SVG output, one small package, no display needed): the loss on the
 * left axis, the learning rate dashed on the right.  FILE.svg gives SVG,
 * anything else PNG.  The picture is written to a temporary file beside
 * FILE and renamed at the end: no partial file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#define LOG_HEADER "step,loss,"

/* Whether the file at path is a train log with at least one row: the
 * reason in why when not. */
static bool train_log(const char *path, char *why, size_t n)
{
    int fd = gf_file_open_read(path, 0, NULL); /* a FIFO must not hang the open */
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        snprintf(why, n, "cannot open: %s", gf_file_open_error(fd));
        if (fd >= 0)
            close(fd);
        return false;
    }
    char line[512];
    bool ok = fgets(line, sizeof(line), f) && strncmp(line, LOG_HEADER, strlen(LOG_HEADER)) == 0;
    if (!ok)
        snprintf(why, n, "not a train log (its first line is not \"step,loss,...\")");
    else if (!fgets(line, sizeof(line), f) && (ok = false, true))
        snprintf(why, n, "the log has no step yet");
    fclose(f);
    return ok;
}

/* A path gnuplot reads in single quotes: no quote, no line break. */
static bool quotable(const char *s)
{
    return !strpbrk(s, "'\n\r");
}

static bool has_gnuplot(void)
{
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

int cli_plot_log(const char *csv, const char *out, const char *title)
{
    char why[256];
    if (!train_log(csv, why, sizeof(why))) {
        fprintf(stderr, "graphfuse: plot: %s: %s\n", csv, why);
        return EXIT_INPUT;
    }
    const char *bad = !quotable(csv) ? csv : !quotable(out) ? out : title && !quotable(title) ? title : NULL;
    if (bad) {
        fprintf(stderr, "graphfuse: plot: '%s': quotes and line breaks are not supported\n", bad);
        return EXIT_INPUT;
    }
    if (!has_gnuplot()) {
        fprintf(stderr, "graphfuse: plot: %s: gnuplot is not installed (Debian: apt-get install "
                "gnuplot-nox)\n", out);
        return EXIT_UNSUPPORTED;
    }
    size_t len = strlen(out) + 16;
    char *tmp = NULL;
    int fd = gf_file_create_temp(out, &tmp); /* exclusive, the replaced file's mode */
    if (fd < 0) {
        fprintf(stderr, "graphfuse: plot: %s: cannot create file: %s\n", out, strerror(errno));
        return EXIT_INPUT;
    }
    close(fd);
    size_t ol = strlen(out);
    bool svg = ol > 4 && strcmp(out + ol - 4, ".svg") == 0;
    /* gnuplot's messages (warnings on a flat curve too) kept, shown on failure */
    char *glog = malloc(len + 8), *cmd = malloc(2 * len + 64);
    FILE *g = NULL;
    if (glog && cmd) {
        snprintf(glog, len + 8, "%s.log", tmp);
        snprintf(cmd, 2 * len + 64, "gnuplot >'%s' 2>&1", glog);
        g = popen(cmd, "w");
    }
    int rc = g ? 0 : EXIT_INTERNAL;
    if (g) {
        fprintf(g, "set terminal %s size 900,540 noenhanced\n", svg ? "svg" : "pngcairo");
        fprintf(g, "set output '%s'\n", tmp);
        fprintf(g, "set datafile separator ','\n");
        fprintf(g, "set title '%s'\n", title ? title : csv);
        fprintf(g, "set xlabel 'step'\nset ylabel 'loss'\nset y2label 'learning rate'\n");
        fprintf(g, "set ytics nomirror\nset y2tics\nset grid\nset key top right\n");
        fprintf(g, "plot '%s' skip 1 using 1:2 with lines lw 2 title 'loss', "
                "'' skip 1 using 1:4 axes x1y2 with lines dt 2 title 'lr'\n", csv);
        fprintf(g, "set output\n");
        int status = pclose(g);
        if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            rc = EXIT_INTERNAL;
    }
    FILE *chk = rc == 0 ? fopen(tmp, "rb") : NULL;
    long size = -1;
    if (chk) {
        fseek(chk, 0, SEEK_END);
        size = ftell(chk);
        fclose(chk);
    }
    if (rc == 0 && size > 0 && rename(tmp, out) == 0) {
        gf_file_temp_done(tmp);
        unlink(glog);
        free(glog);
        free(cmd);
        free(tmp);
        return 0;
    }
    fprintf(stderr, "graphfuse: plot: %s: gnuplot did not write the picture", out);
    FILE *lg = glog ? fopen(glog, "r") : NULL;
    char line[256];
    if (lg && fgets(line, sizeof(line), lg)) /* its first message */
        fprintf(stderr, ": %s", line);
    else
        fputc('\n', stderr);
    if (lg)
        fclose(lg);
    if (glog)
        unlink(glog);
    gf_file_temp_discard(tmp);
    free(glog);
    free(cmd);
    free(tmp);
    return rc ? rc : EXIT_INTERNAL;
}

int cmd_plot(int argc, char **argv)
{
    const char *csv = NULL, *out = NULL, *title = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        bool missing = false;
        if ((v = cli_opt_value(argc, argv, &i, "-o", &missing)) ||
            (v = cli_opt_value(argc, argv, &i, "--output", &missing)))
            out = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--title", &missing)))
            title = v;
        else if (missing)
            return cli_usage("plot", "%s needs a value", a);
        else if (a[0] == '-' && a[1])
            return cli_usage("plot", "unknown option '%s'", a);
        else if (csv)
            return cli_usage("plot", "more than one log given ('%s')", a);
        else
            csv = a;
    }
    if (!csv)
        return cli_usage("plot", "no log given (a `train --log` CSV file)");
    if (!out)
        return cli_usage("plot", "no output given (-o FILE.png or FILE.svg)");
    return cli_plot_log(csv, out, title);
}
