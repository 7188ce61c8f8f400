/* SPDX-License-Identifier: Apache-2.0 */
/* Every CUDA kernel against the scalar reference on random and edge inputs, the device apply of real patches, and a benchmark. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "node/cuda/cuda_kernels.h"
#include "node/kernels/kernels.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/cuda.h"
#include "pulseweights/patch.h"

/* Exit 77 (meson's SKIP) when there is no device; 1 on any mismatch. */
static int failures;
static pulse_kernels ref;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void report(const char *kernel, int ok)
{
    printf("%-28s %s\n", kernel, ok ? "PASS" : "FAIL");
    if (!ok)
        failures++;
}

static void die_cuda(cudaError_t e, const char *what)
{
    fprintf(stderr, "gpu_check: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
}
#define CU(x) do { cudaError_t e_ = (cudaError_t)(x); if (e_ != cudaSuccess) die_cuda(e_, #x); } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "gpu_check: out of memory\n");
        exit(1);
    }
    return p;
}

static void *dalloc(size_t n)
{
    void *p = NULL;
    CU(cudaMalloc(&p, n ? n : 1));
    return p;
}

static void *to_dev(const void *h, size_t n)
{
    void *d = dalloc(n);
    if (n)
        CU(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

static void from_dev(void *h, const void *d, size_t n)
{
    if (n)
        CU(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

static int same(const void *a, const void *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

/* sizes 0, 1, block +-1, tile +-1 (4096 = 256 threads x 16), several tiles, large */
static const size_t sizes[] = {0, 1, 2, 31, 33, 255, 256, 257, 4095, 4096, 4097, 65537, 1000003, 9000001};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Ascending distinct positions < n with density num/den (den 0: all of them). */
static size_t pick_positions(size_t n, unsigned num, unsigned den, uint32_t *idx)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (den == 0 || rnd() % den < num)
            idx[k++] = (uint32_t)i;
    return k;
}

static void fill_random(void *p, size_t bytes)
{
    uint8_t *b = p;
    for (size_t i = 0; i < bytes; i++)
        b[i] = (uint8_t)rnd();
}

/* ---------- scatter and ulp apply ---------- */

static void check_scatter(unsigned width, int ulp)
{
    int ok = 1;
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = sizes[s];
        for (unsigned den = 0; den <= 20; den += 20) {
            uint8_t *dst = xmalloc(n * width), *v = xmalloc(n * width), *got = xmalloc(n * width);
            uint32_t *idx = xmalloc(n * 4 + 4);
            fill_random(dst, n * width);
            size_t k = pick_positions(n, 1, den, idx);
            fill_random(v, k * width);
            void *ddst = to_dev(dst, n * width), *dv = to_dev(v, k * width), *didx = to_dev(idx, k * 4);
            int e = ulp ? pulse_cu_ulp_apply(width, ddst, (uint32_t)n, didx, k, dv, NULL)
                        : pulse_cu_scatter(width, ddst, (uint32_t)n, didx, k, dv, NULL);
            CU(e);
            CU(cudaDeviceSynchronize());
            from_dev(got, ddst, n * width);
            if (width == 1 && ulp)
                ref.ulp_apply8(dst, idx, k, v);
            else if (width == 1)
                ref.scatter8(dst, idx, k, v);
            else if (width == 2 && ulp)
                ref.ulp_apply16((uint16_t *)dst, idx, k, (uint16_t *)v);
            else if (width == 2)
                ref.scatter16((uint16_t *)dst, idx, k, (uint16_t *)v);
            else if (ulp)
                ref.ulp_apply32((uint32_t *)dst, idx, k, (uint32_t *)v);
            else
                ref.scatter32((uint32_t *)dst, idx, k, (uint32_t *)v);
            if (!same(dst, got, n * width)) {
                fprintf(stderr, "  %s%u: n=%zu k=%zu differs\n", ulp ? "ulp_apply" : "scatter", width * 8, n, k);
                ok = 0;
            }
            cudaFree(ddst), cudaFree(dv), cudaFree(didx);
            free(dst), free(v), free(got), free(idx);
        }
    }
    char name[64];
    snprintf(name, sizeof(name), "%s%u", ulp ? "ulp_apply" : "scatter", width * 8);
    report(name, ok);
}

/* ---------- diff/extract ---------- */

static void check_diff(unsigned width)
{
    static const unsigned dens[] = {0, 1, 50, 100000};   /* all, all-but-sparse, 2%, ~none */
    int ok = 1;
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = sizes[s];
        for (size_t d = 0; d < 4; d++) {
            uint8_t *a = xmalloc(n * width), *b = xmalloc(n * width), *vref = xmalloc(n * width + 256);
            uint8_t *vgot = xmalloc(n * width + 1);
            uint32_t *pos = xmalloc(n * 4 + 4), *iref = xmalloc(n * 4 + 256), *igot = xmalloc(n * 4 + 4);
            fill_random(a, n * width);
            memcpy(b, a, n * width);
            size_t k = pick_positions(n, dens[d] == 1 ? 0 : 1, dens[d] == 1 ? 1 : dens[d], pos);
            if (dens[d] == 1)
                k = pick_positions(n, 19, 20, pos);
            for (size_t j = 0; j < k; j++) /* flip one bit of the element: always a change */
                b[(size_t)pos[j] * width + rnd() % width] ^= (uint8_t)(1u << (rnd() % 8));
            size_t kr;
            switch (width) {
            case 1: kr = ref.diff8(a, b, n, iref); ref.gather8(b, iref, kr, vref); break;
            case 2: kr = ref.diff16((uint16_t *)a, (uint16_t *)b, n, iref);
                    ref.gather16((uint16_t *)b, iref, kr, (uint16_t *)vref); break;
            default: kr = ref.diff32((uint32_t *)a, (uint32_t *)b, n, iref);
                     ref.gather32((uint32_t *)b, iref, kr, (uint32_t *)vref); break;
            }
            void *da = to_dev(a, n * width), *db = to_dev(b, n * width);
            void *didx = dalloc(n * 4), *dval = dalloc(n * width), *dcnt = dalloc(4);
            void *scr = dalloc(pulse_cu_scratch_bytes(n));
            CU(pulse_cu_diff(width, da, db, n, didx, dval, dcnt, scr, NULL));
            CU(cudaDeviceSynchronize());
            uint32_t kg = 0;
            from_dev(&kg, dcnt, 4);
            if (kg != kr) {
                fprintf(stderr, "  diff%u: n=%zu count %u, reference %zu\n", width * 8, n, kg, kr);
                ok = 0;
            } else {
                from_dev(igot, didx, kr * 4);
                from_dev(vgot, dval, kr * width);
                if (!same(iref, igot, kr * 4) || !same(vref, vgot, kr * width)) {
                    fprintf(stderr, "  diff%u: n=%zu positions or values differ\n", width * 8, n);
                    ok = 0;
                }
            }
            cudaFree(da), cudaFree(db), cudaFree(didx), cudaFree(dval), cudaFree(dcnt), cudaFree(scr);
            free(a), free(b), free(vref), free(vgot), free(pos), free(iref), free(igot);
        }
    }
    char name[64];
    snprintf(name, sizeof(name), "diff%u+gather", width * 8);
    report(name, ok);
}

/* ---------- the views and the gate ---------- */

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Edge patterns: zeros, subnormals, the views' overflow and tie points, Inf, NaNs. */
static const uint32_t edge_bits[] = {
    0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x3f800000, 0x3f808000, 0x3f818000,
    0x3f80ffff, 0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x477fe000, 0x477ff000, 0x43e00000, 0x43f00000,
    0x47600000, 0x47700000, 0x387fc000, 0x33800000, 0x33000000, 0x3b000000, 0x37800000,
    0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x7fffffff,
};
#define NEDGE (sizeof(edge_bits) / sizeof(edge_bits[0]))

static float random_float(void)
{
    uint64_t r = rnd();
    switch (r % 8) {
    case 0: return f_of(edge_bits[(r >> 8) % NEDGE]);
    case 1: return f_of((uint32_t)(r >> 16));                        /* any pattern */
    default: return ((float)(int32_t)(r >> 32) / 2147483648.0f) * ldexpf(1.0f, (int)((r >> 8) % 40) - 30);
    }
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void check_view_bits(void)
{
    size_t n = 3000000;
    float *x = xmalloc(n * 4);
    uint32_t *got = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++)
        x[i] = i < NEDGE ? f_of(edge_bits[i]) : i < (1u << 16) + NEDGE ? f_of((uint32_t)(i - NEDGE) << 16)
             : random_float();
    void *dx = to_dev(x, n * 4), *dout = dalloc(n * 4);
    for (int v = 0; v < PULSE_VIEW_COUNT; v++) {
        CU(pulse_cu_view_bits(v, dx, n, dout, NULL));
        from_dev(got, dout, n * 4);
        int ok = 1;
        for (size_t i = 0; i < n && ok; i++)
            if (got[i] != pulse_view_bits((pulse_view)v, x[i])) {
                fprintf(stderr, "  view %d: x=0x%08x device 0x%x reference 0x%x\n", v,
                        bits_of(x[i]), got[i], pulse_view_bits((pulse_view)v, x[i]));
                ok = 0;
            }
        char name[64];
        snprintf(name, sizeof(name), "view_bits[%d]", v);
        report(name, ok);
    }
    cudaFree(dx), cudaFree(dout);
    free(x), free(got);
}

/* theta with delta such that theta - (delta + e) lands on a tie of the view's rounding
 * (half a view ulp away) in some entries, and random elsewhere. */
static void fill_gate_inputs(size_t n, float *theta, float *delta, float *e)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        if (r % 4 == 0) {
            /* a BF16 value and an exact half-ulp step: x = theta - a is a tie */
            uint32_t t = (uint32_t)(rnd() >> 40) << 16 | 0x3c000000u;
            theta[i] = f_of(t & 0xbfff0000u);
            float ulp_half = ldexpf(1.0f, (int)((t >> 23) & 0xff) - 127 - 8);
            delta[i] = (r & 16) ? ulp_half : -ulp_half;
            e[i] = (r & 32) ? 0.0f : ldexpf(1.0f, -60);
        } else {
            theta[i] = random_float();
            delta[i] = random_float() * ((r & 8) ? 1e-3f : 1.0f);
            e[i] = (r & 64) ? 0.0f : random_float() * 1e-4f;
        }
    }
}

static void check_gate(int view)
{
    int ok = 1;
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = sizes[s];
        for (int alias = 0; alias < 2; alias++) {
            float *theta = xmalloc(n * 4), *delta = xmalloc(n * 4), *e = xmalloc(n * 4), *e0 = xmalloc(n * 4);
            float *vref = xmalloc(n * 4 + 4), *vgot = xmalloc(n * 4 + 4), *egot = xmalloc(n * 4 + 4);
            uint32_t *iref = xmalloc(n * 4 + 4), *igot = xmalloc(n * 4 + 4);
            fill_gate_inputs(n, theta, delta, e);
            memcpy(e0, e, n * 4);
            size_t kr = ref.gate[view](theta, alias ? e : delta, e, n, iref, vref);
            void *dt = to_dev(theta, n * 4), *dd = to_dev(delta, n * 4), *de = to_dev(e0, n * 4);
            void *didx = dalloc(n * 4), *dval = dalloc(n * 4), *dcnt = dalloc(4);
            void *scr = dalloc(pulse_cu_scratch_bytes(n));
            CU(pulse_cu_gate(view, dt, alias ? de : dd, de, n, didx, dval, dcnt, scr, NULL));
            CU(cudaDeviceSynchronize());
            uint32_t kg = 0;
            from_dev(&kg, dcnt, 4);
            from_dev(egot, de, n * 4);
            if (kg != kr) {
                fprintf(stderr, "  gate[%d]: n=%zu alias=%d count %u, reference %zu\n", view, n, alias, kg, kr);
                ok = 0;
            } else {
                from_dev(igot, didx, kr * 4);
                from_dev(vgot, dval, kr * 4);
                if (!same(iref, igot, kr * 4) || !same(vref, vgot, kr * 4) || !same(e, egot, n * 4)) {
                    fprintf(stderr, "  gate[%d]: n=%zu alias=%d positions, values or e differ\n", view, n, alias);
                    ok = 0;
                }
            }
            cudaFree(dt), cudaFree(dd), cudaFree(de), cudaFree(didx), cudaFree(dval), cudaFree(dcnt), cudaFree(scr);
            free(theta), free(delta), free(e), free(e0), free(vref), free(vgot), free(egot), free(iref), free(igot);
        }
    }
    char name[64];
    snprintf(name, sizeof(name), "gate[%d]+error feedback", view);
    report(name, ok);
}

/* Three "trainers" with distinct positions each, applied in order like the aggregation. */
static void check_scatter_add(void)
{
    int ok = 1;
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = sizes[s];
        float *acc = xmalloc(n * 4), *got = xmalloc(n * 4), *v = xmalloc(n * 4);
        uint32_t *idx = xmalloc(n * 4 + 4);
        for (size_t i = 0; i < n; i++)
            acc[i] = random_float();
        void *dacc = to_dev(acc, n * 4);
        for (int t = 0; t < 3; t++) {
            size_t k = pick_positions(n, 1, t == 0 ? 0 : 3, idx);
            for (size_t j = 0; j < k; j++)
                v[j] = random_float();
            void *didx = to_dev(idx, k * 4), *dv = to_dev(v, k * 4);
            CU(pulse_cu_scatter_add_f32(dacc, (uint32_t)n, didx, k, dv, NULL));
            ref.scatter_add_f32(acc, idx, k, v);
            CU(cudaDeviceSynchronize());
            cudaFree(didx), cudaFree(dv);
        }
        from_dev(got, dacc, n * 4);
        if (!same(acc, got, n * 4)) {
            size_t i = 0;
            while (bits_of(acc[i]) == bits_of(got[i]))
                i++;
            fprintf(stderr, "  scatter_add_f32: n=%zu differs first at %zu: device 0x%08x reference 0x%08x\n",
                    n, i, bits_of(got[i]), bits_of(acc[i]));
            ok = 0;
        }
        cudaFree(dacc);
        free(acc), free(got), free(v), free(idx);
    }
    report("scatter_add_f32", ok);
}

/* ---------- pulse_cuda_apply_patch on real checkpoints ---------- */

static char tmpdir[4096];

static void die(int rc, const char *what)
{
    fprintf(stderr, "gpu_check: %s: %s (%s)\n", what, pulse_strerror(rc), pulse_last_error());
    exit(1);
}

/* Writes a checkpoint of the given specs at path, data from fill(tensor index, bytes). */
static pulse_ckpt *make_ckpt(const char *path, const pulse_tensor_spec *specs, size_t n,
                             const pulse_ckpt *like, unsigned change_per_mille)
{
    pulse_ckpt *c = NULL;
    int rc = pulse_ckpt_create(&c, path, specs, n, NULL);
    if (rc < 0)
        die(rc, "pulse_ckpt_create");
    for (size_t i = 0; i < pulse_ckpt_count(c); i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(c, i);
        if (!like) {
            fill_random(t->data, t->nbytes);
            continue;
        }
        memcpy(t->data, pulse_ckpt_tensor(like, i)->data, t->nbytes);
        for (uint64_t j = 0; j < t->nelems; j++)
            if (rnd() % 1000 < change_per_mille)
                t->data[j * t->elem_size + rnd() % (t->elem_size < 2 ? 1 : 2)] ^= (uint8_t)(1u + rnd() % 3);
    }
    if ((rc = pulse_ckpt_commit(c)) < 0)
        die(rc, "pulse_ckpt_commit");
    pulse_ckpt_close(&c);
    if ((rc = pulse_ckpt_open(&c, path, PULSE_CKPT_READ)) < 0)
        die(rc, "pulse_ckpt_open");
    return c;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Applies old->new on the device; returns 1 when the device tensors equal new bit for bit.
 * *seconds gets the apply's wall time; *copy_seconds a device-to-device copy of the same bytes. */
static int device_apply(const pulse_ckpt *old, const pulse_ckpt *new, pulse_value_code code,
                        uint32_t chunk, int threads, double *seconds, double *copy_seconds, size_t *patch_bytes)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/p-%d.patch", tmpdir, (int)code);
    pulse_diff_opts o;
    pulse_diff_opts_default(&o);
    o.values = code;
    o.chunk_elems = chunk;
    int rc = pulse_patch_diff(old, new, &o, path);
    if (rc < 0)
        die(rc, "pulse_patch_diff");
    pulse_patch *p = NULL;
    if ((rc = pulse_patch_open(&p, path)) < 0)
        die(rc, "pulse_patch_open");
    FILE *f = fopen(path, "rb");
    if (f && fseek(f, 0, SEEK_END) == 0)
        *patch_bytes = (size_t)ftell(f);
    if (f)
        fclose(f);
    size_t n = pulse_ckpt_count(old);
    void **dev = xmalloc(n * sizeof(void *)), **spare = xmalloc(n * sizeof(void *));
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(old, i);
        dev[i] = to_dev(t->data, t->nbytes);
        spare[i] = dalloc(t->nbytes);
        total += t->nbytes;
    }
    cudaStream_t st;
    CU(cudaStreamCreate(&st));
    CU(cudaDeviceSynchronize());
    double t0 = now();
    rc = pulse_cuda_apply_patch(p, dev, n, st, threads);
    CU(cudaStreamSynchronize(st));
    *seconds = now() - t0;
    if (rc < 0)
        die(rc, "pulse_cuda_apply_patch");
    t0 = now();
    for (size_t i = 0; i < n; i++)
        CU(cudaMemcpyAsync(spare[i], dev[i], pulse_ckpt_tensor(old, i)->nbytes, cudaMemcpyDeviceToDevice, st));
    CU(cudaStreamSynchronize(st));
    *copy_seconds = now() - t0;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor *t = pulse_ckpt_tensor(new, i);
        uint8_t *h = xmalloc(t->nbytes);
        from_dev(h, dev[i], t->nbytes);
        if (!same(h, t->data, t->nbytes)) {
            fprintf(stderr, "  apply: tensor %s differs from the new checkpoint\n", t->name);
            ok = 0;
        }
        free(h);
        cudaFree(dev[i]), cudaFree(spare[i]);
    }
    (void)total;
    CU(cudaStreamDestroy(st));
    free(dev), free(spare);
    pulse_patch_close(&p);
    unlink(path);
    return ok;
}

static void check_apply(void)
{
    static const pulse_tensor_spec specs[] = {
        {"a.bf16", "BF16", 2, {300, 1001}}, {"b.f16", "F16", 1, {4097}}, {"c.f32", "F32", 1, {70001}},
        {"d.e4m3", "F8_E4M3", 1, {5000}}, {"e.e5m2", "F8_E5M2", 1, {1}}, {"f.i64", "I64", 1, {999}},
    };
    size_t n = sizeof(specs) / sizeof(specs[0]);
    char p0[4200], p1[4200];
    snprintf(p0, sizeof(p0), "%s/old.safetensors", tmpdir);
    snprintf(p1, sizeof(p1), "%s/new.safetensors", tmpdir);
    pulse_ckpt *old = make_ckpt(p0, specs, n, NULL, 0), *new = make_ckpt(p1, specs, n, old, 30);
    /* small chunks: many chunks, so every worker's staging slot is refilled many times; one
     * worker, and several queueing onto the one stream */
    static const int threads[] = {1, 4};
    for (int code = 0; code < 2; code++)
        for (int t = 0; t < 2; t++) {
            double s, cs;
            size_t pb = 0;
            int ok = device_apply(old, new, (pulse_value_code)code, 4096, threads[t], &s, &cs, &pb);
            char name[64];
            snprintf(name, sizeof name, "apply_patch (%s, %d thread%s)", code ? "ulp" : "abs", threads[t],
                     threads[t] > 1 ? "s" : "");
            report(name, ok);
        }
    pulse_ckpt_close(&old), pulse_ckpt_close(&new);
    unlink(p0), unlink(p1);
}

/* 100M BF16 elements in 4 tensors, 1% and 5% changed, ulp and abs: apply vs D2D copy. */
static void bench(void)
{
    static const pulse_tensor_spec specs[] = {
        {"l0", "BF16", 2, {5000, 5000}}, {"l1", "BF16", 2, {5000, 5000}},
        {"l2", "BF16", 2, {5000, 5000}}, {"l3", "BF16", 2, {5000, 5000}},
    };
    char p0[4200], p1[4200];
    snprintf(p0, sizeof(p0), "%s/bench-old.safetensors", tmpdir);
    snprintf(p1, sizeof(p1), "%s/bench-new.safetensors", tmpdir);
    pulse_ckpt *old = make_ckpt(p0, specs, 4, NULL, 0);
    printf("\n%-8s %-5s %-8s %12s %12s %12s %12s %10s\n", "changed", "code", "threads", "patch MB", "apply ms",
           "d2d copy ms", "apply GB/s*", "vs copy");
    static const unsigned pm[] = {10, 50};
    for (int c = 0; c < 2; c++) {
        pulse_ckpt *new = make_ckpt(p1, specs, 4, old, pm[c]);
        for (int code = 1; code >= 0; code--)
            for (int threads = 1; threads >= 0; threads--) {   /* one, then all cores (0) */
                double s, cs;
                size_t pb = 0;
                int ok = device_apply(old, new, (pulse_value_code)code, PULSE_PATCH_DEFAULT_CHUNK, threads, &s, &cs,
                                      &pb);
                if (!ok)
                    failures++;
                double bytes = 100e6 * 2;
                printf("%6.1f%%  %-5s %-8s %12.1f %12.2f %12.3f %12.1f %9.1fx%s\n", pm[c] / 10.0, code ? "ulp" : "abs",
                       threads ? "1" : "all", pb / 1e6, s * 1e3, cs * 1e3, bytes / s / 1e9, s / cs,
                       ok ? "" : "  MISMATCH");
            }
        pulse_ckpt_close(&new);
        unlink(p1);
    }
    printf("* tensor bytes (200 MB) / apply wall time, verify + host decode included\n");
    pulse_ckpt_close(&old);
    unlink(p0);
}

int main(int argc, char **argv)
{
    int do_bench = argc > 1 && strcmp(argv[1], "--bench") == 0;
    int count = 0;
    if (pulse_cuda_device_count(&count) < 0 || count < 1) {
        printf("gpu_check: no CUDA device (%s): nothing run\n", pulse_last_error());
        return 77;
    }
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d), %d device(s)\n", prop.name, prop.major, prop.minor, count);
    pulse_kernels_init_c(&ref);
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/pulse-gpu-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("gpu_check: mkdtemp");
        return 1;
    }
    for (unsigned w = 1; w <= 4; w *= 2) {
        check_scatter(w, 0);
        check_scatter(w, 1);
        check_diff(w);
    }
    check_view_bits();
    for (int v = 0; v < PULSE_VIEW_COUNT; v++)
        check_gate(v);
    check_scatter_add();
    check_apply();
    if (do_bench)
        bench();
    rmdir(tmpdir);
    printf("\ngpu_check: %s (%d failing)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
