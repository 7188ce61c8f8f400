#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Starts and stops a throwaway Ceph RGW (one mon, one bluestore OSD on a sparse file, radosgw/beast)
# bound to 127.0.0.1 only, so the e2e tests talk to a real S3 server that verifies SigV4.
#
#   tests/s3/rgw.sh start DIR   # DIR is created (or must be empty); writes DIR/env; progress on stderr
#                               # (the OSD is a 4 GiB sparse file; PULSE_RGW_BLOCK_BYTES sets another size)
#   tests/s3/rgw.sh stop DIR    # kills the daemons by their PID files (TERM, then KILL); safe twice
#   tests/s3/rgw.sh env DIR     # prints DIR/env (export lines for the AWS_* and PULSE_TEST_BUCKET)
#   tests/s3/rgw.sh users DIR UID...   # extra users with their own keys (tests/s3/rgw_users.sh create)
#
# Everything (config, data, logs, admin sockets, PID files) lives under DIR, so it needs neither
# /etc/ceph nor /var/run/ceph, and several clusters can run side by side on free ports.
set -euo pipefail

access_key=PULSETESTACCESSKEY00
secret_key=pulse-test-secret-key-0000000000000000000
bucket=pulse-test
daemons=(rgw osd mon)   # stop order: clients first, the monitor last

say() { echo "rgw.sh: $*" >&2; }

die() {
  say "error: $*"
  exit 1
}

# Prints the tail of a daemon's log so a failed start explains itself.
log_tail() {
  local f
  for f in "$dir/log/$1.log" "$dir/log/$1.out"; do
    if [ -s "$f" ]; then
      echo "----- tail of $f -----" >&2
      tail -n 25 "$f" >&2
    fi
  done
}

fail_start() {
  say "error: $1"
  log_tail "$2"
  say "stopping what was started"
  stop_all || true
  exit 1
}

# A random high port nobody listens on (the check races with other starters, so callers retry
# the daemon start on a bind failure only implicitly: ports are drawn from a wide range).
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    if ! ss -Hltn "sport = :$p" | grep -q .; then
      echo "$p"
      return 0
    fi
  done
  die "no free TCP port found"
}

ceph_cli() { timeout 30 ceph -c "$dir/ceph.conf" --connect-timeout 10 "$@"; }

# Runs a daemon in the foreground of its own session; its PID goes to DIR/run/NAME.pid.
spawn() {
  local name=$1; shift
  setsid "$@" -f -c "$dir/ceph.conf" </dev/null >"$dir/log/$name.out" 2>&1 &
  echo $! >"$dir/run/$name.pid"
}

alive() { [ -s "$dir/run/$1.pid" ] && kill -0 "$(cat "$dir/run/$1.pid")" 2>/dev/null; }

# wait_for SECONDS DAEMON WHAT CMD...: polls CMD once a second until it succeeds.
wait_for() {
  local secs=$1 name=$2 what=$3; shift 3
  for _ in $(seq 1 "$secs"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    alive "$name" || fail_start "$name exited while waiting for $what" "$name"
    sleep 1
  done
  fail_start "timed out after ${secs}s waiting for $what" "$name"
}

write_conf() {
  local fsid=$1 mon_port=$2 rgw_port=$3
  cat >"$dir/ceph.conf" <<EOF
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$mon_port]
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
public_network = 127.0.0.0/8
cluster_network = 127.0.0.0/8
ms_bind_ipv4 = true
ms_bind_ipv6 = false
ms_bind_msgr1 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
# Without cephx there is no session key, so msgr2's "secure" mode cannot work; radosgw asks for it
# toward the monitor unless told otherwise.
ms_mon_client_mode = crc
ms_mon_service_mode = crc
ms_mon_cluster_mode = crc
ms_client_mode = crc
ms_service_mode = crc
ms_cluster_mode = crc
keyring = $dir/keyring
run_dir = $dir/run
admin_socket = $dir/run/\$name.asok
log_file = $dir/log/\$name.log
pid_file = $dir/run/\$name.daemon-pid
crash_dir = $dir/crash
log_to_stderr = false
err_to_stderr = true
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_data = $dir/mon/\$name
osd_data = $dir/osd/\$name
osd_objectstore = bluestore
bluestore_block_path = $dir/osd/\$name.block
bluestore_block_create = true
bluestore_block_size = ${PULSE_RGW_BLOCK_BYTES:-4294967296}
bluestore_block_db_create = false
bluestore_block_wal_create = false
bluestore_fsck_on_mkfs = false
bluestore_cache_autotune = false
bluestore_cache_size = 134217728
osd_memory_target = 536870912
osd_op_num_shards = 2
osd_op_num_threads_per_shard = 1

[client.rgw.pulse]
rgw_frontends = beast endpoint=127.0.0.1:$rgw_port
rgw_thread_pool_size = 64
rgw_enable_usage_log = false
rgw_dns_name = 127.0.0.1
log_file = $dir/log/rgw.log
EOF
}

start_mon() {
  local fsid=$1 mon_port=$2
  say "monitor on 127.0.0.1:$mon_port"
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$dir/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
    --cap mgr 'allow *' >/dev/null
  monmaptool --create --addv a "[v2:127.0.0.1:$mon_port]" --fsid "$fsid" "$dir/monmap" >/dev/null
  ceph-mon -c "$dir/ceph.conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring" \
    >"$dir/log/mon-mkfs.out" 2>&1 || fail_start "ceph-mon --mkfs failed" mon-mkfs
  spawn mon ceph-mon -i a
  wait_for 30 mon "the monitor to answer" ceph_cli mon stat
}

start_osd() {
  local try osd_uuid id
  for try in 1 2 3; do
    osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    id=$(ceph_cli osd new "$osd_uuid") || fail_start "ceph osd new failed" mon
    case "$id" in ''|*[!0-9]*) fail_start "ceph osd new printed '$id', not an id" mon ;; esac
    rm -rf "$dir/osd/osd.$id" "$dir/osd/osd.$id.block"
    mkdir -p "$dir/osd/osd.$id"
    say "OSD mkfs (4 GiB sparse bluestore file), try $try"
    if ceph-osd -c "$dir/ceph.conf" -i "$id" --mkfs --osd-uuid "$osd_uuid" \
         >"$dir/log/osd-mkfs.out" 2>&1; then
      spawn osd ceph-osd -i "$id"
      for _ in $(seq 1 40); do
        if ceph_cli osd stat 2>/dev/null | grep -q '1 up'; then return 0; fi
        alive osd || break
        sleep 1
      done
      if alive osd; then fail_start "timed out after 40s waiting for the OSD to be up" osd; fi
    fi
    # Rare first-boot failure ("wrong fsid" and friends): throw the OSD away and make it again.
    say "OSD did not come up (try $try):"
    log_tail osd-mkfs
    log_tail osd
    [ -s "$dir/run/osd.pid" ] && kill -KILL "$(cat "$dir/run/osd.pid")" 2>/dev/null || true
    ceph_cli osd purge "$id" --yes-i-really-mean-it >/dev/null 2>&1 || true
  done
  fail_start "the OSD did not come up after 3 tries" osd
}

# One signed S3 request with curl's SigV4 (enough for creating the bucket).
s3_curl() {
  curl -sS --max-time 20 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$access_key:$secret_key" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

start_rgw() {
  local rgw_port=$1 code
  say "radosgw on 127.0.0.1:$rgw_port"
  spawn rgw radosgw -n client.rgw.pulse
  wait_for 60 rgw "radosgw to listen" curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$rgw_port/"
  timeout 60 radosgw-admin -c "$dir/ceph.conf" user create --uid test --display-name "pulse tests" \
    --access-key "$access_key" --secret "$secret_key" >"$dir/log/user.out" 2>&1 \
    || fail_start "radosgw-admin user create failed" user
  for _ in $(seq 1 20); do
    code=$(s3_curl -o "$dir/log/bucket.out" -w '%{http_code}' -X PUT \
           "http://127.0.0.1:$rgw_port/$bucket" 2>>"$dir/log/bucket.out") || true
    if [ "$code" = 200 ] || [ "$code" = 409 ]; then return 0; fi
    sleep 1
  done
  fail_start "creating bucket $bucket failed (HTTP $code)" bucket
}

# Nothing may listen beyond loopback: the daemons' sockets are checked against our PIDs.
check_loopback() {
  local name pid bad=""
  for name in "${daemons[@]}"; do
    alive "$name" || continue
    pid=$(cat "$dir/run/$name.pid")
    if ss -Hltnp | grep "pid=$pid," | awk '{print $4}' | grep -vq '^127\.'; then
      bad="$bad $name"
    fi
  done
  [ -z "$bad" ] || fail_start "daemons listening beyond 127.0.0.1:$bad" mon
}

do_start() {
  if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
    die "$dir is not empty (use a fresh directory, or 'stop' then remove it)"
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  mkdir -p "$dir/run" "$dir/log" "$dir/mon" "$dir/osd" "$dir/crash"
  local t0=$SECONDS fsid mon_port rgw_port
  fsid=$(cat /proc/sys/kernel/random/uuid)
  mon_port=$(free_port)
  rgw_port=$(free_port)
  while [ "$rgw_port" = "$mon_port" ]; do rgw_port=$(free_port); done
  write_conf "$fsid" "$mon_port" "$rgw_port"
  start_mon "$fsid" "$mon_port"
  start_osd
  start_rgw "$rgw_port"
  check_loopback
  cat >"$dir/env.tmp" <<EOF
export AWS_ACCESS_KEY_ID=$access_key
export AWS_SECRET_ACCESS_KEY=$secret_key
export AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$rgw_port
export PULSE_TEST_BUCKET=$bucket
export PULSE_RGW_DIR=$dir
EOF
  mv "$dir/env.tmp" "$dir/env"
  say "up in $((SECONDS - t0))s: http://127.0.0.1:$rgw_port bucket $bucket (env in $dir/env)"
}

# TERM each daemon by its PID file, KILL after 10 s; missing or stale PID files are fine.
stop_all() {
  local name pid
  for name in "${daemons[@]}"; do
    [ -s "$dir/run/$name.pid" ] || continue
    pid=$(cat "$dir/run/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$pid" 2>/dev/null; then
        say "$name (pid $pid) ignored TERM for 10s: KILL"
        kill -KILL "$pid" 2>/dev/null || true
      fi
    fi
    rm -f "$dir/run/$name.pid"
  done
}

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|env DIR | users DIR UID..." >&2; exit 2; }
case "$cmd" in
  start) do_start ;;
  stop)
    [ -d "$dir" ] || exit 0
    dir=$(cd "$dir" && pwd)
    stop_all
    ;;
  env)
    [ -s "$dir/env" ] || die "$dir/env missing: is RGW started (tests/s3/rgw.sh start $dir)?"
    cat "$dir/env"
    ;;
  users)
    shift 2
    exec bash "$(dirname "${BASH_SOURCE[0]}")/rgw_users.sh" create "$dir" "$@"
    ;;
  *) echo "usage: $0 start|stop|env DIR | users DIR UID..." >&2; exit 2 ;;
esac
