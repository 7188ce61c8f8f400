/* SPDX-License-Identifier: Apache-2.0 */
/* Temporaries in a directory someone else can write: symlinks planted at the names the writers once used never lead a write outside. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "check.h"
#include "node/daemon/metrics.h"
#include "node/loco/loco_internal.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/keys.h"
#include "pulseweights/patch.h"
#include "pulseweights/sync.h"

#define VICTIM_TEXT "the victim's own bytes\n"

static char dir[64];

static const char *at(const char *name)
{
    static char buf[16][512];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* The bytes of a file (at most cap - 1, NUL-terminated), or -1. */
static long slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return (long)n;
}

static void make_victim(const char *path)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(VICTIM_TEXT, f);
        fclose(f);
    }
}

static int victim_intact(const char *path)
{
    char got[256];
    long n = slurp(path, got, sizeof got);
    int ok = n == (long)strlen(VICTIM_TEXT) && !strcmp(got, VICTIM_TEXT);
    if (!ok)
        fprintf(stderr, "victim %s was changed (%ld bytes now)\n", path, n);
    return ok;
}

/* A symlink at trap (a name a writer used to open blindly) pointing at the victim. */
static void plant(const char *trap, const char *victim)
{
    CHECK(symlink(victim, trap) == 0);
}

/* Entries of d whose name starts with prefix (temporaries left behind), the planted traps aside. */
static int leftovers(const char *d, const char *prefix)
{
    DIR *dd = opendir(d);
    int n = 0;
    struct dirent *e;
    while (dd && (e = readdir(dd))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)))
            continue;
        char p[1024];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        if (lstat(p, &sb) == 0 && !S_ISLNK(sb.st_mode)) {
            fprintf(stderr, "left behind: %s\n", p);
            n++;
        }
    }
    if (dd)
        closedir(dd);
    return n;
}

static void helper(void)
{
    char name[256];
    int fd = pulse_create_temp(at("h"), ".tmp.", 0600, name, sizeof name);
    CHECK(fd >= 0);
    CHECK(!strncmp(name, at("h.tmp."), strlen(at("h.tmp."))) && strlen(name) == strlen(at("h.tmp.XXXXXX")));
    struct stat sb;
    CHECK(fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0600);
    if (fd >= 0)
        close(fd);
    unlink(name);
    /* Too small a buffer, and a directory that does not exist: errors, nothing made. */
    char tiny[8];
    CHECK_ERR(pulse_create_temp(at("h"), ".tmp.", 0600, tiny, sizeof tiny), PULSE_ERR_LIMIT);
    CHECK_ERR(pulse_create_temp(at("nodir/h"), ".tmp.", 0600, name, sizeof name), PULSE_ERR_IO);
    CHECK(strstr(pulse_last_error(), "nodir/h.tmp.XXXXXX") != NULL);
    CHECK_OK(pulse_create_temp_dir(at("hd"), ".", 0700, name, sizeof name));
    CHECK(lstat(name, &sb) == 0 && S_ISDIR(sb.st_mode));
    rmdir(name);
}

static void replace_file(void)
{
    make_victim(at("victim-replace"));
    plant(at("plain.tmp"), at("victim-replace"));
    for (int durable = 0; durable < 2; durable++) {
        CHECK_OK(pulse_replace_file(at("plain"), at("plain.tmp"), "fresh", 5, durable));
        char got[64];
        CHECK(slurp(at("plain"), got, sizeof got) == 5 && !strcmp(got, "fresh"));
    }
    CHECK(victim_intact(at("victim-replace")));
    CHECK_EQ_INT(leftovers(dir, "plain.tmp"), 0);
}

static void metrics_file(void)
{
    make_victim(at("victim-metrics"));
    plant(at("metrics.prom.tmp"), at("victim-metrics"));
    CHECK_OK(node_metrics_write_file(at("metrics.prom"), "pulse_steps_applied_total 3\n"));
    char got[128];
    CHECK(slurp(at("metrics.prom"), got, sizeof got) > 0 && strstr(got, "applied_total 3"));
    CHECK(victim_intact(at("victim-metrics")));
    CHECK_EQ_INT(leftovers(dir, "metrics.prom.tmp"), 0);
}

static void loco_round_file(void)
{
    CHECK(mkdir(at("loco"), 0755) == 0);
    make_victim(at("victim-loco"));
    char trap[64];
    snprintf(trap, sizeof trap, "loco/round.tmp.%ld", (long)getpid());
    plant(at(trap), at("victim-loco"));
    uint8_t id[32] = { 1 };
    CHECK_OK(loco_state_commit(at("loco"), 7, 0, id, 3));
    char got[512];
    CHECK(slurp(at("loco/round"), got, sizeof got) > 0 && strstr(got, "round 7"));
    CHECK(victim_intact(at("victim-loco")));
}

static const pulse_tensor_spec specs[2] = {
    { "a.weight", "F32", 2, { 16, 64 } },
    { "b.bias", "F32", 1, { 64 } },
};

/* A checkpoint at path whose values depend on seed. */
static int write_ckpt(const char *path, unsigned seed)
{
    pulse_ckpt *c = NULL;
    int r = pulse_ckpt_create(&c, path, specs, 2, NULL);
    for (size_t i = 0; !r && i < 2; i++) {
        const pulse_tensor *t = pulse_ckpt_find(c, specs[i].name);
        float *v = (float *)t->data;
        for (size_t j = 0; j < t->nbytes / 4; j++)
            v[j] = (float)((j * 31 + i * 7 + (j % 5 == 0 ? seed : 0)) % 1000) / 1000.0f;
    }
    if (!r)
        r = pulse_ckpt_commit(c);
    pulse_ckpt_close(&c);
    return r;
}

static void checkpoint_and_patch(void)
{
    make_victim(at("victim-ckpt"));
    char trap[128];
    snprintf(trap, sizeof trap, "one.safetensors.tmp.%ld", (long)getpid());
    plant(at(trap), at("victim-ckpt"));
    CHECK_OK(write_ckpt(at("one.safetensors"), 0));
    snprintf(trap, sizeof trap, "two.safetensors.tmp.%ld", (long)getpid());
    plant(at(trap), at("victim-ckpt"));
    CHECK_OK(write_ckpt(at("two.safetensors"), 5));
    pulse_ckpt *a = NULL, *b = NULL, *like = NULL;
    CHECK_OK(pulse_ckpt_open(&a, at("one.safetensors"), PULSE_CKPT_READ));
    CHECK_OK(pulse_ckpt_open(&b, at("two.safetensors"), PULSE_CKPT_READ));
    snprintf(trap, sizeof trap, "copy.safetensors.tmp.%ld", (long)getpid());
    plant(at(trap), at("victim-ckpt"));
    CHECK_OK(pulse_ckpt_create_like(&like, at("copy.safetensors"), a));
    CHECK_OK(pulse_ckpt_commit(like));
    pulse_ckpt_close(&like);
    /* The patch writer used O_EXCL on its old name: refused then, written now. */
    snprintf(trap, sizeof trap, "p.patch.tmp.%ld", (long)getpid());
    plant(at(trap), at("victim-ckpt"));
    CHECK_OK(pulse_patch_diff(a, b, NULL, at("p.patch")));
    pulse_ckpt_close(&a);
    pulse_ckpt_close(&b);
    CHECK(access(at("p.patch"), F_OK) == 0 && access(at("copy.safetensors"), F_OK) == 0);
    CHECK(victim_intact(at("victim-ckpt")));
    CHECK_EQ_INT(leftovers(dir, "one.safetensors.tmp"), 0);
    CHECK_EQ_INT(leftovers(dir, "copy.safetensors.tmp"), 0);
    CHECK_EQ_INT(leftovers(dir, "p.patch.tmp"), 0);
}

/* Publish a keyframe and a patch, then a fresh follower restores the keyframe into W and applies
 * the patch: the keyframe's temporary (W.keyframe.<pid>), the journal's and the unsynced notes'
 * (state/journal.tmp, state/unsynced.tmp) all had symlinks planted at their old names. */
static void keyframe_restore(void)
{
    pulse_secret_key *k = NULL;
    CHECK_OK(pulse_key_generate(&k));
    CHECK_OK(pulse_key_save(k, at("trainer"), "trainer"));
    pulse_key_free(&k);
    pulse_trust *trust = NULL;
    CHECK_OK(pulse_key_load_trust_dir(at("trainer.pub"), &trust));
    char url[128];
    snprintf(url, sizeof url, "file://%s", at("store"));
    CHECK(mkdir(at("pub"), 0755) == 0 && mkdir(at("fol"), 0755) == 0);
    make_victim(at("victim-sync"));
    plant(at("pub/unsynced.tmp"), at("victim-sync"));
    plant(at("fol/unsynced.tmp"), at("victim-sync"));
    plant(at("fol/journal.tmp"), at("victim-sync"));
    char trap[128];
    snprintf(trap, sizeof trap, "w.safetensors.keyframe.%ld", (long)getpid());
    plant(at(trap), at("victim-sync"));

    pulse_publish_opts po;
    pulse_publish_opts_default(&po);
    po.store_url = url;
    po.run = "r1";
    po.key_path = at("trainer.key");
    po.state_dir = at("pub");
    po.threads = 2;
    pulse_publisher *pub = NULL;
    CHECK_OK(pulse_publisher_open(&pub, &po));
    pulse_sync_step s;
    CHECK_OK(pulse_publisher_publish(pub, at("one.safetensors"), 0, 0, &s));
    CHECK_OK(pulse_publisher_publish(pub, at("two.safetensors"), 1, 0, &s));
    pulse_publisher_close(&pub);

    pulse_follow_opts fo;
    pulse_follow_opts_default(&fo);
    fo.store_url = url;
    fo.run = "r1";
    fo.trust = trust;
    fo.state_dir = at("fol");
    fo.weights_path = at("w.safetensors");
    fo.threads = 2;
    pulse_follower *f = NULL;
    CHECK_OK(pulse_follower_open(&f, &fo));
    size_t applied = 0;
    pulse_sync_step held;
    memset(&held, 0, sizeof held);
    CHECK_OK(f ? pulse_follower_pull(f, &applied, &held) : PULSE_ERR_INVALID);
    CHECK_EQ_INT(held.step, 1);
    pulse_follower_close(&f);
    CHECK(victim_intact(at("victim-sync")));
    CHECK_EQ_INT(leftovers(dir, "w.safetensors.keyframe"), 0);
    pulse_trust_free(&trust);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/pulse-temp-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    helper();
    replace_file();
    metrics_file();
    loco_round_file();
    checkpoint_and_patch();
    keyframe_restore();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (check_failures == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done("temp-symlinks");
}
