/*
 * Files as every loader and saver opens them: reads that never block and
 * take regular files only, temporary files created exclusively with the
 * mode of the file they replace, and a registry of the temporary files in
 * progress that a signal handler can remove (gf_file_temp_cleanup).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gf_graph.h"

int gf_file_open_read(const char *path, int flags, struct stat *sb)
{
    /* O_NONBLOCK: opening a FIFO (or a device) for reading returns at once
     * instead of waiting for a writer; fstat then turns it away. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | flags);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        errno = 0;
        return GF_FILE_NOT_REGULAR;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (sb)
        *sb = st;
    return fd;
}

const char *gf_file_open_error(int rc)
{
    return rc == GF_FILE_NOT_REGULAR ? "not a regular file" : strerror(errno);
}

/* ---- temporary files in progress ---------------------------------------------------- */

#define N_SLOTS 16

/* state 0: free, 1: being filled or emptied, 2: a live path the handler removes */
static _Atomic int slot_state[N_SLOTS];
static char slot_path[N_SLOTS][PATH_MAX];

static void temp_register(const char *tmp)
{
    if (strlen(tmp) >= PATH_MAX)
        return;
    for (int i = 0; i < N_SLOTS; i++) {
        int free_ = 0;
        if (atomic_compare_exchange_strong(&slot_state[i], &free_, 1)) {
            memcpy(slot_path[i], tmp, strlen(tmp) + 1);
            atomic_store(&slot_state[i], 2);
            return;
        }
    }
    /* more than N_SLOTS saves at once: this one is not removed on a signal */
}

void gf_file_temp_done(const char *tmp)
{
    if (!tmp)
        return;
    for (int i = 0; i < N_SLOTS; i++) {
        int live = 2;
        if (strcmp(slot_path[i], tmp) == 0 &&
            atomic_compare_exchange_strong(&slot_state[i], &live, 1)) {
            slot_path[i][0] = 0;
            atomic_store(&slot_state[i], 0);
            return;
        }
    }
}

void gf_file_temp_cleanup(void)
{
    for (int i = 0; i < N_SLOTS; i++)
        if (atomic_load(&slot_state[i]) == 2)
            unlink(slot_path[i]); /* async-signal-safe */
}

int gf_file_create_temp(const char *path, char **tmp_out)
{
    *tmp_out = NULL;
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    /* mkstemp: O_CREAT | O_EXCL, so a planted file or symlink of that name
     * is never opened; mode 0600 until set below */
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        errno = e;
        return -1;
    }
    temp_register(tmp);
    struct stat sb;
    mode_t mode;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        mode = sb.st_mode & 07777; /* the file it replaces keeps its mode */
    } else {
        mode_t mask = umask(0);
        umask(mask);
        mode = 0666 & ~mask; /* the mode a plain create would give */
    }
    if (fchmod(fd, mode) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        gf_file_temp_done(tmp);
        free(tmp);
        errno = e;
        return -1;
    }
    *tmp_out = tmp;
    return fd;
}

void gf_file_temp_discard(char *tmp)
{
    if (!tmp)
        return;
    unlink(tmp);
    gf_file_temp_done(tmp);
}
