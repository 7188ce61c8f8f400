/* SPDX-License-Identifier: Apache-2.0 */
/* The designated trainer publishes a committed round's view by the sync protocol, so followers see rounds as steps. */
#include <inttypes.h>
#include <stdio.h>

#include "base/fail.h"
#include "node/loco/round_internal.h"
#include "pulseweights/sync.h"

int loco_publish_view(round_ctx *c)
{
    const pulse_loco_round_opts *o = c->o;
    uint64_t step = c->st.round + 1;
    char view[4096], state[4096];
    loco_state_path(o->state_dir, "view", step, view);
    if (o->publish_state)
        snprintf(state, sizeof state, "%s", o->publish_state);
    else
        snprintf(state, sizeof state, "%.4000s/publish", o->state_dir);
    pulse_publish_opts po;
    pulse_publish_opts_default(&po);
    po.store_url = o->publish_store ? o->publish_store : o->store_url;
    po.run = o->publish_run;
    po.key_path = o->key_path;
    po.state_dir = state;
    po.threads = o->threads;
    pulse_publisher *p = NULL;
    pulse_sync_step s = { 0 };
    /* The round has committed: a failure here leaves the state at round + 1, and the next round's
     * publication is a patch from the last step that did get out. */
    int r = pulse_publisher_open(&p, &po);
    if (!r)
        r = pulse_publisher_publish(p, view, (int64_t)step, 0, &s);
    pulse_publisher_close(&p);
    if (r)
        return pulse_fail(r, "round %" PRIu64 " committed, but publishing its view as step %" PRIu64 " of run %s "
                          "failed: %s", c->st.round, step, o->publish_run, pulse_last_error());
    c->x.published = 1;
    c->x.publish_already = s.already;
    c->x.published_step = step;
    c->x.publish_bytes = s.moved_bytes;
    loco_say(c, 0, "published the view of theta_%" PRIu64 " as step %" PRIu64 " of run %s (%" PRIu64 " bytes%s)",
             step, step, o->publish_run, s.moved_bytes, s.already ? ", already there" : "");
    return 0;
}
