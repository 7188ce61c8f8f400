/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256: placeholder until the checkpoint helper lands the real implementation. */
