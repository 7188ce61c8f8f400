/* SPDX-License-Identifier: Apache-2.0 */
/* The device path of a part published from its changes against its CPU twin: SHA-256 of many messages, the delta kernel, and pulse_changes on the GPU and on the host, bit for bit, with their patches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "crypto/sha256.h"
#include "node/cuda/cuda_kernels.h"
#include "node/patch/patch_changes.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/cuda.h"
#include "pulseweights/sync.h"

/* Exit 77 (meson's SKIP) when there is no device; 1 on any mismatch. */
static int failures;
static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void report(const char *what, int ok)
{
    printf("%-28s %s\n", what, ok ? "PASS" : "FAIL");
    failures += !ok;
}

#define CU(x) do { cudaError_t e_ = (cudaError_t)(x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "gpu_changes: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define OK(x) do { int r_ = (x); if (r_) { \
    fprintf(stderr, "gpu_changes: %s: %s\n", #x, pulse_last_error()); exit(1); } } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "gpu_changes: out of memory\n");
        exit(1);
    }
    return p;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Messages of every length around the block and padding edges, aligned and not, up to a state chunk. */
static void check_sha256(void)
{
    static const uint64_t lens[] = { 0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 1000, 65536, 1048575, 1048576 };
    const size_t n = sizeof lens / sizeof lens[0] * 2;
    const size_t total = 2 * (1u << 20) * 2 + 64 * n;
    uint8_t *h = xmalloc(total), *d = NULL, *dig = NULL, *want = xmalloc(32 * n), *got = xmalloc(32 * n);
    for (size_t i = 0; i < total; i++)
        h[i] = (uint8_t)rnd();
    CU(cudaMalloc((void **)&d, total));
    CU(cudaMemcpy(d, h, total, cudaMemcpyHostToDevice));
    const uint8_t **ptrs = xmalloc(n * sizeof *ptrs);
    uint64_t *len = xmalloc(n * sizeof *len), off = 0;
    for (size_t i = 0; i < n; i++) {
        len[i] = lens[i / 2];
        off += (i % 2) ? 3 : 0;   /* every other message starts off its alignment */
        ptrs[i] = d + off;
        pulse_sha256(h + off, (size_t)len[i], want + 32 * i);
        off += len[i] + 16 - (len[i] % 16);
        if (off + (1u << 20) + 64 > total)
            off = 0;
    }
    const uint8_t **dptrs = NULL;
    uint64_t *dlen = NULL;
    CU(cudaMalloc((void **)&dptrs, n * sizeof *ptrs));
    CU(cudaMalloc((void **)&dlen, n * sizeof *len));
    CU(cudaMalloc((void **)&dig, 32 * n));
    CU(cudaMemcpy(dptrs, ptrs, n * sizeof *ptrs, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dlen, len, n * sizeof *len, cudaMemcpyHostToDevice));
    CU(pulse_cu_sha256_many(dptrs, dlen, n, dig, NULL));
    CU(cudaMemcpy(got, dig, 32 * n, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (size_t i = 0; i < n; i++)
        if (memcmp(want + 32 * i, got + 32 * i, 32)) {
            fprintf(stderr, "  sha256: message %zu (%llu bytes) differs\n", i, (unsigned long long)len[i]);
            ok = 0;
        }
    report("sha256 many", ok);
    cudaFree(d), cudaFree(dptrs), cudaFree(dlen), cudaFree(dig);
    free(h), free(want), free(got), free(ptrs), free(len);
}

/* The model: a BF16 tensor over two diff ranges (2^26 elements each), an F32 and an F8 one. */
#define BIG ((size_t)70 << 20)
#define F32N ((size_t)3 << 20)
#define F8N ((size_t)1000003)

typedef struct part {
    uint16_t *big;
    uint32_t *f32;
    uint8_t *f8;
} part;

static void describe(const part *p, pulse_mem_tensor t[3])
{
    memset(t, 0, 3 * sizeof *t);
    t[0] = (pulse_mem_tensor){ .name = "layers.0.w", .dtype_name = "BF16", .ndim = 2, .shape = { BIG / 1024, 1024 },
                               .data = p->big, .nbytes = BIG * 2 };
    t[1] = (pulse_mem_tensor){ .name = "layers.1.w", .dtype_name = "F32", .ndim = 1, .shape = { F32N },
                               .data = p->f32, .nbytes = F32N * 4 };
    t[2] = (pulse_mem_tensor){ .name = "layers.2.w", .dtype_name = "F8_E4M3", .ndim = 1, .shape = { F8N },
                               .data = p->f8, .nbytes = F8N };
}

/* A training step on the host copy: about 1 in DEN weights moves by a few units either way. */
static void train(part *p, unsigned den)
{
    for (size_t k = 0; k < BIG / den; k++)
        p->big[rnd() % BIG] += (uint16_t)(rnd() % 2 ? 1 + rnd() % 3 : 0xffff);
    for (size_t k = 0; k < F32N / den; k++)
        p->f32[rnd() % F32N] += 1 + rnd() % 7;
    for (size_t k = 0; k < F8N / den; k++)
        p->f8[rnd() % F8N] ^= (uint8_t)(1 + rnd() % 15);
}

static void to_device(const part *h, part *d)
{
    CU(cudaMemcpy(d->big, h->big, BIG * 2, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d->f32, h->f32, F32N * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d->f8, h->f8, F8N, cudaMemcpyHostToDevice));
}

static int same_lists(const pulse_tensor_changes *a, const pulse_tensor_changes *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t w = i == 0 ? 2 : i == 1 ? 4 : 1;
        if (a[i].count != b[i].count || memcmp(a[i].hash, b[i].hash, 32) ||
            (a[i].count && (memcmp(a[i].index, b[i].index, a[i].count * 8) ||
                            memcmp(a[i].values, b[i].values, a[i].count * w) ||
                            memcmp(a[i].deltas, b[i].deltas, a[i].count * w)))) {
            fprintf(stderr, "  changes of %s differ (device %llu, host %llu)\n", a[i].tensor.name,
                    (unsigned long long)a[i].count, (unsigned long long)b[i].count);
            return 0;
        }
    }
    return 1;
}

static int same_file(const char *x, const char *y)
{
    FILE *a = fopen(x, "rb"), *b = fopen(y, "rb");
    int same = a && b;
    while (same) {
        int ca = fgetc(a), cb = fgetc(b);
        same = ca == cb;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (a)
        fclose(a);
    if (b)
        fclose(b);
    return same;
}

/* The device's lists, hashes and patch equal the host's, step after step, accepts included. */
static void check_changes(const char *tmp)
{
    part h = { xmalloc(BIG * 2), xmalloc(F32N * 4), xmalloc(F8N) }, d;
    CU(cudaMalloc((void **)&d.big, BIG * 2));
    CU(cudaMalloc((void **)&d.f32, F32N * 4));
    CU(cudaMalloc((void **)&d.f8, F8N));
    for (size_t i = 0; i < BIG; i++)
        h.big[i] = (uint16_t)(0x3c00 + rnd() % 4096);
    for (size_t i = 0; i < F32N; i++)
        h.f32[i] = (uint32_t)rnd();
    for (size_t i = 0; i < F8N; i++)
        h.f8[i] = (uint8_t)rnd();
    to_device(&h, &d);
    pulse_mem_tensor th[3], td[3];
    describe(&h, th);
    describe(&d, td);
    pulse_changes *dev = NULL, *host = NULL;
    OK(pulse_changes_open(&dev, td, 3, PULSE_MEM_CUDA));
    OK(pulse_changes_open(&host, th, 3, PULSE_MEM_HOST));
    static const unsigned dens[] = { 100, 10, 1000000, 50 };   /* 1%, 10%, almost nothing, 2% */
    int ok = 1;
    char pd[4200], ph[4200];
    snprintf(pd, sizeof pd, "%s/device.patch", tmp);
    snprintf(ph, sizeof ph, "%s/host.patch", tmp);
    for (size_t s = 0; s < sizeof dens / sizeof dens[0]; s++) {
        train(&h, dens[s]);
        to_device(&h, &d);
        const pulse_tensor_changes *a = NULL, *b = NULL;
        CU(cudaDeviceSynchronize());
        double t0 = now();
        OK(pulse_changes_find(dev, td, 3, &a));
        double t1 = now();
        OK(pulse_changes_find(host, th, 3, &b));
        double t2 = now();
        ok &= same_lists(a, b, 3);
        pulse_ckpt *layout = NULL;
        pulse_diff_opts o;
        pulse_diff_opts_default(&o);
        uint8_t base[32] = { 0 }, result[32] = { 1 };
        OK(patch_changes_layout(a, 3, &layout));
        OK(patch_from_changes(layout, a, 3, &o, base, result, pd));
        OK(patch_from_changes(layout, b, 3, &o, base, result, ph));
        ok &= same_file(pd, ph);
        pulse_ckpt_close(&layout);
        uint64_t changes = a[0].count + a[1].count + a[2].count;
        printf("  step %zu: %llu changes of %zu, find on the device %.1f ms, on the host (twin) %.1f ms\n", s,
               (unsigned long long)changes, BIG + F32N + F8N, 1e3 * (t1 - t0), 1e3 * (t2 - t1));
        if (s != 2) {   /* step 2 is found and left: the next step's changes include it */
            OK(pulse_changes_accept(dev));
            OK(pulse_changes_accept(host));
        }
    }
    unlink(pd);
    unlink(ph);
    /* the device's hashes are the tensors' own */
    pulse_ckpt *c = NULL;
    const pulse_tensor_changes *a = NULL;
    OK(pulse_ckpt_wrap(&c, th, 3, PULSE_CKPT_READ));
    OK(pulse_changes_find(dev, td, 3, &a));
    for (size_t i = 0; i < 3; i++) {
        uint8_t want[32];
        OK(pulse_tensor_hash(pulse_ckpt_tensor(c, i), want));
        ok &= !memcmp(want, a[i].hash, 32) && a[i].count == 0;
    }
    pulse_ckpt_close(&c);
    report("changes device = host", ok);
    pulse_changes_close(&dev);
    pulse_changes_close(&host);
    cudaFree(d.big), cudaFree(d.f32), cudaFree(d.f8);
    free(h.big), free(h.f32), free(h.f8);
}

int main(void)
{
    int count = 0;
    if (pulse_cuda_device_count(&count) < 0 || count < 1) {
        printf("gpu_changes: no CUDA device (%s): nothing run\n", pulse_last_error());
        return 77;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/pulse-gpu-changes-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) {
        perror("gpu_changes: mkdtemp");
        return 1;
    }
    check_sha256();
    check_changes(tmp);
    rmdir(tmp);
    printf("\ngpu_changes: %s (%d failing)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
