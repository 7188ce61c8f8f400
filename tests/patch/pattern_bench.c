/* SPDX-License-Identifier: Apache-2.0 */
/* Memory-pattern benchmark (not a test): what one core gets from a file mapping for the write pass's access pattern, with and without the adds' bookkeeping. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tools/synth/measure.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

/* Changes at positions drawn independently with the bench pair's density, as BF16 elements
 * of a MAP_SHARED file mapping like the target of `pulse apply --in-place`. Each variant
 * adds 3 at every change (or a byte to every line for the floor); repeated runs keep adding,
 * which changes the values but not the work. */
static uint16_t *d;
static uint32_t *pos, *line_mask;
static size_t nchanges, nlines;
static volatile uint64_t sink;

/* The scalar adds with ulp2_add16's cursor (node/kernels/kernels_tail.h): after each eight
 * changes, five lines prefetched into L2 from a cursor ~16 KiB past the last one, clamped.
 * Kept a loop: gcc 12 -O3's fully unrolled form of it, loading the eight positions between
 * the adds, measured 21.2-22.1 against 17.8-18.3 ms on the Xeon VM (the kernel takes its
 * positions from registers and runs at 16.4-16.6 ms over the bench pair's real target). */
static void scalar_adds(int prefetch)
{
    uint64_t cur = 0;
    for (size_t j = 0; j + 8 <= nchanges; j += 8) {
#pragma GCC unroll 1
        for (int e = 0; e < 8; e++)
            d[pos[j + e]] = (uint16_t)(d[pos[j + e]] + 3);
        if (!prefetch)
            continue;
        uint64_t lo = pos[j + 7] + 8192 - 128, hi = lo + 2048;
        cur = cur < lo ? lo : cur > hi ? hi : cur;
        for (int i = 0; i < 5; i++)
            __builtin_prefetch(d + cur + 32 * i, 0, 2);
        cur += 160;
    }
}

#ifdef HAVE_X86
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* Every line once, in order: a 64-byte load, the add, a store of the changed lanes only, one
 * prefetch 8 KiB ahead. The masks are given: no bookkeeping at all. */
AVX512 static void every_line(void)
{
    const __m512i add = _mm512_set1_epi16(3);
    for (size_t i = 0; i < nlines; i++) {
        __builtin_prefetch(d + 32 * i + 4096, 0, 2);
        __m512i x = _mm512_add_epi16(_mm512_loadu_si512(d + 32 * i), add);
        _mm512_mask_storeu_epi16(d + 32 * i, (__mmask32)line_mask[i], x);
    }
}

/* The same line loop fed as a kernel would have to feed it from sorted positions: sixteen
 * changes a step scattered (vpscatterdd: a 32-bit store of delta and 0 per change, lanes in
 * order, so a later neighbour overwrites the 0) into a ring of line-sized delta slots, then a
 * fixed number of finished lines flushed, each added from its slot and the slot cleared. */
#define RING_LINES 256u
static uint16_t ring[RING_LINES * 32 + 64] __attribute__((aligned(64)));

AVX512 static inline void flush_line(uint64_t l)
{
    uint16_t *r = ring + (l & (RING_LINES - 1)) * 32;
    __m512i dm = _mm512_load_si512(r);
    __builtin_prefetch(d + 32 * l + 4096, 0, 2);
    __m512i x = _mm512_add_epi16(_mm512_loadu_si512(d + 32 * l), dm);
    _mm512_mask_storeu_epi16(d + 32 * l, _mm512_test_epi16_mask(dm, dm), x);
    _mm512_store_si512(r, _mm512_setzero_si512());
}

AVX512 static void every_line_fed(unsigned per_step)
{
    const __m512i three = _mm512_set1_epi32(3), slots = _mm512_set1_epi32((int)(RING_LINES * 32 - 1));
    uint64_t done = 0;   /* lines below this one are written */
    size_t j = 0;
    for (; j + 16 <= nchanges; j += 16) {
        uint64_t first = pos[j] / 32, last = pos[j + 15] / 32;
        if (__builtin_expect(last - done >= RING_LINES - 2, 0)) {
            /* the ring is about to wrap: finish what lies before this step */
            uint64_t stop = first < done + RING_LINES ? first : done + RING_LINES;
            for (; done < stop; done++)
                flush_line(done);
            done = done < first ? first : done;
        }
        _mm512_i32scatter_epi32(ring, _mm512_and_si512(_mm512_loadu_si512(pos + j), slots), three, 2);
        /* Lines before `last` are complete; past them the flush repeats the last complete
         * line, whose slot is clear by then (a load and a store of nothing). */
        for (unsigned i = 0; i < per_step; i++) {
            flush_line(done < last ? done : last - 1);
            done += done < last;
        }
    }
    for (; j < nchanges; j++) {
        for (; done < pos[j] / 32; done++)
            flush_line(done);
        ring[pos[j] & (RING_LINES * 32 - 1)] = (uint16_t)(ring[pos[j] & (RING_LINES * 32 - 1)] + 3);
    }
    if (nchanges)
        for (; done <= pos[nchanges - 1] / 32; done++)
            flush_line(done);
}
#endif

#define ROUNDS 3
#define REPEAT 5
#define BEST(best, stmt) MEASURE_BEST(REPEAT, 0, measure_now, best, stmt)

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: pattern_bench SCRATCH [MB [CHANGED_PERCENT]]\n"
                        "(SCRATCH: a file created, mapped and removed; default 197 MB, 5.33 %% changed,\n"
                        " the bench pair of docs/performance.md)\n");
        return 2;
    }
    size_t bytes = (argc > 2 ? strtoull(argv[2], NULL, 10) : 197) << 20;
    double pct = argc > 3 ? atof(argv[3]) : 5.33;
    bytes &= ~(size_t)4095;
    int fd = open(argv[1], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
        perror(argv[1]);
        return 1;
    }
    d = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    uint8_t *copy = malloc(bytes);
    nlines = bytes / 64;
    pos = malloc(sizeof *pos * (bytes / 2));
    line_mask = calloc(nlines, sizeof *line_mask);
    if (d == MAP_FAILED || !copy || !pos || !line_mask) {
        perror("pattern_bench");
        return 1;
    }
    memset(d, 1, bytes);   /* in the page cache, every page dirty like a target's */
    memset(copy, 2, bytes);
    uint64_t x = 0x9e3779b97f4a7c15ull, limit = (uint64_t)(pct / 100.0 * 18446744073709551615.0);
    for (size_t i = 0; i < bytes / 2; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (x < limit) {
            pos[nchanges++] = (uint32_t)i;
            line_mask[i / 32] |= 1u << (i % 32);
        }
    }
    size_t touched = 0;
    for (size_t i = 0; i < nlines; i++)
        touched += line_mask[i] != 0;
    printf("%zu MB mapping, %zu changes (%.2f %%), %.1f %% of lines touched; ms, best of %d from memory\n",
           bytes >> 20, nchanges, 100.0 * (double)nchanges / (double)(bytes / 2),
           100.0 * (double)touched / (double)nlines, REPEAT);
#ifdef HAVE_X86
    int avx512 = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
    for (int round = 0; round < ROUNDS; round++) {
        double floor_, adds_pf, adds, memcpy_, line = 0, fed10 = 0, fed12 = 0;
        BEST(floor_, measure_touch_lines((uint8_t *)d, bytes, 1));
        BEST(adds_pf, scalar_adds(1));
        BEST(adds, scalar_adds(0));
#ifdef HAVE_X86
        if (avx512) {
            BEST(line, every_line());
            BEST(fed10, every_line_fed(10));
            BEST(fed12, every_line_fed(12));
        }
#endif
        BEST(memcpy_, memcpy(copy, d, bytes); sink += copy[round]);
        printf("floor %6.2f | adds, cursor %6.2f | adds, no prefetch %6.2f | every line %6.2f | fed, 10 / 12 a step %6.2f / %6.2f | memcpy %6.2f\n",
               1e3 * floor_, 1e3 * adds_pf, 1e3 * adds, 1e3 * line, 1e3 * fed10, 1e3 * fed12, 1e3 * memcpy_);
    }
    munmap(d, bytes);
    close(fd);
    unlink(argv[1]);
    return 0;
}
