# SPDX-License-Identifier: Apache-2.0
# Shared setup of the least-privilege tests (policy.sh, policy_loco.sh; docs/deploy.md): RGW users,
# a bucket of the test's own owned by an administrator, its policy, and refusal checks.  Source it.
#
# The refusals are real checks: with PULSE_POLICY_OPEN=1 make_bucket applies instead a policy that
# lets every named user do anything in the bucket (what sharing one key amounts to), and with
# PULSE_POLICY_NO_DENY=1 it drops the policy's Deny statements; the tests must then fail.
# shellcheck shell=bash disable=SC2034  # the variables set here are for the sourcing tests
# shellcheck source=tests/s3/lib.sh disable=SC2154  # work, s3_dir come from lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ -z "${PULSE_RGW_DIR:-}" ] || [ ! -s "$PULSE_RGW_DIR/ceph.conf" ]; then
  echo "SKIP: PULSE_RGW_DIR (the test RGW's directory, for radosgw-admin) is not set"
  exit 77
fi
root=$(cd "$s3_dir/../.." && pwd)
buckets=()

policy_cleanup() {
  local b
  for b in "${buckets[@]}"; do
    timeout 120 radosgw-admin -c "$PULSE_RGW_DIR/ceph.conf" bucket rm --bucket "$b" --purge-objects \
      >/dev/null 2>&1 || true
  done
  cleanup
}
trap policy_cleanup EXIT

# as UID CMD...: CMD with that user's credentials, and only those.
as() {
  local u=$1
  shift
  (
    unset AWS_SESSION_TOKEN AWS_PROFILE
    # shellcheck disable=SC1090
    . "$PULSE_RGW_DIR/users/$u.env"
    "$@"
  )
}
P() { timeout 120 "$PULSE_BIN" "$@"; }
node_of() { awk '{print $2}' "$1.pub"; }

# users UID...: the RGW users (made once per server; the same keys later).
users() { bash "$s3_dir/rgw_users.sh" create "$PULSE_RGW_DIR" "$@" >/dev/null || fail "could not create RGW users $*"; }

# make_bucket NAME USER... -- BUCKET-POLICY-ARGS...: pulse-owner (an administrator that runs no node)
# makes bucket NAME and applies the policy of scripts/bucket-policy.py --bucket NAME ARGS (in
# NAME.json). USER... are the node users the PULSE_POLICY_OPEN policy opens the bucket to.
make_bucket() {
  local b=$1 code u
  shift
  local open=()
  while [ "$1" != -- ]; do open+=("\"arn:aws:iam:::user/$1\""); shift; done
  shift
  users pulse-owner
  code=$(as pulse-owner s3 PUT "/$b" -o "$work/body") || true
  [ "$code" = 200 ] || fail "the owner could not create bucket $b (HTTP $code)"
  buckets+=("$b")
  if [ "${PULSE_POLICY_OPEN:-0}" = 1 ]; then
    echo "PULSE_POLICY_OPEN=1: every node may do anything in $b (the refusals must fail)"
    u=$(IFS=,; echo "${open[*]}")
    printf '{"Version": "2012-10-17", "Statement": [{"Sid": "Open", "Effect": "Allow", "Principal": {"AWS": [%s]}, "Action": ["s3:*"], "Resource": ["arn:aws:s3:::%s", "arn:aws:s3:::%s/*"]}]}\n' \
      "$u" "$b" "$b" >"$b.json"
  else
    python3 "$root/scripts/bucket-policy.py" --bucket "$b" "$@" >"$b.json" \
      || fail "scripts/bucket-policy.py $* failed"
    if [ "${PULSE_POLICY_NO_DENY:-0}" = 1 ]; then
      echo "PULSE_POLICY_NO_DENY=1: the Allow statements only (refusals under an open ACL must fail)"
      python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))
p["Statement"] = [s for s in p["Statement"] if s["Effect"] == "Allow"]
json.dump(p, open(sys.argv[1], "w"))' "$b.json"
    fi
  fi
  code=$(as pulse-owner s3 PUT "/$b" -q policy -d "$b.json" -o "$work/body") || true
  [ "$code" = 204 ] || [ "$code" = 200 ] || fail "PUT $b?policy answered HTTP $code: $(cat "$work/body")"
  ok "bucket $b made by pulse-owner, its policy applied"
}

# refused USER WHAT CMD...: CMD with USER's credentials must exit non-zero with one line naming HTTP
# 403. Every case runs; check_refused then lists together the ones that were not refused.
missed=()
tried=0
refused() {
  local u=$1 what=$2 rc=0
  shift 2
  tried=$((tried + 1))
  as "$u" "$@" >"$work/out" 2>"$work/err" || rc=$?
  if [ "$rc" = 0 ]; then
    missed+=("$u could $what")
  elif ! grep -q "access denied by the bucket's policy or ACL: these credentials may not .*(HTTP 403" "$work/err" ||
       [ "$(wc -l <"$work/err")" != 1 ]; then
    # Accepted credentials that the policy refuses: said so, not "credentials refused".
    missed+=("$u: $what failed, but not with one line saying the policy denied it (HTTP 403): $(cat "$work/err")")
  else
    echo "ok   $u cannot $what: $(cat "$work/err")"
  fi
}
check_refused() {
  if [ "${#missed[@]}" != 0 ]; then
    printf '  %s\n' "${missed[@]}" >&2
    fail "${#missed[@]} of $tried refusals did not happen (listed above)"
  fi
  missed=()
  tried=0
}

cd "$work"
