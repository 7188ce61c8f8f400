/* SPDX-License-Identifier: Apache-2.0 */
/* Scalar reference kernels: placeholder until the kernels helper lands them. */
