/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the sharded checkpoint's index (model.safetensors.index.json): any bytes beside two real shards are refused cleanly or open a checkpoint whose every tensor comes from the shard the index names. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pulseweights/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], index_path[128];

/* A shard of one tensor `name` of two BF16 values, written as a safetensors file. */
static int write_shard(const char *file, const char *name)
{
    char header[160], path[128];
    int n = snprintf(header, sizeof header,
                     "{\"%s\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", name);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    uint8_t len[8] = { (uint8_t)n };
    const uint8_t values[4] = { 0x80, 0x3f, 0x00, 0x40 };
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(header, 1, (size_t)n, f) == (size_t)n &&
             fwrite(values, 1, 4, f) == 4;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static const char *const files[] = { "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                     "model.safetensors.index.json" };

static void cleanup(void)
{
    char path[160];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* The two shards, once per process, in a directory of the process's own (removed at exit). */
static int setup(void)
{
    if (dir[0])
        return 0;
    snprintf(dir, sizeof dir, "%s/pulse-fuzz-index-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        abort();
    atexit(cleanup);
    if (write_shard(files[0], "a.weight") || write_shard(files[1], "b.weight"))
        abort();
    snprintf(index_path, sizeof index_path, "%s/%s", dir, files[2]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    FILE *f = fopen(index_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    pulse_ckpt *c = NULL;
    int r = pulse_ckpt_open(&c, index_path, 0);
    if (r) {
        if (c || r >= 0 || !pulse_last_error()[0])
            abort();   /* a refusal leaves nothing open and always says why */
        return 0;
    }
    /* Only the two real tensors can be there, each from its own shard. */
    if (pulse_ckpt_count(c) < 1 || pulse_ckpt_count(c) > 2)
        abort();
    for (size_t i = 0; i < pulse_ckpt_count(c); i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(c, i);
        if (strcmp(t->name, "a.weight") && strcmp(t->name, "b.weight"))
            abort();
        if (t->nbytes != 4 || t->data[1] != 0x3f)
            abort();
    }
    uint8_t id[32];
    if (pulse_ckpt_state_id(c, 1, id) != 0)
        abort();
    pulse_ckpt_close(&c);
    return 0;
}
