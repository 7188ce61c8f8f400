/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for a step's directions file (STATE/directions, STATE/last.dirs, --prev-dirs DIRS): any bytes, as they are and with their digest made right, are refused by name or load as directions whose tables lie inside the file, every element readable, that save and load again as the same bytes, read into memory or mapped. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crypto/sha256.h"
#include "node/patch/patch_dirs.h"
#include "pulseweights/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { DIGEST = 32 };

static char dir[64], path[128], again[128];

static void cleanup(void)
{
    unlink(path);
    unlink(again);
    rmdir(dir);
}

static uint8_t *read_back(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    if (b && len > 0 && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)(len > 0 ? len : 0);
    return b;
}

/* Every element of every tensor unpacked (an out-of-bounds table would read past the image:
 * ASan's to find), and the tables inside the file. */
static void read_all(const pulse_dirs *d)
{
    uint8_t out[4096];
    for (size_t t = 0; t < d->ntensors; t++) {
        if (d->at[t] > d->len - DIGEST || (d->elems[t] + 3) / 4 > d->len - DIGEST - d->at[t])
            abort();
        for (uint64_t first = 0; first < d->elems[t]; first += sizeof out) {
            uint64_t left = d->elems[t] - first;
            uint32_t n = left < sizeof out ? (uint32_t)left : (uint32_t)sizeof out;
            patch_dirs_unpack(d, t, first, n, out);
            for (uint32_t i = 0; i < n; i++)
                if (out[i] > 3)
                    abort();
        }
    }
}

static void one(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
    pulse_dirs *d = NULL;
    int r = pulse_dirs_load(&d, path);
    if (r) {
        /* Refused: one line naming the file, and nothing held. */
        if (d || (r != PULSE_ERR_FORMAT && r != PULSE_ERR_NOMEM) || !strstr(pulse_last_error(), path))
            abort();
        return;
    }
    if (!d || d->len != size)
        abort();
    read_all(d);
    /* Mapped, the same tables over the same bytes. */
    pulse_dirs *m = NULL;
    if (patch_dirs_load_mapped(&m, path) != 0 || m->len != d->len || m->ntensors != d->ntensors ||
        memcmp(m->image, d->image, d->len) != 0 || memcmp(m->elems, d->elems, d->ntensors * sizeof *d->elems) != 0 ||
        memcmp(m->at, d->at, d->ntensors * sizeof *d->at) != 0)
        abort();
    pulse_dirs_free(&m);
    /* Saved, the bytes it was read from. */
    size_t n = 0;
    uint8_t *b = NULL;
    if (pulse_dirs_save(d, again, 0) != 0 || !(b = read_back(again, &n)) || n != size || memcmp(b, data, size) != 0)
        abort();
    free(b);
    pulse_dirs_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/pulse-fuzz-dirs.XXXXXX");
        if (!mkdtemp(dir))
            abort();
        snprintf(path, sizeof path, "%s/dirs", dir);
        snprintf(again, sizeof again, "%s/again", dir);
        atexit(cleanup);
    }
    one(data, size);
    /* The same bytes with a digest that matches, so that the tables behind it are reached. */
    if (size >= DIGEST) {
        uint8_t *sealed = malloc(size);
        if (!sealed)
            abort();
        memcpy(sealed, data, size);
        pulse_sha256(sealed, size - DIGEST, sealed + size - DIGEST);
        one(sealed, size);
        free(sealed);
    }
    return 0;
}
