/* SPDX-License-Identifier: Apache-2.0 */
/* What `pulse bench` measures with: wall clock, external tools, memory baselines, peak anonymous memory. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "tools/synth/measure.h"

extern char **environ;

double measure_now(void)
{
    return pulse_monotonic_s();
}

double measure_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int measure_spawn(char *const argv[], char *out, size_t size, double *seconds)
{
    int pipefd[2] = { -1, -1 };
    if (out && pipe2(pipefd, O_CLOEXEC) != 0)
        return -2;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out)
        posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    else
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    double t0 = measure_now();
    int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (out)
        close(pipefd[1]);
    if (r != 0) {
        if (out)
            close(pipefd[0]);
        return r == ENOENT ? -1 : -2;
    }
    if (out) {
        size_t used = 0;
        for (;;) {
            char tmp[4096];
            ssize_t n = read(pipefd[0], tmp, sizeof tmp);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            size_t take = (size_t)n < size - 1 - used ? (size_t)n : size - 1 - used;
            memcpy(out + used, tmp, take);
            used += take;
        }
        out[used] = '\0';
        close(pipefd[0]);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -2;
    *seconds = measure_now() - t0;
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    /* posix_spawnp reports a missing program as exit 127 of the child on some libcs. */
    return WEXITSTATUS(status);
}

double measure_memcpy(void *dst, const void *src, size_t n, int repeat)
{
    double best = 1e30;
    for (int i = 0; i < repeat; i++) {
        double t0 = measure_now();
        memcpy(dst, src, n);
        double dt = measure_now() - t0;
        if (dt < best)
            best = dt;
    }
    return best;
}

/* Both arrays side by side, as a diff reads its two checkpoints: two streams in flight read
 * faster than one after the other (16.6 against 18.8 ms for the bench pair on a Zen 3 VM). */
static uint64_t read2_words(const uint8_t *x, const uint8_t *y, size_t n)
{
    uint64_t s[8] = { 0 };
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t w[4], v[4];
        memcpy(w, x + i, sizeof w);
        memcpy(v, y + i, sizeof v);
        for (int j = 0; j < 4; j++) {
            s[j] += w[j];
            s[4 + j] += v[j];
        }
    }
    for (; i < n; i++)
        s[0] += (uint64_t)x[i] + y[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

#if defined(__x86_64__)
#include <immintrin.h>
/* The same with 32-byte loads: on a Zen 3 VM the 16-byte loop above is bound by its own
 * instructions (23 ms for the bench pair) where this one reaches the memory's rate (16.6 ms),
 * and the baseline must be the machine's, not the compiler's. */
__attribute__((target("avx2"))) static uint64_t read2_avx2(const uint8_t *x, const uint8_t *y, size_t n)
{
    __m256i sx = _mm256_setzero_si256(), sy = sx;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        sx = _mm256_add_epi64(sx, _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)(x + i)),
                                                   _mm256_loadu_si256((const __m256i *)(x + i + 32))));
        sy = _mm256_add_epi64(sy, _mm256_add_epi64(_mm256_loadu_si256((const __m256i *)(y + i)),
                                                   _mm256_loadu_si256((const __m256i *)(y + i + 32))));
    }
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, _mm256_add_epi64(sx, sy));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + read2_words(x + i, y + i, n - i);
}
#endif

uint64_t measure_read2(const uint8_t *x, size_t nx, const uint8_t *y, size_t ny)
{
    size_t n = nx < ny ? nx : ny;
    uint64_t s;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        s = read2_avx2(x, y, n);
    else
#endif
        s = read2_words(x, y, n);
    /* the longer array's rest (layouts differ only when the checkpoints do) */
    for (size_t i = n; i < nx; i++)
        s += x[i];
    for (size_t i = n; i < ny; i++)
        s += y[i];
    return s;
}

void measure_touch_lines(uint8_t *p, size_t n, int delta)
{
    volatile uint8_t *v = p;
    for (size_t i = 0; i < n; i += 64)
        v[i] = (uint8_t)(v[i] + delta);
}

size_t measure_llc_bytes(void)
{
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v > 0)
        return (size_t)v;
    /* Where the libc does not know (aarch64), the largest cache sysfs lists for CPU 0. */
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], text[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        if (fgets(text, sizeof text, f)) {
            char *end;
            unsigned long long n = strtoull(text, &end, 10);
            n <<= *end == 'K' ? 10 : *end == 'M' ? 20 : 0;
            if (n > best)
                best = (size_t)n;
        }
        fclose(f);
    }
    return best ? best : (size_t)32 << 20;
}

/* Where measure_cold's sums go, so that its reads cannot be optimised away. */
volatile uint64_t measure_cold_sink;

size_t measure_cold(void)
{
    static uint8_t *buf;
    static size_t n;
    if (!buf) {
        size_t want = 2 * measure_llc_bytes();
        want = want < ((size_t)64 << 20) ? (size_t)64 << 20 : want > ((size_t)2 << 30) ? (size_t)2 << 30 : want;
        if (!(buf = malloc(want)))
            return 0;
        n = want;
        memset(buf, 1, n);   /* real pages, not the shared zero page */
    }
    measure_cold_sink += measure_read2(buf, n / 2, buf + n / 2, n / 2);
    return n;
}

uint64_t measure_rss_anon_kb(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "RssAnon:", 8)) {
            kb = strtoull(line + 8, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

struct measure_sampler {
    pthread_t thread;
    atomic_int stop;
    unsigned period_us;
    uint64_t peak_kb;
};

static void *sampler_main(void *arg)
{
    measure_sampler *s = arg;
    while (!atomic_load(&s->stop)) {
        uint64_t kb = measure_rss_anon_kb();
        if (kb > s->peak_kb)
            s->peak_kb = kb;
        usleep(s->period_us);
    }
    return NULL;
}

int measure_sampler_start(measure_sampler **out, unsigned period_us)
{
    measure_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->period_us = period_us;
    s->peak_kb = measure_rss_anon_kb();
    if (pthread_create(&s->thread, NULL, sampler_main, s) != 0) {
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

uint64_t measure_sampler_stop(measure_sampler **sp)
{
    measure_sampler *s = *sp;
    if (!s)
        return 0;
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    uint64_t kb = measure_rss_anon_kb();
    uint64_t peak = s->peak_kb > kb ? s->peak_kb : kb;
    free(s);
    *sp = NULL;
    return peak;
}
