/* SPDX-License-Identifier: Apache-2.0 */
/* Signed records: placeholder until its owner lands them. */
