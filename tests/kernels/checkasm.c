/* SPDX-License-Identifier: Apache-2.0 */
/* checkasm-style kernel test harness: runs every family of checks (check_*.c) on every ISA table against the _c reference, or times them (--bench). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "checkasm.h"

/* ---------- inputs ---------- */

uint64_t checkasm_rng = 0x9e3779b97f4a7c15ull;

const size_t checkasm_lengths[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 96,
    127, 128, 129, 191, 255, 256, 257, 511, 1000, 4097, 65537, 100003};
const size_t checkasm_lengths_count = sizeof checkasm_lengths / sizeof checkasm_lengths[0];

/* ---------- memory with traps ---------- */

void *guard_alloc(guarded *g, size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t data_pages = (bytes + page - 1) / page;
    g->map_size = (data_pages + 1) * page;
    g->map = mmap(NULL, g->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) { perror("mmap"); exit(2); }
    uint8_t *guard = (uint8_t *)g->map + data_pages * page;
    if (mprotect(guard, page, PROT_NONE)) { perror("mprotect"); exit(2); }
    return guard - bytes;
}

void guard_free(guarded *g) { munmap(g->map, g->map_size); }

enum { CANARY = 64 };
static const uint8_t canary_byte = 0xa5;

void *canary_alloc(size_t bytes)
{
    uint8_t *p = malloc(bytes + 2 * CANARY);
    if (!p) { perror("malloc"); exit(2); }
    memset(p, canary_byte, bytes + 2 * CANARY);
    return p + CANARY;
}

int canary_intact(const void *data, size_t bytes)
{
    const uint8_t *p = (const uint8_t *)data;
    for (size_t i = 0; i < CANARY; i++)
        if (p[-1 - (ptrdiff_t)i] != canary_byte || p[bytes + i] != canary_byte)
            return 0;
    return 1;
}

void canary_free(void *data) { free((uint8_t *)data - CANARY); }

/* ---------- the tally ---------- */

int checkasm_count, checkasm_failures;
const char *cur_isa;
size_t cur_n;
const char *cur_pattern;
int cur_placement;

/* ---------- the families, the ISA tables ---------- */

/* In this order: a full run draws the same random stream as the single file it was split from. */
static const struct {
    const char *name;
    checkasm_check_fn check;
    checkasm_bench_fn bench; /* NULL: nothing timed */
} families[] = {
    {"diff", checkasm_check_diff, checkasm_bench_diff},
    {"apply", checkasm_check_apply, NULL},
    {"rice", checkasm_check_rice, NULL},
    {"pack", checkasm_check_pack, NULL},
    {"gate", checkasm_check_gate, checkasm_bench_gate},
    {"ctx", checkasm_check_ctx, checkasm_bench_ctx},
};
enum { FAMILY_COUNT = sizeof families / sizeof families[0] };

typedef int (*isa_init)(pulse_kernels *);
static const struct { const char *name; isa_init init; unsigned flag; } isas[] = {
    {"avx2", pulse_kernels_init_avx2, PULSE_CPU_AVX2},
    {"avx512", pulse_kernels_init_avx512, PULSE_CPU_AVX512},
    {"neon", pulse_kernels_init_neon, PULSE_CPU_NEON},
};

#if defined(__x86_64__)
#include <cpuid.h>
/* clang 14's __builtin_cpu_supports does not know "f16c": CPUID.1:ECX bit 29 */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1);
}
#endif

/* What the CPU has before PULSE_CPU_MASK, asked independently of cpu.c, so that a detection
 * bug cannot silently skip a table. */
static unsigned cpu_has_raw(unsigned flag)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (flag == PULSE_CPU_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") && has_f16c();
    if (flag == PULSE_CPU_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi")
               && __builtin_cpu_supports("avx512vbmi2");
    return 0;
#elif defined(__aarch64__)
    return flag == PULSE_CPU_NEON;
#else
    (void)flag;
    return 0;
#endif
}

static unsigned env_mask(void)
{
    const char *m = getenv("PULSE_CPU_MASK");
    return m && *m ? (unsigned)strtoul(m, NULL, 16) : 0;
}

/* ---------- --bench ---------- */

size_t bench_bytes = 64u << 20;

double checkasm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    return out[0] + out[1] + out[2] + out[3]; /* n is a multiple of 16 here */
}
#endif

static volatile uint64_t bench_sink;

static void bench_machine(void)
{
    size_t bytes = 256u << 20;
    uint64_t *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) { perror("malloc"); exit(2); }
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    double best = 1e9;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2")) {
        for (int rep = 0; rep < 5; rep++) {
            double t0 = checkasm_now();
            bench_sink += sum_avx2(src, bytes / 8);
            double t = checkasm_now() - t0;
            best = t < best ? t : best;
        }
        printf("%-8s %-22s %8.2f GB/s\n", "machine", "read (sum, avx2)", bytes / best / 1e9);
    }
#endif
    best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = checkasm_now();
        memcpy(dst, src, bytes);
        double t = checkasm_now() - t0;
        best = t < best ? t : best;
    }
    bench_sink += dst[rnd() % (bytes / 8)];
    printf("%-8s %-22s %8.2f GB/s (bytes copied / s)\n", "machine", "memcpy 256 MiB", bytes / best / 1e9);
    free(src);
    free(dst);
}

static void usage(void)
{
    fprintf(stderr, "usage: checkkernels [--bench [--bench-bytes N]] [--expect-name NAME] [--list] [FAMILY...]\n");
}

/* Runs the selected families on table t against the reference r; adds each family's checks to
 * per_family. */
static void run_families(const pulse_kernels *t, const pulse_kernels *r, const int *selected, int *per_family)
{
    for (int f = 0; f < FAMILY_COUNT; f++) {
        if (!selected[f])
            continue;
        int before = checkasm_count;
        families[f].check(t, r);
        per_family[f] += checkasm_count - before;
    }
}

int main(int argc, char **argv)
{
    int bench = 0, any_selected = 0;
    int selected[FAMILY_COUNT] = { 0 }, per_family[FAMILY_COUNT] = { 0 };
    const char *expect_name = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) {
            bench = 1;
        } else if (!strcmp(argv[i], "--bench-bytes") && i + 1 < argc) {
            bench_bytes = (size_t)strtoull(argv[++i], NULL, 0) & ~(size_t)1;
        } else if (!strcmp(argv[i], "--expect-name") && i + 1 < argc) {
            expect_name = argv[++i];
        } else if (!strcmp(argv[i], "--list")) {
            for (int f = 0; f < FAMILY_COUNT; f++)
                printf("%s%s\n", families[f].name, families[f].bench ? " (--bench)" : "");
            return 0;
        } else if (argv[i][0] != '-') {
            int f = 0;
            while (f < FAMILY_COUNT && strcmp(argv[i], families[f].name))
                f++;
            if (f == FAMILY_COUNT) {
                fprintf(stderr, "checkkernels: no kernel family '%s' (--list names them)\n", argv[i]);
                return 2;
            }
            selected[f] = any_selected = 1;
        } else {
            usage();
            return 2;
        }
    }
    if (!any_selected)
        for (int f = 0; f < FAMILY_COUNT; f++)
            selected[f] = 1;

    pulse_kernels ref;
    pulse_kernels_init_c(&ref);
    printf("cpu flags 0x%x (PULSE_CPU_MASK=%s), dispatch table: %s\n", pulse_cpu_flags(),
           getenv("PULSE_CPU_MASK") ? getenv("PULSE_CPU_MASK") : "unset", pulse_kernels_get()->name);

    if (bench) {
        if (bench_bytes == (64u << 20))
            bench_machine();
        for (int f = 0; f < FAMILY_COUNT; f++)
            if (selected[f] && families[f].bench)
                families[f].bench(&ref);
        for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
            pulse_kernels t = ref;
            if (isas[i].init(&t) == 0)
                for (int f = 0; f < FAMILY_COUNT; f++)
                    if (selected[f] && families[f].bench)
                        families[f].bench(&t);
        }
        return 0;
    }

    if (expect_name) {
        CHECK(!strcmp(pulse_kernels_get()->name, expect_name));
        if (strcmp(pulse_kernels_get()->name, expect_name))
            fprintf(stderr, "dispatch table is %s, expected %s\n", pulse_kernels_get()->name, expect_name);
    }

    /* The reference against itself too: proves the harness (guards, canaries, round trips). */
    cur_isa = "c";
    run_families(&ref, &ref, selected, per_family);
    printf("tested: c\n");

    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        pulse_kernels t = ref;
        int masked = (env_mask() & isas[i].flag) != 0;
        if (isas[i].init(&t) != 0) {
            if (cpu_has_raw(isas[i].flag) && !masked) {
                fprintf(stderr, "the CPU has %s but its table was not tested (not built or not detected)\n",
                        isas[i].name);
                CHECK(0);
            } else {
                printf("skipped: %s (%s)\n", isas[i].name, masked ? "masked" : "not on this CPU/build");
            }
            continue;
        }
        cur_isa = isas[i].name;
        run_families(&t, &ref, selected, per_family);
        printf("tested: %s\n", isas[i].name);
    }
    printf("checks per family:");
    for (int f = 0; f < FAMILY_COUNT; f++)
        if (selected[f])
            printf(" %s %d", families[f].name, per_family[f]);
    printf("\n");
    printf("checkkernels: %d checks, %d failed\n", checkasm_count, checkasm_failures);
    return (checkasm_failures || !checkasm_count) ? 1 : 0;
}
