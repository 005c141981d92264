/*
 * fuzz_util.h — what the libFuzzer harnesses of tests/fuzz/ share: a
 * per-process temporary file for the readers that take a path.
 */
#ifndef GF_FUZZ_UTIL_H
#define GF_FUZZ_UTIL_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char fz_path[4096];

static void fz_remove_temp(void)
{
    unlink(fz_path);
}

/* $TMPDIR/gf-fuzz-PID.SUFFIX, removed at exit (one per process). */
static const char *fz_temp_path(const char *suffix)
{
    if (!fz_path[0]) {
        const char *dir = getenv("TMPDIR");
        snprintf(fz_path, sizeof(fz_path), "%s/gf-fuzz-%ld.%s", dir && *dir ? dir : "/tmp",
                 (long)getpid(), suffix);
        atexit(fz_remove_temp);
    }
    return fz_path;
}

/* Writes the input to `path`, replacing it; false on failure (skip the input). */
static int fz_write(const char *path, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return 0;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) {
            close(fd);
            return 0;
        }
        done += (size_t)n;
    }
    return close(fd) == 0;
}

#endif
