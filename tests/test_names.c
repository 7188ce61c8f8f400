/* SPDX-License-Identifier: Apache-2.0 */
/* base/names: the one rule for run names and store keys, and the entry points that take a run refusing a bad one before any work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/names.h"
#include "check.h"
#include "pulseweights/audit.h"
#include "pulseweights/loco.h"
#include "pulseweights/record.h"
#include "pulseweights/store.h"

static const char *bad_runs[] = { "", ".", "..", "x/y", "a b", "-a", ".a", "_a", "a\n", "a\x1b[2J", "\xc3\xbc" };
static const char *good_runs[] = { "a", "0", "run-1", "r.2_x", "A..b", "a." };

static void runs(void)
{
    for (size_t i = 0; i < sizeof bad_runs / sizeof *bad_runs; i++) {
        int r = pulse_check_run(bad_runs[i]);
        CHECK(r == PULSE_ERR_FORMAT);
        CHECK(!strncmp(pulse_last_error(), "run \"", 5));
        /* Never a raw control byte in the line. */
        for (const char *c = pulse_last_error(); *c; c++)
            CHECK((unsigned char)*c >= 0x20);
    }
    for (size_t i = 0; i < sizeof good_runs / sizeof *good_runs; i++)
        CHECK_OK(pulse_check_run(good_runs[i]));
    char long_run[PULSE_RECORD_MAX_RUN + 2];
    memset(long_run, 'a', sizeof long_run - 1);
    long_run[PULSE_RECORD_MAX_RUN] = 0;
    CHECK_OK(pulse_check_run(long_run));
    long_run[PULSE_RECORD_MAX_RUN] = 'a';
    long_run[PULSE_RECORD_MAX_RUN + 1] = 0;
    CHECK_ERR(pulse_check_run(long_run), PULSE_ERR_LIMIT);
    CHECK_ERR(pulse_check_run(NULL), PULSE_ERR_FORMAT);
    CHECK_ERR(pulse_check_run("x/y"), PULSE_ERR_FORMAT);
    CHECK(!strcmp(pulse_last_error(), "run \"x/y\": byte 1 (0x2f) not allowed (letters, digits, '.', '_', "
                                      "'-'; first a letter or digit)"));
    /* The record format applies the same rule. */
    pulse_record rec;
    for (size_t i = 0; i < sizeof bad_runs / sizeof *bad_runs; i++)
        CHECK(pulse_record_init(&rec, PULSE_RECORD_KEYFRAME, bad_runs[i], 0) != 0);
    CHECK_OK(pulse_record_init(&rec, PULSE_RECORD_KEYFRAME, "r.2_x", 0));
    pulse_record_clear(&rec);
}

static void keys(void)
{
    const char *bad[] = { "", "/a", "a//b", "a/", "../x", "a/../b", "a/./b", ".", "..", "a\nb", "a\x7f" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_ERR(pulse_check_key(bad[i]), PULSE_ERR_INVALID);
        CHECK(!strncmp(pulse_last_error(), "key \"", 5));
    }
    const char *good[] = { "a", "a/b", "with space/x y", "r/records/keyframe/000000000001/ab", ".hidden", "a..b/c." };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK_OK(pulse_check_key(good[i]));
    CHECK_OK(pulse_check_key_prefix(""));
    CHECK_OK(pulse_check_key_prefix("run/"));
    CHECK_OK(pulse_check_key_prefix("run/rec"));
    CHECK_ERR(pulse_check_key_prefix("../"), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_check_key_prefix("a//"), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_check_key_prefix("/a"), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_check_key_prefix(".."), PULSE_ERR_INVALID);
    CHECK(!strncmp(pulse_last_error(), "prefix \"..\"", 11));
}

/* Library entry points that take a run: refused before they list or open anything. */
static void entry_points(void)
{
    char dir[] = "/tmp/pulse-names-XXXXXX";
    if (!mkdtemp(dir))
        return;
    char url[64];
    snprintf(url, sizeof url, "file://%s", dir);
    pulse_store *st = NULL;
    CHECK_OK(pulse_store_open(&st, url, NULL));
    pulse_audit_report rep;
    CHECK_ERR(pulse_audit_run(st, "..", NULL, &rep), PULSE_ERR_FORMAT);
    CHECK(strstr(pulse_last_error(), "run \"..\"") != NULL);
    pulse_audit_report_clear(&rep);
    CHECK_ERR(pulse_audit_run(st, "a b", NULL, &rep), PULSE_ERR_FORMAT);
    pulse_audit_report_clear(&rep);
    pulse_store_close(&st);

    pulse_loco_round_opts o;
    pulse_loco_round_default_opts(&o);
    o.store_url = url;
    o.run = "..";
    o.key_path = "/nonexistent.key";
    o.state_dir = dir;
    o.local_path = "/nonexistent.safetensors";
    pulse_loco_report lr;
    CHECK_ERR(pulse_loco_round(&o, &lr), PULSE_ERR_FORMAT);
    o.run = "good";
    o.publish_run = "x/y";
    CHECK_ERR(pulse_loco_round(&o, &lr), PULSE_ERR_FORMAT);
    CHECK(strstr(pulse_last_error(), "run \"x/y\"") != NULL);
    rmdir(dir);
}

int main(void)
{
    runs();
    keys();
    entry_points();
    return check_done("names");
}
