/* SPDX-License-Identifier: Apache-2.0 */
/* The one progress meter of long transfers: bytes done, rate and ETA on stderr, on a terminal only. */
#ifndef PULSE_BASE_PROGRESS_H
#define PULSE_BASE_PROGRESS_H

#include <stdint.h>

typedef struct pulse_meter {
    const char *label;   /* printed before the figures ("" for none) */
    int want;            /* -1: only when stderr is a terminal; 0: never; 1: always */
    double after_s;      /* nothing is drawn before this much time passed (PULSE_PROGRESS_AFTER_MS) */
    double start, last;  /* monotonic seconds: this phase's start, the last redraw */
    uint64_t last_done;
    int shown;           /* a line is on the screen, not yet ended */
} pulse_meter;

/* Starts a meter. WANT as in pulse_meter.want. Short work stays silent: the first line is drawn
 * only after 1 s (the environment's PULSE_PROGRESS_AFTER_MS, 0..60000, says otherwise: scripts
 * and tests). */
void pulse_meter_begin(pulse_meter *m, const char *label, int want);

/* DONE bytes of TOTAL (0: unknown; no ETA then). Redraws "\r  LABEL D / T MiB  R MiB/s  ETA Ns"
 * at most every 0.25 s. DONE going down starts a new phase (its own rate) on a new line. */
void pulse_meter_tick(pulse_meter *m, uint64_t done, uint64_t total);

/* pulse_meter_tick in the form of the on_progress callbacks (CTX: the pulse_meter). */
void pulse_meter_fn(void *ctx, uint64_t done, uint64_t total);

/* Ends the line when one was drawn. */
void pulse_meter_end(pulse_meter *m);

#endif
