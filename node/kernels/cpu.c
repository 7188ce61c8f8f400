/* SPDX-License-Identifier: Apache-2.0 */
/* CPU detection: placeholder until the kernels helper lands them. */
