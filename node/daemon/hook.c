/* SPDX-License-Identifier: Apache-2.0 */
/* The on-update command: fork, exec /bin/sh -c CMD with the step in its environment, wait with a deadline; it dies with the node. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* memmem, pipe2, O_NOFOLLOW */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/fail.h"
#include "node/daemon/hook.h"

#define HOOK_ID_VAR "PULSE_HOOK_ID="

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void record_path(const char *state_dir, char out[4200])
{
    snprintf(out, 4200, "%.4096s/hook.pgid", state_dir);
}

/* A fresh id for one hook run: marks every process it starts (they inherit the environment),
 * so that a later node finds them even when they left the group, and never kills a group whose
 * number was reused by something else. */
static void new_hook_id(char out[33])
{
    uint8_t b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        uint64_t x = now_ms() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)out;
        for (size_t i = 0; i < sizeof b; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
            b[i] = (uint8_t)(x >> 56);
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Writes "PGID ID\n" to STATE_DIR/hook.pgid. */
static int write_record(const char *state_dir, pid_t pgid, const char *id)
{
    char path[4200], line[96];
    record_path(state_dir, path);
    int n = snprintf(line, sizeof line, "%ld %s\n", (long)pgid, id);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int ok = write(fd, line, (size_t)n) == n;
    return close(fd) == 0 && ok ? 0 : -1;
}

int node_hook_run(const char *cmd, const char *const *env, size_t n, unsigned timeout_ms, const char *state_dir,
                  char *why, size_t cap)
{
    why[0] = '\0';
    char id[33], id_env[sizeof HOOK_ID_VAR + 33];
    new_hook_id(id);
    snprintf(id_env, sizeof id_env, HOOK_ID_VAR "%s", id);
    /* The child execs only once the parent has recorded its group (a "go" byte): a node killed
     * in between leaves no command running that the next node could not find. */
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) {
        snprintf(why, cap, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, cap, "fork: %s", strerror(errno));
        close(go[0]);
        close(go[1]);
        return -1;
    }
    if (pid == 0) {
        /* Its own group, so a timeout kills whatever the shell started too. */
        setpgid(0, 0);
        /* Killed with the node (kill -9 included): a restarted node rewrites the weights this
         * command may be reading. getppid after prctl: the node may have died just before. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        close(go[1]);
        char b = 0;
        ssize_t got;
        while ((got = read(go[0], &b, 1)) < 0 && errno == EINTR)
            ;
        if (got != 1 || b != 'g')
            _exit(127);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        for (size_t i = 0; i < n; i++)
            putenv((char *)env[i]);
        putenv(id_env);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(go[0]);
    setpgid(pid, pid);   /* also here: no race with the child's own call */
    int recorded = state_dir && write_record(state_dir, pid, id) == 0;
    if (state_dir && !recorded) {
        snprintf(why, cap, "cannot record the hook's group in %s/hook.pgid: %s", state_dir, strerror(errno));
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
    } else {
        while (write(go[1], "g", 1) < 0 && errno == EINTR)
            ;
    }
    close(go[1]);
    uint64_t deadline = timeout_ms ? now_ms() + timeout_ms : 0;
    int status = 0, timed_out = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            snprintf(why, cap, "waitpid: %s", strerror(errno));
            return -1;
        }
        if (deadline && now_ms() >= deadline) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            timed_out = 1;
            break;
        }
        struct timespec ts = { 0, 5 * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (recorded) {
        char path[4200];
        record_path(state_dir, path);
        unlink(path);
    }
    if (state_dir && !recorded)
        return -1;
    if (timed_out) {
        snprintf(why, cap, "timeout after %u ms", timeout_ms);
        return -1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFEXITED(status))
        snprintf(why, cap, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(why, cap, "signal %d", WTERMSIG(status));
    else
        snprintf(why, cap, "status %d", status);
    return -1;
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

int node_hook_reap_stale(const char *state_dir)
{
    char path[4200], line[128];
    record_path(state_dir, path);
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
        char mark[sizeof HOOK_ID_VAR + 33];
        snprintf(mark, sizeof mark, HOOK_ID_VAR "%s", id);
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
