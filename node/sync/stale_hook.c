/* SPDX-License-Identifier: Apache-2.0 */
/* A state directory's record of a running on-update command: its name, and the reaping of what a dead node's command left running. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* memmem, O_NOFOLLOW */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/sync/stale_hook.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void stale_hook_path(const char *state_dir, char out[STALE_HOOK_PATH_MAX])
{
    snprintf(out, STALE_HOOK_PATH_MAX, "%.4096s/" STALE_HOOK_FILE, state_dir);
}

/* Whether process PID is alive (not a zombie) and carries MARK in its environment; *pgrp its group. */
static int carries(long pid, const char *mark, long *pgrp)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *rp = strrchr(buf, ')');   /* the command name may hold spaces and parentheses */
    char state;
    long ppid;
    if (!rp || sscanf(rp + 1, " %c %ld %ld", &state, &ppid, pgrp) != 3 || state == 'Z' || state == 'X')
        return 0;
    snprintf(path, sizeof path, "/proc/%ld/environ", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    /* Read in pieces that overlap by the mark's length, so it is found across a boundary. */
    size_t ml = strlen(mark), have = 0;
    char env[8192];
    int found = 0;
    for (;;) {
        ssize_t r = read(fd, env + have, sizeof env - have);
        if (r <= 0)
            break;
        have += (size_t)r;
        if (memmem(env, have, mark, ml)) {
            found = 1;
            break;
        }
        if (have > ml) {
            memmove(env, env + have - ml, ml);
            have = ml;
        }
    }
    close(fd);
    return found;
}

int stale_hook_reap(const char *state_dir)
{
    char path[STALE_HOOK_PATH_MAX], line[128];
    stale_hook_path(state_dir, path);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : pulse_fail_errno(PULSE_ERR_IO, "cannot open %s", path);
    ssize_t len = read(fd, line, sizeof line - 1);
    close(fd);
    long pgid = 0;
    char id[40] = "";
    if (len > 0) {
        line[len] = '\0';
        if (sscanf(line, "%ld %32[0-9a-f]", &pgid, id) != 2 || strlen(id) != 32)
            pgid = 0;
    }
    if (pgid > 1) {
        char mark[sizeof STALE_HOOK_ID_VAR + 33];
        snprintf(mark, sizeof mark, STALE_HOOK_ID_VAR "%s", id);
        /* Every live process of that run: its group (killed whole, the group recorded is only
         * trusted when a member carries the run's id) and any that left it. Until none is left
         * (zombies excepted: they read nothing), or a process stuck in the kernel outlasts this. */
        uint64_t deadline = now_ms() + 30000;
        for (;;) {
            int left = 0;
            DIR *d = opendir("/proc");
            if (!d)
                return pulse_fail_errno(PULSE_ERR_IO, "cannot list /proc to find the hook of %s", path);
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                char *end;
                long pid = strtol(e->d_name, &end, 10);
                long pgrp = 0;
                if (*end || pid <= 1 || pid == (long)getpid() || !carries(pid, mark, &pgrp))
                    continue;
                left++;
                if (pgrp == pgid)
                    kill(-(pid_t)pgid, SIGKILL);
                kill((pid_t)pid, SIGKILL);
            }
            closedir(d);
            if (!left)
                break;
            if (now_ms() >= deadline)
                return pulse_fail(PULSE_ERR_IO, "the on-update command of a previous node (group %ld, %s) "
                                  "is still running after SIGKILL", pgid, path);
            struct timespec ts = { 0, 10 * 1000000L };
            nanosleep(&ts, NULL);
        }
    }
    if (unlink(path) != 0 && errno != ENOENT)
        return pulse_fail_errno(PULSE_ERR_IO, "cannot remove %s", path);
    return 0;
}
