/* SPDX-License-Identifier: Apache-2.0 */
/* manifest/layout: every bucket key kind formatted and parsed back, and every near miss refused. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/fail.h"
#include "check.h"
#include "manifest/layout.h"
#include "pulseweights/record.h"

#define NODE "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define NODE_UP "000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F"

static uint8_t node[32];

static void records(void)
{
    char k[200];
    int kind;
    uint64_t step;
    uint8_t got[32];
    static const int kinds[] = { PULSE_RECORD_SYNC_PATCH, PULSE_RECORD_KEYFRAME, PULSE_RECORD_LOCO_SHARD,
                                 PULSE_RECORD_LOCO_RESULT, PULSE_RECORD_LOCO_REDUCED, PULSE_RECORD_RECEIPT };
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        CHECK_OK(pulse_layout_record(k, sizeof k, kinds[i], 42, node));
        memset(got, 0, sizeof got);
        CHECK_EQ_INT(pulse_layout_parse_record(k, &kind, &step, got), 0);
        CHECK_EQ_INT(kind, kinds[i]);
        CHECK_EQ_INT(step, 42);
        CHECK(!memcmp(got, node, 32));
    }
    CHECK_OK(pulse_layout_record(k, sizeof k, PULSE_RECORD_KEYFRAME, 3, node));
    CHECK(!strcmp(k, "records/keyframe/000000000003/" NODE));
    CHECK_OK(pulse_layout_record(k, sizeof k, PULSE_RECORD_RECEIPT, 3, node));
    CHECK(!strcmp(k, "receipts/" NODE "/000000000003"));
    CHECK_OK(pulse_layout_record(k, sizeof k, PULSE_RECORD_SYNC_PATCH, 999999999999ull, node));
    CHECK(!strcmp(k, "records/sync-patch/999999999999/" NODE));
    /* The public key function says the same. */
    pulse_record r;
    CHECK_OK(pulse_record_init(&r, PULSE_RECORD_SYNC_PATCH, "run", 7));
    memcpy(r.node, node, 32);
    char pub[200];
    CHECK_OK(pulse_record_key(&r, pub, sizeof pub));
    CHECK_OK(pulse_layout_record(k, sizeof k, PULSE_RECORD_SYNC_PATCH, 7, node));
    CHECK(!strcmp(pub, k));
    CHECK_ERR(pulse_record_key(&r, pub, 20), PULSE_ERR_LIMIT);
    pulse_record_clear(&r);
    /* Refused to format: an unknown kind, a buffer too small. */
    CHECK_ERR(pulse_layout_record(k, sizeof k, 0, 1, node), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_layout_record(k, sizeof k, 99, 1, node), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_layout_record(k, 40, PULSE_RECORD_KEYFRAME, 1, node), PULSE_ERR_LIMIT);

    static const char *bad[] = {
        "records/keyframe/00000000003/" NODE,              /* 11 digits */
        "records/keyframe/0000000000003/" NODE,            /* 13 digits */
        "records/keyframe/+00000000003/" NODE,             /* a sign */
        "records/keyframe/ 00000000003/" NODE,             /* a space */
        "records/keyframe/000000000003/" NODE_UP,          /* upper-case hex */
        "records/keyframe/000000000003/" NODE "/",         /* trailing junk */
        "records/keyframe/000000000003/" NODE "x",
        "records/keyframe/000000000003/" NODE "0",         /* 65 digits */
        "records/keyframe/000000000003/" "0001",           /* 4 digits */
        "records/keyframe/000000000003/",
        "records/keyframe/000000000003",
        "records/key-frame/000000000003/" NODE,            /* unknown kind */
        "records/Keyframe/000000000003/" NODE,
        "records/receipt/000000000003/" NODE,              /* a receipt only under receipts/ */
        "records//000000000003/" NODE,
        "records/sync-patchsync-patchsync-patchsync-patch/000000000003/" NODE,
        "Records/keyframe/000000000003/" NODE,
        "/records/keyframe/000000000003/" NODE,
        "receipts/" NODE "/00000000003",                   /* 11 digits */
        "receipts/" NODE "/0000000000003",                 /* 13 digits */
        "receipts/" NODE "/000000000003/",                 /* trailing junk */
        "receipts/" NODE "/000000000003x",
        "receipts/" NODE_UP "/000000000003",               /* upper-case hex */
        "receipts/" NODE "0/000000000003",
        "receipts/0001/000000000003",
        "receipts/" NODE,
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int p = pulse_layout_parse_record(bad[i], &kind, &step, got);
        if (p != -1)
            fprintf(stderr, "accepted: %s\n", bad[i]);
        CHECK_EQ_INT(p, -1);
    }

    CHECK_OK(pulse_layout_records_prefix(k, sizeof k, 0, 0));
    CHECK(!strcmp(k, "records/"));
    CHECK_OK(pulse_layout_records_prefix(k, sizeof k, PULSE_RECORD_LOCO_SHARD, UINT64_MAX));
    CHECK(!strcmp(k, "records/loco-shard/"));
    CHECK_OK(pulse_layout_records_prefix(k, sizeof k, PULSE_RECORD_LOCO_RESULT, 12));
    CHECK(!strcmp(k, "records/loco-result/000000000012/"));
    CHECK_ERR(pulse_layout_records_prefix(k, sizeof k, PULSE_RECORD_RECEIPT, 1), PULSE_ERR_INVALID);
    CHECK_ERR(pulse_layout_records_prefix(k, sizeof k, 99, 1), PULSE_ERR_INVALID);
}

static void heads_objects(void)
{
    char k[200];
    uint8_t got[32];
    CHECK_OK(pulse_layout_head(k, sizeof k, node));
    CHECK(!strcmp(k, "heads/sync/" NODE));
    CHECK_EQ_INT(pulse_layout_parse_head(k, got), 0);
    CHECK(!memcmp(got, node, 32));
    CHECK_OK(pulse_layout_object(k, sizeof k, node));
    CHECK(!strcmp(k, "objects/" NODE));
    memset(got, 0, sizeof got);
    CHECK_EQ_INT(pulse_layout_parse_object(k, got), 0);
    CHECK(!memcmp(got, node, 32));
    CHECK_OK(pulse_layout_object(k, sizeof k, NULL));
    CHECK(!strcmp(k, "objects/"));
    static const char *bad_heads[] = { "heads/sync/" NODE_UP, "heads/sync/" NODE "/", "heads/sync/" NODE "0",
                                       "heads/sync/0001", "heads/sync/", "heads/keyframe/" NODE, "heads/" NODE,
                                       "objects/" NODE };
    for (size_t i = 0; i < sizeof bad_heads / sizeof *bad_heads; i++)
        CHECK_EQ_INT(pulse_layout_parse_head(bad_heads[i], got), -1);
    static const char *bad_objects[] = { "objects/" NODE_UP, "objects/" NODE "/", "objects/" NODE ".tmp",
                                         "objects/0001", "objects/", "objects/g" NODE "", "heads/sync/" NODE };
    for (size_t i = 0; i < sizeof bad_objects / sizeof *bad_objects; i++)
        CHECK_EQ_INT(pulse_layout_parse_object(bad_objects[i], got), -1);
    CHECK_EQ_INT(pulse_layout_parse_hex32(NODE, 64, got), 0);
    CHECK_EQ_INT(pulse_layout_parse_hex32(NODE_UP, 64, got), -1);
    CHECK_EQ_INT(pulse_layout_parse_hex32(NODE, 63, got), -1);
}

static void loco_rs(void)
{
    char k[200];
    unsigned attempt;
    int plan;
    uint8_t got[32];
    CHECK_OK(pulse_layout_loco_rs(k, sizeof k, 5, 0, "plan"));
    CHECK(!strcmp(k, "loco-rs/000000000005/00/plan"));
    CHECK_OK(pulse_layout_loco_rs(k, sizeof k, 5, 3, NODE));
    CHECK(!strcmp(k, "loco-rs/000000000005/03/" NODE));
    CHECK_OK(pulse_layout_loco_rs(k, sizeof k, 5, 0, NULL));
    CHECK(!strcmp(k, "loco-rs/000000000005/"));
    CHECK_EQ_INT(pulse_layout_parse_loco_rs_tail("07/plan", &attempt, &plan, got), 0);
    CHECK_EQ_INT(attempt, 7);
    CHECK_EQ_INT(plan, 1);
    memset(got, 0, sizeof got);
    CHECK_EQ_INT(pulse_layout_parse_loco_rs_tail("12/" NODE, &attempt, &plan, got), 0);
    CHECK_EQ_INT(attempt, 12);
    CHECK_EQ_INT(plan, 0);
    CHECK(!memcmp(got, node, 32));
    static const char *bad[] = { "7/plan", "007/plan", "0a/plan", "07/plan/", "07/plans", "07/" NODE_UP,
                                 "07/" NODE "/", "07/", "07", "", "07:plan" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_EQ_INT(pulse_layout_parse_loco_rs_tail(bad[i], &attempt, &plan, got), -1);
}

static void join_split(void)
{
    char k[300];
    CHECK_OK(pulse_layout_join(k, sizeof k, "run-1", "objects/x"));
    CHECK(!strcmp(k, "run-1/objects/x"));
    CHECK_ERR(pulse_layout_join(k, sizeof k, "x/y", "objects/x"), PULSE_ERR_FORMAT);
    CHECK_ERR(pulse_layout_join(k, sizeof k, "..", "objects/x"), PULSE_ERR_FORMAT);
    CHECK_ERR(pulse_layout_join(k, 10, "run-1", "objects/x"), PULSE_ERR_LIMIT);

    /* Retention's loose shape: any kind name, 1..19 digits, any last segment. */
    char kname[32];
    uint64_t step;
    const char *name;
    CHECK_EQ_INT(pulse_layout_split_record("records/keyframe/5/abc", kname, &step, &name), 0);
    CHECK(!strcmp(kname, "keyframe") && step == 5 && !strcmp(name, "abc"));
    CHECK_EQ_INT(pulse_layout_split_record("records/x/0000000000000000001/", kname, &step, &name), 0);
    CHECK(!strcmp(kname, "x") && step == 1 && !strcmp(name, ""));
    static const char *bad[] = { "records/keyframe/00000000000000000001/a", "records/keyframe//a",
                                 "records/keyframe/1a/a", "records/keyframe/1/a/b", "records/keyframe/1",
                                 "records/0123456789012345678901234567890123/1/a", "receipts/a/1" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_EQ_INT(pulse_layout_split_record(bad[i], kname, &step, &name), -1);
}

int main(void)
{
    for (int i = 0; i < 32; i++)
        node[i] = (uint8_t)i;
    records();
    heads_objects();
    loco_rs();
    join_split();
    return check_done("test_layout");
}
