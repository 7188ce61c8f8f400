/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: a SIGTERM/SIGINT stop flag and a sleep that wakes when it is raised, for the nodes. */
#ifndef PULSE_NODE_DAEMON_SIGNALS_H
#define PULSE_NODE_DAEMON_SIGNALS_H

/* Installs handlers for SIGTERM and SIGINT that only raise the stop flag (no SA_RESTART, so a
 * blocking call returns EINTR and the loop notices). Safe to call more than once. */
void node_signals_install(void);

/* True once SIGTERM or SIGINT arrived (or node_stop_request was called). */
int node_stop_requested(void);

/* Raises the stop flag by hand (tests, or a node that decides to stop). */
void node_stop_request(void);

/* Holds (hold = 1) or releases (hold = 0) SIGTERM and SIGINT for the calling thread (and the
 * threads it creates meanwhile): a step that must finish (a publish) runs with them held; one
 * that arrived meanwhile is delivered on release and raises the flag. */
void node_signals_hold(int hold);

/* Sleeps up to ms milliseconds; returns early (and returns 1) when the stop flag is raised
 * before or during the sleep, else 0. */
int node_sleep_ms(unsigned ms);

#endif
