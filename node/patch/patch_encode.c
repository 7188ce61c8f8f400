/* SPDX-License-Identifier: Apache-2.0 */
/* Patch encoder: placeholder until the codec helper lands it. */
