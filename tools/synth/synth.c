/* SPDX-License-Identifier: Apache-2.0 */
/* Synthetic trainer: placeholder until its owner lands it. */
