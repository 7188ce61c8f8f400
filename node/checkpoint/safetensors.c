/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors reader/writer: placeholder until the checkpoint helper lands it. */
