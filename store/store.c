/* SPDX-License-Identifier: Apache-2.0 */
/* Store front end: placeholder until the store helper lands it. */
