/* SPDX-License-Identifier: Apache-2.0 */
/* Umbrella header of libpulseweights: include this, link with `pkg-config --libs pulseweights`. */
#ifndef PULSEWEIGHTS_H
#define PULSEWEIGHTS_H

#include "pulseweights/error.h"
#include "pulseweights/checkpoint.h"
#include "pulseweights/keys.h"
#include "pulseweights/record.h"
#include "pulseweights/manifest.h"
#include "pulseweights/sync.h"
#include "pulseweights/patch.h"
#include "pulseweights/store.h"
#include "pulseweights/loco.h"

#endif
