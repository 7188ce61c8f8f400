/* SPDX-License-Identifier: Apache-2.0 */
/* The one progress meter of long transfers: bytes done, rate and ETA on stderr, on a terminal only. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/progress.h"

void pulse_meter_begin(pulse_meter *m, const char *label, int want)
{
    m->label = label ? label : "";
    m->want = want < 0 && !isatty(STDERR_FILENO) ? 0 : want;
    m->after_s = 1.0;
    const char *env = getenv("PULSE_PROGRESS_AFTER_MS");
    char *end;
    unsigned long ms = env && *env ? strtoul(env, &end, 10) : 0;
    if (env && *env && !*end && ms <= 60000)
        m->after_s = (double)ms / 1000.0;
    m->start = pulse_monotonic_s();
    m->last = 0;
    m->last_done = 0;
    m->shown = 0;
}

void pulse_meter_tick(pulse_meter *m, uint64_t done, uint64_t total)
{
    if (!m->want)
        return;
    double t = pulse_monotonic_s();
    if (done < m->last_done) {
        pulse_meter_end(m);
        m->start = t;
        m->last = 0;
    }
    m->last_done = done;
    int final = total && done >= total;
    if (t - m->start < m->after_s || (!final && t - m->last < 0.25))
        return;
    m->last = t;
    m->shown = 1;
    double mib = 1024.0 * 1024.0, el = t - m->start > 1e-3 ? t - m->start : 1e-3;
    double rate = (double)done / el;
    char eta[32] = "";
    if (total && done < total && rate > 0)
        snprintf(eta, sizeof eta, "  ETA %.0f s", (double)(total - done) / rate);
    if (total)
        fprintf(stderr, "\r  %s%s%.1f / %.1f MiB  %.1f MiB/s%s   ", m->label, *m->label ? " " : "",
                (double)done / mib, (double)total / mib, rate / mib, eta);
    else
        fprintf(stderr, "\r  %s%s%.1f MiB  %.1f MiB/s   ", m->label, *m->label ? " " : "", (double)done / mib,
                rate / mib);
}

void pulse_meter_fn(void *ctx, uint64_t done, uint64_t total)
{
    pulse_meter_tick(ctx, done, total);
}

void pulse_meter_end(pulse_meter *m)
{
    if (m->shown)
        fputc('\n', stderr);
    m->shown = 0;
}
