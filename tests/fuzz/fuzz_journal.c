/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the follower's step journal (STATE/journal, a file anyone who can write the state directory can plant): any bytes are refused cleanly or read as a journal that writes back and reads again as the same entry. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node/sync/journal.h"
#include "pulseweights/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/journal", dir);
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/pulse-fuzz-journal.XXXXXX");
        if (!mkdtemp(dir))
            abort();
        atexit(cleanup);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/journal", dir);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
    node_journal j, again;
    int found = 0;
    int r = journal_read(dir, &j, &found);
    if (r) {
        /* Refused: one line naming the file, and nothing read. */
        if (found || r != PULSE_ERR_FORMAT || !strstr(pulse_last_error(), path))
            abort();
        return 0;
    }
    if (!found || (j.phase != JOURNAL_APPLYING && j.phase != JOURNAL_APPLIED) || memchr(j.rel, 0, sizeof j.rel) == NULL)
        abort();
    /* What was accepted is an entry: written back, it reads as the same one. */
    if (journal_write(dir, &j, 0) != 0 || journal_read(dir, &again, &found) != 0 || !found ||
        again.phase != j.phase || again.kind != j.kind || again.step != j.step ||
        memcmp(again.base, j.base, 32) || memcmp(again.result, j.result, 32) || strcmp(again.rel, j.rel) ||
        again.staged != j.staged || (j.staged && memcmp(again.head, j.head, 32)))
        abort();
    return 0;
}
