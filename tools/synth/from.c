/* SPDX-License-Identifier: Apache-2.0 */
/* The synthetic trainer's model taken from a real checkpoint: its float tensors, shapes and values as the starting weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fail.h"
#include "pulseweights/checkpoint.h"
#include "tools/synth/synth.h"

int synth_model_from(synth_model *m, const synth_opts *o, const char *path)
{
    memset(m, 0, sizeof *m);
    pulse_ckpt *c = NULL;
    int err = pulse_ckpt_open(&c, path, PULSE_CKPT_READ);
    if (err < 0)
        return err;
    size_t n = pulse_ckpt_count(c);
    m->tensors = calloc(n ? n : 1, sizeof *m->tensors);
    if (!m->tensors) {
        pulse_ckpt_close(&c);
        return pulse_fail(PULSE_ERR_NOMEM, "synth: %zu tensors", n);
    }
    m->from = c;
    for (size_t i = 0; i < n; i++) {
        const pulse_tensor *pt = pulse_ckpt_tensor(c, i);
        if ((pt->dtype != PULSE_DT_F32 && pt->dtype != PULSE_DT_BF16 && pt->dtype != PULSE_DT_F16) ||
            pt->nelems == 0)
            continue;
        if (strlen(pt->name) >= sizeof m->tensors[0].name) {
            synth_model_free(m);
            return pulse_fail(PULSE_ERR_INVALID, "--from %s: tensor name of %zu bytes (at most %zu)", path,
                              strlen(pt->name), sizeof m->tensors[0].name - 1);
        }
        synth_tensor *t = &m->tensors[m->ntensors++];
        snprintf(t->name, sizeof t->name, "%s", pt->name);
        t->nelems = pt->nelems;
        /* rows x cols as a matrix of its last dimension, for what reads them as one */
        t->cols = pt->ndim >= 2 ? pt->shape[pt->ndim - 1] : 0;
        t->rows = t->cols ? pt->nelems / t->cols : pt->nelems;
        t->shaped = 1;
        t->ndim = pt->ndim;
        memcpy(t->shape, pt->shape, sizeof t->shape);
        t->src = pt->data;
        t->src_dtype = (int)pt->dtype;
        m->params += pt->nelems;
    }
    if (m->ntensors == 0) {
        synth_model_free(m);
        return pulse_fail(PULSE_ERR_INVALID, "--from %s: no F32, BF16 or F16 tensor to train", path);
    }
    synth_grad_scales(m, o->seed);
    return 0;
}
