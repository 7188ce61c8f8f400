/* SPDX-License-Identifier: Apache-2.0 */
/* The on-update command: fork, exec /bin/sh -c CMD with the step in its environment, wait with a deadline; it dies with the node. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* pipe2, O_NOFOLLOW */
#endif
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
#include "node/sync/stale_hook.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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
    char path[STALE_HOOK_PATH_MAX], line[96];
    stale_hook_path(state_dir, path);
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
    char id[33], id_env[sizeof STALE_HOOK_ID_VAR + 33];
    new_hook_id(id);
    snprintf(id_env, sizeof id_env, STALE_HOOK_ID_VAR "%s", id);
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
        char path[STALE_HOOK_PATH_MAX];
        stale_hook_path(state_dir, path);
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
