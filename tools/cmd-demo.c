/* SPDX-License-Identifier: Apache-2.0 */
/* pulse demo: a synthetic RL trainer writes checkpoints, a real trainer node publishes them to a file:// store and
 * two real follower nodes apply them; it prints what moved per step and checks every follower ends bit-identical. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fail.h"
#include "pulseweights/checkpoint.h"
#include "tools/cli.h"
#include "tools/synth/args.h"
#include "tools/synth/synth.h"
#include "tools/verbs.h"

extern char **environ;

static const char usage[] =
    "usage: pulse demo [--params 100M] [--steps 10] [--followers 2] [--dir DIR] [--seed S] [--threads N]\n"
    "\n"
    "The whole system on one machine, with the embedded file:// store (docs/demo.md):\n"
    "  1. a synthetic RL trainer (Llama-shaped, FP32 master, Adam at lr 3e-6) writes the BF16\n"
    "     checkpoints of its first STEPS steps;\n"
    "  2. `pulse node trainer` watches a directory and publishes each checkpoint the moment it\n"
    "     appears there (a keyframe first, then signed sparse patches);\n"
    "  3. FOLLOWERS `pulse node follow` processes poll the store and apply each step in place.\n"
    "The demo hands the checkpoints to the trainer node one at a time and prints per step: the\n"
    "fraction of BF16 values that changed, the bytes that moved against the dense checkpoint, the\n"
    "time from the checkpoint's appearance until every follower held it, and whether every\n"
    "follower's weights are bit-identical to the trainer's (state ids computed here). Exits 1 if\n"
    "any follower differs. Without --dir it works in a temporary directory that it removes.\n";

#define DEMO_RUN "demo"
#define DEMO_MAX_FOLLOWERS 8
#define DEMO_STEP_TIMEOUT_S 600.0   /* one step on a slow, loaded machine; a hang is an error */

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

struct node {
    char name[32];
    pid_t pid;           /* 0: not running */
    char log[PATH_MAX];
    char prom[PATH_MAX]; /* followers: the metrics file (pulse_held_step) */
    char weights[PATH_MAX];
    double reached;      /* seconds from release to holding the step */
};

struct demo {
    synth_model m;
    synth_opts o;
    uint64_t steps;
    unsigned nfollowers;
    const char *dir;
    char exe[PATH_MAX];
    char **staged;       /* staged/step-k.safetensors, written by the synthetic trainer */
    uint64_t *changed;
    struct node trainer, followers[DEMO_MAX_FOLLOWERS];
};

/* ---- child processes: the real CLI, the way a user runs it ---- */

/* Starts EXE ARGV with stdout and stderr appended to LOG and stdin from /dev/null. */
static int spawn_logged(pid_t *pid, const char *exe, char *const argv[], const char *log)
{
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa) != 0)
        return pulse_fail(PULSE_ERR_NOMEM, "spawn %s", argv[1]);
    int rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!rc)
        rc = posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (!rc)
        rc = posix_spawn(pid, exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) {
        errno = rc;
        return pulse_fail_errno(PULSE_ERR_IO, "start pulse %s", argv[1]);
    }
    return 0;
}

/* Runs a short child to completion; non-zero exit is an error naming its log. */
static int run_logged(const char *exe, char *const argv[], const char *log)
{
    pid_t pid;
    int err = spawn_logged(&pid, exe, argv, log), status = 0;
    if (err)
        return err;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return pulse_fail(PULSE_ERR_IO, "pulse %s failed (see %s)", argv[1], log);
    return 0;
}

/* True while the node runs; a node that exited is reaped and reported. */
static int node_alive(struct node *n)
{
    if (!n->pid)
        return 0;
    int status;
    if (waitpid(n->pid, &status, WNOHANG) == n->pid) {
        n->pid = 0;
        return 0;
    }
    return 1;
}

/* SIGTERM to every node still running (they finish their step and exit 0), SIGKILL after 30 s. */
static void stop_nodes(struct demo *d)
{
    struct node *all[DEMO_MAX_FOLLOWERS + 1];
    size_t n = 0;
    all[n++] = &d->trainer;
    for (unsigned i = 0; i < d->nfollowers; i++)
        all[n++] = &d->followers[i];
    for (size_t i = 0; i < n; i++)
        if (all[i]->pid)
            kill(all[i]->pid, SIGTERM);
    double end = pulse_monotonic_s() + 30;
    for (;;) {
        int running = 0;
        for (size_t i = 0; i < n; i++)
            running += node_alive(all[i]);
        if (!running)
            return;
        if (pulse_monotonic_s() > end)
            break;
        sleep_ms(20);
    }
    for (size_t i = 0; i < n; i++)
        if (all[i]->pid) {
            kill(all[i]->pid, SIGKILL);
            waitpid(all[i]->pid, NULL, 0);
            all[i]->pid = 0;
        }
}

/* ---- what the nodes did, read from outside ---- */

/* The follower's held step from its Prometheus metrics file; -1 while it holds none (or the file
 * is not there yet). The file is replaced atomically, so a read never sees half of it. */
static long long held_step(const struct node *f)
{
    FILE *fp = fopen(f->prom, "r");
    if (!fp)
        return -1;
    char line[256];
    long long step = -1;
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, "pulse_held_step %lld", &step) == 1)
            break;
    fclose(fp);
    return step;
}

static uint64_t tree_sum;
static int add_size(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)path, (void)ftw;
    if (type == FTW_F)
        tree_sum += (uint64_t)sb->st_size;
    return 0;
}

/* Bytes of the run's objects and records in the store: what a publish uploads and what each
 * follower downloads (heads are a few bytes, rewritten in place; not counted). */
static uint64_t store_bytes(const struct demo *d)
{
    static const char *const parts[] = { "objects", "records" };
    char path[PATH_MAX];
    tree_sum = 0;
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/store/%s/%s", d->dir, DEMO_RUN, parts[i]);
        nftw(path, add_size, 16, FTW_PHYS);
    }
    return tree_sum;
}

static int state_of(const char *path, int threads, uint8_t id[PULSE_STATE_ID_BYTES])
{
    pulse_ckpt *c = NULL;
    int err = pulse_ckpt_open(&c, path, PULSE_CKPT_READ);
    if (!err)
        err = pulse_ckpt_state_id(c, threads, id);
    pulse_ckpt_close(&c);
    return err;
}

/* Byte-for-byte equality of two files (the state ids say so too; this does not rely on them). */
static int same_file(const char *a, const char *b, int *same)
{
    static unsigned char x[1 << 20], y[1 << 20];
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int err = 0;
    *same = fa && fb;
    if (!fa || !fb)
        err = pulse_fail_errno(PULSE_ERR_IO, "open %s", fa ? b : a);
    while (!err && *same) {
        size_t na = fread(x, 1, sizeof x, fa), nb = fread(y, 1, sizeof y, fb);
        if (na != nb || memcmp(x, y, na))
            *same = 0;
        if (na < sizeof x)
            break;
    }
    if (!err && (ferror(fa) || ferror(fb)))
        err = pulse_fail_errno(PULSE_ERR_IO, "read %s or %s", a, b);
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return err;
}

static void hex16(const uint8_t *id, char out[17])
{
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", id[i]);
}

/* ---- the demo ---- */

static int start_nodes(struct demo *d)
{
    char store[PATH_MAX + 16], key[PATH_MAX], pub[PATH_MAX], state[PATH_MAX], watch[PATH_MAX];
    char threads[16], keyname[PATH_MAX];
    snprintf(store, sizeof store, "file://%s/store", d->dir);
    snprintf(keyname, sizeof keyname, "%s/trainer", d->dir);
    snprintf(key, sizeof key, "%s/trainer.key", d->dir);
    snprintf(pub, sizeof pub, "%s/trainer.pub", d->dir);
    snprintf(watch, sizeof watch, "%s/watch", d->dir);
    snprintf(threads, sizeof threads, "%d", d->o.threads > 0 ? d->o.threads : 0);
    snprintf(d->trainer.log, sizeof d->trainer.log, "%s/trainer.log", d->dir);
    if (mkdir(watch, 0777) != 0 && errno != EEXIST)
        return pulse_fail_errno(PULSE_ERR_IO, "mkdir %s", watch);

    char *keygen[] = { "pulse", "keygen", keyname, NULL };
    int err = run_logged(d->exe, keygen, d->trainer.log);
    if (err)
        return err;

    /* Scans every 20 ms (a file counts as finished once unchanged over two scans); a keyframe only
     * at step 0 and nothing deleted, so the store holds the run's whole history for the sums. */
    snprintf(state, sizeof state, "%s/trainer.state", d->dir);
    char *tr[24] = { "pulse", "node", "trainer", "--store", store, "--run", DEMO_RUN, "--key", key,
                     "--state", state, "--watch", watch, "--poll-ms", "20", "--keep-keyframes", "0",
                     "--log", "json", NULL };
    if (d->o.threads > 0) {
        size_t n = 19;
        tr[n++] = "--threads";
        tr[n++] = threads;
        tr[n] = NULL;
    }
    snprintf(d->trainer.name, sizeof d->trainer.name, "trainer");
    if ((err = spawn_logged(&d->trainer.pid, d->exe, tr, d->trainer.log)) != 0)
        return err;

    for (unsigned i = 0; i < d->nfollowers; i++) {
        struct node *f = &d->followers[i];
        char name[32];
        snprintf(name, sizeof name, "follower%u", i + 1);
        memcpy(f->name, name, sizeof name);
        snprintf(f->log, sizeof f->log, "%s/%s.log", d->dir, name);
        snprintf(f->prom, sizeof f->prom, "%s/%s.prom", d->dir, name);
        snprintf(f->weights, sizeof f->weights, "%s/%s.safetensors", d->dir, name);
        snprintf(state, sizeof state, "%s/%s.state", d->dir, name);
        char *fo[24] = { "pulse", "node", "follow", "--store", store, "--run", DEMO_RUN, "--trust", pub,
                         "--state", state, "--weights", f->weights, "--metrics-file", f->prom,
                         "--poll-ms", "20", "--log", "json", NULL };
        if (d->o.threads > 0) {
            size_t n = 19;
            fo[n++] = "--threads";
            fo[n++] = threads;
            fo[n] = NULL;
        }
        if ((err = spawn_logged(&f->pid, d->exe, fo, f->log)) != 0)
            return err;
    }
    return 0;
}

/* Hands step K to the trainer node (a rename: how a trainer marks a checkpoint finished), then
 * waits until every follower holds it. */
static int release_and_wait(struct demo *d, uint64_t k, double *all_s)
{
    char dst[PATH_MAX];
    snprintf(dst, sizeof dst, "%s/watch/%s", d->dir, strrchr(d->staged[k], '/') + 1);
    double t0 = pulse_monotonic_s();
    if (rename(d->staged[k], dst) != 0)
        return pulse_fail_errno(PULSE_ERR_IO, "rename %s", d->staged[k]);
    free(d->staged[k]);
    if (!(d->staged[k] = strdup(dst)))
        return pulse_fail(PULSE_ERR_NOMEM, "path");
    for (unsigned i = 0; i < d->nfollowers; i++)
        d->followers[i].reached = -1;
    for (;;) {
        unsigned done = 0;
        double t = pulse_monotonic_s() - t0;
        for (unsigned i = 0; i < d->nfollowers; i++) {
            struct node *f = &d->followers[i];
            if (f->reached < 0 && held_step(f) >= (long long)k)
                f->reached = t;
            done += f->reached >= 0;
        }
        if (done == d->nfollowers) {
            *all_s = t;
            return 0;
        }
        if (!node_alive(&d->trainer))
            return pulse_fail(PULSE_ERR_IO, "the trainer node exited (see %s)", d->trainer.log);
        for (unsigned i = 0; i < d->nfollowers; i++)
            if (d->followers[i].reached < 0 && !node_alive(&d->followers[i]))
                return pulse_fail(PULSE_ERR_IO, "%s exited (see %s)", d->followers[i].name,
                                  d->followers[i].log);
        if (t > DEMO_STEP_TIMEOUT_S)
            return pulse_fail(PULSE_ERR_IO, "step %llu did not reach every follower in %.0f s (logs in %s)",
                              (unsigned long long)k, DEMO_STEP_TIMEOUT_S, d->dir);
        sleep_ms(5);
    }
}

/* Every follower's weights against the trainer's checkpoint K: the state id computed here, and
 * the files byte for byte. */
static int compare_followers(struct demo *d, uint64_t k, int *identical, uint8_t want[PULSE_STATE_ID_BYTES])
{
    int err = state_of(d->staged[k], d->o.threads, want);
    *identical = !err;
    for (unsigned i = 0; i < d->nfollowers && !err; i++) {
        uint8_t got[PULSE_STATE_ID_BYTES];
        int same = 0;
        err = state_of(d->followers[i].weights, d->o.threads, got);
        if (!err)
            err = same_file(d->followers[i].weights, d->staged[k], &same);
        if (!err && (memcmp(got, want, sizeof got) || !same))
            *identical = 0;
    }
    return err;
}

static int run_demo(struct demo *d, int *all_identical)
{
    printf("pulse demo: a Llama-shaped model of %llu parameters (%u layers, hidden %u), %llu steps of Adam "
           "at lr %g, one trainer node and %u follower nodes on a file:// store in %s\n",
           (unsigned long long)d->m.params, d->m.layers, d->m.hidden, (unsigned long long)d->steps, d->o.lr,
           d->nfollowers, d->dir);
    fflush(stdout);
    double t0 = pulse_monotonic_s();
    int err = synth_run(&d->m, &d->o, d->steps, (const char *const *)d->staged, d->changed);
    if (err)
        return err;
    printf("synthetic trainer: wrote %llu BF16 checkpoints in %.1f s; now handing them to the trainer node one "
           "by one\n", (unsigned long long)d->steps + 1, pulse_monotonic_s() - t0);
    fflush(stdout);
    if ((err = start_nodes(d)) != 0)
        return err;

    uint64_t moved_prev = 0, moved_patches = 0, dense_patches = 0;
    double worst = 0, sum_s = 0;
    uint8_t want[PULSE_STATE_ID_BYTES];
    for (uint64_t k = 0; k <= d->steps && !err; k++) {
        double all_s = 0;
        int identical = 0;
        if ((err = release_and_wait(d, k, &all_s)) != 0)
            break;
        if ((err = compare_followers(d, k, &identical, want)) != 0)
            break;
        struct stat sb;
        uint64_t dense = stat(d->staged[k], &sb) == 0 ? (uint64_t)sb.st_size : 0;
        uint64_t total = store_bytes(d), moved = total - moved_prev;
        moved_prev = total;
        if (!identical)
            *all_identical = 0;
        char who[160] = "";
        size_t n = 0;
        for (unsigned i = 0; i < d->nfollowers && n < sizeof who; i++)
            n += (size_t)snprintf(who + n, sizeof who - n, "%s%.2f", i ? "/" : "", d->followers[i].reached);
        if (k == 0)
            printf("step %llu: keyframe (the whole model), moved %8.2f MB vs %8.2f MB dense (%5.1fx less), "
                   "every follower in %6.2f s (%s), bit-identical: %s\n",
                   (unsigned long long)k, (double)moved / 1e6, (double)dense / 1e6,
                   moved ? (double)dense / (double)moved : 0.0, all_s, who, identical ? "yes" : "NO");
        else
            printf("step %llu: %6.3f%% of BF16 values changed, moved %8.3f MB vs %8.2f MB dense (%5.1fx less), "
                   "every follower in %6.2f s (%s), bit-identical: %s\n",
                   (unsigned long long)k, 100.0 * (double)d->changed[k] / (double)d->m.params,
                   (double)moved / 1e6, (double)dense / 1e6, moved ? (double)dense / (double)moved : 0.0,
                   all_s, who, identical ? "yes" : "NO");
        fflush(stdout);
        if (k > 0) {
            moved_patches += moved;
            dense_patches += dense;
            sum_s += all_s;
            worst = all_s > worst ? all_s : worst;
        }
    }
    stop_nodes(d);
    if (err)
        return err;
    /* After the nodes stopped: the final weights once more, from the files as they are now. */
    int final_identical = 0;
    if ((err = compare_followers(d, d->steps, &final_identical, want)) != 0)
        return err;
    if (!final_identical)
        *all_identical = 0;
    char hex[17];
    hex16(want, hex);
    if (d->steps > 0)
        printf("patches: %.3f MB moved for %.2f MB of dense checkpoints (%.1fx less); time to every follower: "
               "mean %.2f s, worst %.2f s\n", (double)moved_patches / 1e6, (double)dense_patches / 1e6,
               moved_patches ? (double)dense_patches / (double)moved_patches : 0.0, sum_s / (double)d->steps, worst);
    printf("every follower's state id equals the trainer's (%s at step %llu): %s\n", hex,
           (unsigned long long)d->steps, final_identical ? "yes" : "NO");
    return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb, (void)type, (void)ftw;
    remove(path);
    return 0;
}

int cmd_demo(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return cli_finish_stdout("demo");
    }
    struct demo d = { .steps = 10, .nfollowers = 2 };
    synth_opts_default(&d.o);
    d.o.params = 100000000u;   /* a ~100M model, the size the codec targets are set at: ~1.5 min on 2 cores (docs/demo.md) */
    const char *v;
    for (int i = 1; i < argc; i++) {
        int r;
        uint64_t u;
        if ((r = synth_arg(argc, argv, &i, "--dir", &v)) != 0) {
            if (r < 0 || !*v)
                return cli_usage_error("demo", "--dir needs a directory");
            d.dir = v;
        } else if ((r = synth_arg(argc, argv, &i, "--steps", &v)) != 0) {
            if (r < 0 || cli_parse_u64(v, &d.steps) < 0 || d.steps < 1 || d.steps > 1000)
                return cli_usage_error("demo", "--steps needs a count 1..1000");
        } else if ((r = synth_arg(argc, argv, &i, "--followers", &v)) != 0) {
            if (r < 0 || cli_parse_u64(v, &u) < 0 || u < 1 || u > DEMO_MAX_FOLLOWERS)
                return cli_usage_error("demo", "--followers needs a count 1..%d", DEMO_MAX_FOLLOWERS);
            d.nfollowers = (unsigned)u;
        } else if ((r = synth_arg(argc, argv, &i, "--params", &v)) != 0) {
            if (r < 0 || synth_parse_count(v, &d.o.params) < 0)
                return cli_usage_error("demo", "--params needs a size such as 1M or 100M");
        } else if ((r = synth_arg(argc, argv, &i, "--seed", &v)) != 0) {
            if (r < 0 || cli_parse_u64(v, &d.o.seed) < 0)
                return cli_usage_error("demo", "--seed needs a non-negative integer");
        } else if ((r = synth_arg(argc, argv, &i, "--threads", &v)) != 0) {
            if (r < 0 || synth_parse_threads(v, &d.o.threads) < 0)
                return cli_usage_error("demo", "--threads needs a count 0..256 (0 = all cores)");
        } else {
            return cli_usage_error("demo", "unknown argument '%s'", argv[i]);
        }
    }
    ssize_t len = readlink("/proc/self/exe", d.exe, sizeof d.exe - 1);
    if (len <= 0 || (size_t)len >= sizeof d.exe - 1)
        return cli_fail("demo", pulse_fail_errno(PULSE_ERR_IO, "readlink /proc/self/exe"), "own executable");
    d.exe[len] = 0;
    int err = synth_model_init(&d.m, &d.o);
    if (err < 0)
        return cli_fail("demo", err, "model");

    /* The work directory must be absolute: it becomes a file:// URL. */
    static char dirbuf[PATH_MAX];
    int keep = d.dir != NULL;
    if (!keep) {
        const char *tmpdir = getenv("TMPDIR");
        snprintf(dirbuf, sizeof dirbuf, "%s/pulse-demo-XXXXXX", tmpdir && *tmpdir == '/' ? tmpdir : "/tmp");
        if (!mkdtemp(dirbuf))
            err = pulse_fail_errno(PULSE_ERR_IO, "mkdtemp %s", dirbuf);
    } else if (mkdir(d.dir, 0777) != 0 && errno != EEXIST) {
        err = pulse_fail_errno(PULSE_ERR_IO, "mkdir %s", d.dir);
    } else if (!realpath(d.dir, dirbuf)) {
        err = pulse_fail_errno(PULSE_ERR_IO, "realpath %s", d.dir);
    }
    if (err) {
        synth_model_free(&d.m);
        return cli_fail("demo", err, "work directory");
    }
    d.dir = dirbuf;

    char staged_dir[PATH_MAX + 16];
    snprintf(staged_dir, sizeof staged_dir, "%s/staged", d.dir);
    if (mkdir(staged_dir, 0777) != 0 && errno != EEXIST)
        err = pulse_fail_errno(PULSE_ERR_IO, "mkdir %s", staged_dir);
    d.staged = calloc((size_t)d.steps + 1, sizeof *d.staged);
    d.changed = calloc((size_t)d.steps + 1, sizeof *d.changed);
    if (!err && (!d.staged || !d.changed))
        err = pulse_fail(PULSE_ERR_NOMEM, "demo tables");
    size_t plen = strlen(staged_dir) + 40;
    for (uint64_t k = 0; k <= d.steps && !err; k++)
        if (!(d.staged[k] = malloc(plen)) || synth_step_path(d.staged[k], plen, staged_dir, k) < 0)
            err = pulse_fail(PULSE_ERR_NOMEM, "demo paths");

    int all_identical = 1, rc;
    if (!err)
        err = run_demo(&d, &all_identical);
    stop_nodes(&d);   /* a no-op when run_demo stopped them; on an error it must not leave them running */
    if (err) {
        rc = cli_fail("demo", err, "demo");
    } else {
        if (keep)
            printf("files kept in %s (store/, node logs *.log, follower weights)\n", d.dir);
        rc = cli_finish_stdout("demo");
        if (!all_identical) {
            fprintf(stderr, "pulse demo: a follower's weights differ from the trainer's checkpoint\n");
            rc = 1;
        }
    }
    if (!keep && !(err && getenv("PULSE_DEMO_KEEP_ON_ERROR")))
        nftw(d.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (d.staged)
        for (uint64_t k = 0; k <= d.steps; k++)
            free(d.staged[k]);
    free(d.staged);
    free(d.changed);
    synth_model_free(&d.m);
    return rc;
}
