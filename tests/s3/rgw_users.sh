#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes extra RGW users on a test server started by tests/s3/rgw.sh, one key pair each, so a test
# can act as several principals (a trainer, followers) with separate credentials.
#
#   tests/s3/rgw_users.sh create DIR UID...   # makes each user once (again: the same keys); prints
#                                              # "UID DIR/users/UID.env" per user
#   tests/s3/rgw_users.sh env DIR UID         # prints DIR/users/UID.env
#
# DIR/users/UID.env (mode 600) holds `export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...` for
# that user; source it after DIR/env (endpoint, region) to act as UID. UIDs are [a-z0-9-], 1-40 long.
set -euo pipefail

say() { echo "rgw_users.sh: $*" >&2; }
die() {
  say "error: $*"
  exit 1
}

admin() { timeout 60 radosgw-admin -c "$dir/ceph.conf" "$@"; }

check_uid() {
  case "$1" in
    ''|*[!a-z0-9-]*) die "user id '$1': only a-z, 0-9 and '-' allowed" ;;
  esac
  [ "${#1}" -le 40 ] || die "user id '$1' is longer than 40 characters"
}

# rand_chars N CHARS: N random characters drawn from CHARS.
rand_chars() {
  python3 -c 'import secrets, sys; print("".join(secrets.choice(sys.argv[2]) for _ in range(int(sys.argv[1]))))' "$1" "$2"
}

# keys_of UID: "ACCESS SECRET" of the user's first S3 key, from radosgw-admin's JSON.
keys_of() {
  admin user info --uid "$1" 2>/dev/null | python3 -c '
import json, sys
k = json.load(sys.stdin)["keys"][0]
print(k["access_key"], k["secret_key"])' 2>/dev/null
}

create_one() {
  local uid=$1 access secret keys
  local f="$dir/users/$uid.env"
  if [ -s "$f" ]; then
    echo "$uid $f"
    return 0
  fi
  # An existing user (its env file lost) keeps its keys; a new one gets fresh random ones.
  if keys=$(keys_of "$uid") && [ -n "$keys" ]; then
    read -r access secret <<<"$keys"
  else
    access=$(rand_chars 20 ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789)
    secret=$(rand_chars 40 ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789)
    admin user create --uid "$uid" --display-name "pulse test user $uid" \
      --access-key "$access" --secret "$secret" >"$dir/log/user-$uid.out" 2>&1 \
      || { tail -n 5 "$dir/log/user-$uid.out" >&2; die "radosgw-admin user create $uid failed"; }
  fi
  (
    umask 077
    printf 'export AWS_ACCESS_KEY_ID=%s\nexport AWS_SECRET_ACCESS_KEY=%s\n' "$access" "$secret" \
      >"$f.tmp"
  )
  mv "$f.tmp" "$f"
  echo "$uid $f"
}

cmd=${1:-}
dir=${2:-}
usage="usage: $0 create DIR UID... | env DIR UID"
[ -n "$cmd" ] && [ -n "$dir" ] && [ $# -ge 3 ] || { echo "$usage" >&2; exit 2; }
shift 2
[ -s "$dir/ceph.conf" ] || die "$dir/ceph.conf missing: is RGW started (tests/s3/rgw.sh start $dir)?"
dir=$(cd "$dir" && pwd)
case "$cmd" in
  create)
    mkdir -p "$dir/users" "$dir/log"
    for uid in "$@"; do check_uid "$uid"; done
    for uid in "$@"; do create_one "$uid"; done
    ;;
  env)
    [ $# = 1 ] || { echo "$usage" >&2; exit 2; }
    check_uid "$1"
    [ -s "$dir/users/$1.env" ] || die "no user $1 (tests/s3/rgw_users.sh create $dir $1)"
    cat "$dir/users/$1.env"
    ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
