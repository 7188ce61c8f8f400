/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: the publisher's copy of its last published state as a hard link to the published file itself (node/sync/copy_link.c). */
#ifndef PULSE_NODE_SYNC_COPY_LINK_H
#define PULSE_NODE_SYNC_COPY_LINK_H

/* A checkpoint file just published becomes the copy at TO (the next diff's base) by a hard
 * link, not by writing its bytes: what it looks like (device, inode, size, mtime) goes to
 * DIR/last.link. 0; 1 where no link can be made (another file system, a file system without
 * links): the caller copies; or an error. A link left at TO's temporary by a failure is removed. */
int copy_link_make(const char *from, const char *to, const char *dir);

/* Whether the copy at PATH can be used as it stands: 1 when it is not a link this publisher made
 * (DIR/last.link names another file: a copy it wrote, which only it writes) or still looks as it
 * did when linked; 0 when the linked file changed since (someone wrote the trainer's file in
 * place): the caller hashes it before it trusts it. */
int copy_link_unchanged(const char *path, const char *dir);

#endif
