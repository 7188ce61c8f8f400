#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Prints the least-privilege S3 bucket policy of docs/deploy.md for one bucket: each writer may
# write only its own keys of a run, everyone else is denied writes there, the run's nodes may read.
"""Usage:
  bucket-policy.py --bucket B --run R --trainer UID=NODE [--trainer ...] [--parts N]
                   [--follower UID[=NODE]]... [--reader UID]...
                   [--loco-run L --loco UID=NODE [--loco ...]] [--principal-arn FMT]

UID is the S3 user (RGW: radosgw-admin's --uid); NODE is the node id of the pulse key that user's
node signs with (the hex in NAME.pub; `pulse keygen` prints it). A follower given a NODE may write
its receipts (R/receipts/NODE/...); without one it only reads. A reader (pulse status, pulse manifest
audit) only reads. --parts N: R is published in N parts (docs/sync.md, "A trainer in parts"), so
its part runs R.part-I-of-N (records, heads, receipts; their objects lie under R/objects/) get the
same statements as R; every host of the trainer is a --trainer with the trainer key's NODE.
--principal-arn is the principal for a UID, default "arn:aws:iam:::user/{uid}"
(RGW without tenants; AWS IAM users: "arn:aws:iam::ACCOUNT:user/{uid}").

Resource patterns use one `*` per key segment (records/*/*/NODE, not records/*/NODE): RGW's
matcher ends a `*` at the first occurrence of the character after it and never backtracks."""
import argparse
import json
import re
import sys

NODE_RE = re.compile(r"^[0-9a-f]{64}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# A run's keys start at "[PREFIX/]RUN/": the store URL's prefix, then the run name.
RUN_RE = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")


def fail(msg):
    sys.stderr.write(f"bucket-policy.py: {msg}\n")
    sys.exit(2)


def uid_node(spec, what, need_node):
    uid, sep, node = spec.partition("=")
    if not NAME_RE.match(uid):
        fail(f"{what} '{spec}': the user id must be 1-63 of [A-Za-z0-9._-]")
    if sep and not NODE_RE.match(node):
        fail(f"{what} '{spec}': the node id must be 64 lowercase hex digits (from NAME.pub)")
    if need_node and not sep:
        fail(f"{what} '{spec}': give UID=NODE (the node id its records are signed by)")
    return uid, node or None


def build(a):
    if not NAME_RE.match(a.bucket):
        fail(f"--bucket '{a.bucket}': 1-63 of [A-Za-z0-9._-]")
    for name, val in (("--run", a.run), ("--loco-run", a.loco_run)):
        if val is not None and (not RUN_RE.match(val) or len(val) > 512):
            fail(f"{name} '{val}': [PREFIX/]RUN of [A-Za-z0-9._-] segments")
    if not a.trainer:
        fail("at least one --trainer UID=NODE is needed")
    if a.loco and not a.loco_run:
        fail("--loco needs --loco-run")
    if a.loco_run and not a.loco:
        fail("--loco-run needs at least one --loco UID=NODE")
    if a.loco_run == a.run:
        fail("--loco-run must differ from --run (the serving run is written by its trainers only)")
    if a.parts is not None and not 1 <= a.parts <= 4096:
        fail(f"--parts {a.parts}: 1 to 4096")

    trainers = [uid_node(s, "--trainer", True) for s in a.trainer]
    followers = [uid_node(s, "--follower", False) for s in a.follower]
    readers = [uid_node(s, "--reader", False)[0] for s in a.reader]
    locos = [uid_node(s, "--loco", True) for s in a.loco]

    def arn(uid):
        return a.principal_arn.format(uid=uid)

    def obj(key):
        return f"arn:aws:s3:::{a.bucket}/{key}"

    def who(uids):
        return {"AWS": sorted({arn(u) for u in uids})}

    def sid(what, uid):
        # Statement ids are letters and digits only: "TrainerWritesForTrainer0" for trainer-0.
        words = re.split(r"[^A-Za-z0-9]+", uid)
        return (what + "For" + "".join(w[:1].upper() + w[1:] for w in words))[:120]

    R = a.run
    # The run's own key prefixes: R/, and with parts each part run's (one * within a segment).
    runs = [R] + ([f"{R}.part-*-of-{a.parts}"] if a.parts else [])
    writes = ["s3:PutObject", "s3:AbortMultipartUpload"]
    st = []
    run_readers = [u for u, _ in trainers] + [u for u, _ in followers] + readers
    st.append({"Sid": "ReadRun", "Effect": "Allow", "Principal": who(run_readers),
               "Action": ["s3:GetObject"], "Resource": [obj(f"{r}/*") for r in runs]})
    for uid, node in trainers:
        st.append({"Sid": sid("TrainerWrites", uid), "Effect": "Allow", "Principal": who([uid]),
                   "Action": writes,
                   "Resource": [obj(f"{R}/objects/*")] +
                               [obj(f"{r}/{k}") for r in runs for k in (f"records/*/*/{node}", f"heads/*/{node}")]})
        # Retention: its own records, and any object no kept record names.
        st.append({"Sid": sid("TrainerRetention", uid), "Effect": "Allow", "Principal": who([uid]),
                   "Action": ["s3:DeleteObject"],
                   "Resource": [obj(f"{R}/objects/*")] + [obj(f"{r}/records/*/*/{node}") for r in runs]})
    # Whatever the bucket's ACL says, nobody but the trainers writes or deletes the run's data.
    st.append({"Sid": "OnlyTrainersWriteRunData", "Effect": "Deny",
               "NotPrincipal": who([u for u, _ in trainers]),
               "Action": writes + ["s3:DeleteObject"],
               "Resource": [obj(f"{R}/objects/*")] + [obj(f"{r}/{k}") for r in runs for k in ("records/*", "heads/*")]})
    for uid, node in followers:
        if not node:
            continue
        st.append({"Sid": sid("FollowerReceipts", uid), "Effect": "Allow", "Principal": who([uid]),
                   "Action": ["s3:PutObject"], "Resource": [obj(f"{r}/receipts/{node}/*") for r in runs]})
        st.append({"Sid": sid("OnlyFollowerWritesReceipts", uid), "Effect": "Deny",
                   "NotPrincipal": who([uid]), "Action": writes + ["s3:DeleteObject"],
                   "Resource": [obj(f"{r}/receipts/{node}/*") for r in runs]})
    # A receipt is create-if-absent and never removed by its node.
    if any(node for _, node in followers):
        st.append({"Sid": "NoReceiptDeletes", "Effect": "Deny", "Principal": who(run_readers),
                   "Action": ["s3:DeleteObject"], "Resource": [obj(f"{r}/receipts/*") for r in runs]})

    if a.loco_run:
        L = a.loco_run
        luids = [u for u, _ in locos]
        st.append({"Sid": "ReadLocoRun", "Effect": "Allow", "Principal": who(luids),
                   "Action": ["s3:GetObject"], "Resource": [obj(f"{L}/*")]})
        for uid, node in locos:
            # Shard objects share objects/ and the round's plan keys are shared by design
            # (docs/loco.md): every LoCo trainer may create them.
            st.append({"Sid": sid("LocoWrites", uid), "Effect": "Allow", "Principal": who([uid]),
                       "Action": writes,
                       "Resource": [obj(f"{L}/objects/*"), obj(f"{L}/records/*/*/{node}"),
                                    obj(f"{L}/loco-rs/*/*/{node}"), obj(f"{L}/loco-rs/*/*/plan")]})
            st.append({"Sid": sid("OnlyLocoTrainerWritesOwn", uid), "Effect": "Deny",
                       "NotPrincipal": who([uid]), "Action": writes + ["s3:DeleteObject"],
                       "Resource": [obj(f"{L}/records/*/*/{node}"), obj(f"{L}/loco-rs/*/*/{node}")]})
        st.append({"Sid": "OnlyLocoTrainersWriteLocoRun", "Effect": "Deny",
                   "NotPrincipal": who(luids), "Action": writes + ["s3:DeleteObject"],
                   "Resource": [obj(f"{L}/*")]})
        st.append({"Sid": "NoLocoDeletes", "Effect": "Deny", "Principal": who(luids),
                   "Action": ["s3:DeleteObject"], "Resource": [obj(f"{L}/*")]})
    # Listing, unconditionally: S3 answers a GET of a missing key with 403 instead of 404 to whoever
    # may not list the bucket (a condition on s3:prefix does not hold there), and pulse needs the 404
    # (a head before the first publish, a LoCo plan not yet written). Names only: reading needs
    # s3:GetObject, which stays within the run.
    # The incomplete multipart uploads too: a publisher aborts its own stale ones and the audit
    # reports them (docs/deploy.md, "Incomplete multipart uploads").
    listers = run_readers + [u for u, _ in locos]
    st.insert(1, {"Sid": "ListBucket", "Effect": "Allow", "Principal": who(listers),
                  "Action": ["s3:ListBucket", "s3:ListBucketMultipartUploads"],
                  "Resource": [f"arn:aws:s3:::{a.bucket}"]})
    seen = {}
    for x in st:  # ids unique within the policy (users "a.b" and "a-b" both give "AB")
        n = seen.get(x["Sid"], 0)
        seen[x["Sid"]] = n + 1
        if n:
            x["Sid"] += str(n + 1)
    return {"Version": "2012-10-17", "Statement": st}


def dump(o, ind=0, lead=0, width=100):
    """JSON with each value on one line where it fits in width columns (lead: columns already used
    on its first line), else one member per line, indented by two."""
    flat = json.dumps(o)
    if not isinstance(o, (dict, list)) or ind + lead + len(flat) <= width:
        return flat
    pad = " " * (ind + 2)
    if isinstance(o, dict):
        items = [f"{pad}{json.dumps(k)}: {dump(v, ind + 2, len(json.dumps(k)) + 2, width)}"
                 for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * ind + "}"
    items = [pad + dump(v, ind + 2, 0, width) for v in o]
    return "[\n" + ",\n".join(items) + "\n" + " " * ind + "]"


def main():
    ap = argparse.ArgumentParser(description="least-privilege bucket policy for a pulse run",
                                 epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--run", required=True,
                    help="the run followers pull, after the store URL's prefix if any: [PREFIX/]RUN")
    ap.add_argument("--trainer", action="append", default=[], metavar="UID=NODE")
    ap.add_argument("--parts", type=int, metavar="N", help="R is published in N parts (its part runs too)")
    ap.add_argument("--follower", action="append", default=[], metavar="UID[=NODE]")
    ap.add_argument("--reader", action="append", default=[], metavar="UID")
    ap.add_argument("--loco-run", help="the LoCo trainers' run (their shards and rounds): [PREFIX/]RUN")
    ap.add_argument("--loco", action="append", default=[], metavar="UID=NODE")
    ap.add_argument("--principal-arn", default="arn:aws:iam:::user/{uid}", metavar="FMT")
    a = ap.parse_args()
    if "{uid}" not in a.principal_arn:
        fail("--principal-arn must contain {uid}")
    sys.stdout.write(dump(build(a)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
