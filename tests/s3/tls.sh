#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# pulse store over HTTPS to tests/s3/fakes3.py with a private CA: refused at once without the CA, trusted through each way of giving it.
set -euo pipefail
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
command -v openssl >/dev/null || { echo "SKIP: no openssl (scripts/setup.sh installs it)"; exit 77; }
s3_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-tls.XXXXXX")
server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap 'stop_server; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A private CA, a server certificate it signs for 127.0.0.1, and another CA that signed nothing.
ssl() { openssl "$@" >/dev/null 2>&1 || fail "openssl $1 failed"; }
ssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=pulse test CA" -keyout "$work/ca.key" -out "$work/ca.pem"
ssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=other CA" -keyout "$work/other.key" -out "$work/other.pem"
ssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$work/srv.key" -out "$work/srv.csr"
printf 'subjectAltName = IP:127.0.0.1\n' >"$work/ext"
ssl x509 -req -in "$work/srv.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
  -extfile "$work/ext" -out "$work/srv.pem"

python3 "$s3_dir/fakes3.py" --mode ok --port-file "$work/port" --log "$work/log" --headers-log "$work/hlog" \
  --tls-cert "$work/srv.pem" --tls-key "$work/srv.key" --time-limit 300 &
server_pid=$!
for _ in $(seq 1 600); do
  [ -s "$work/port" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "fakes3.py exited at start"
  sleep 0.05
done
[ -s "$work/port" ] || fail "fakes3.py did not start"

# Fixed keys (the fake checks no signature), no profile files, no CA from the environment, and
# retries that would show: 7 of them.
export AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_CONFIG_FILE=/dev/null
export AWS_ACCESS_KEY_ID=fake AWS_SECRET_ACCESS_KEY=fake AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="https://127.0.0.1:$(cat "$work/port")"
unset AWS_ENDPOINT_URL_S3 AWS_PROFILE AWS_SESSION_TOKEN AWS_CA_BUNDLE CURL_CA_BUNDLE SSL_CERT_FILE
export PULSE_S3_RETRIES=7 PULSE_S3_BACKOFF_MS=200 PULSE_S3_TIMEOUT=10

handshakes() { grep -c '^TLS' "$work/log" || true; }

# listed WHAT [env...]: `pulse store ls` through the CA given by the env assignments lists the fake's keys.
listed() {
  local what=$1
  shift
  : >"$work/log"
  env "$@" timeout 60 "$PULSE_BIN" store ls "s3://bucket/" >"$work/out" 2>"$work/err" \
    || fail "$what: pulse store ls failed: $(cat "$work/err")"
  [ "$(tr '\n' ' ' <"$work/out")" = "k000 k001 k002 k003 " ] || fail "$what: listed $(cat "$work/out")"
  echo "ok   $what: listed over TLS ($(handshakes) connections)"
}

# refused WHAT WANT [env...]: fails with one line holding WANT after one TLS handshake (not retried).
refused() {
  local what=$1 want=$2 rc=0
  shift 2
  : >"$work/log"
  env "$@" timeout 60 "$PULSE_BIN" store ls "s3://bucket/" >"$work/out" 2>"$work/err" || rc=$?
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "$what: pulse store ls exited $rc"
  [ "$(wc -l <"$work/err")" = 1 ] || fail "$what: expected a one-line error, got: $(cat "$work/err")"
  grep -qF -- "$want" "$work/err" || fail "$what: error lacks '$want': $(cat "$work/err")"
  # The server logs a failed handshake after the client has gone: wait for it, then for any more.
  if [ "${connects:-1}" = 1 ]; then
    for _ in $(seq 1 100); do [ "$(handshakes)" -ge 1 ] && break; sleep 0.1; done
    [ "$(handshakes)" -ge 1 ] || fail "$what: the server saw no TLS connection"
  fi
  sleep 0.5
  [ "$(handshakes)" -le 1 ] || fail "$what: $(handshakes) TLS connections: a certificate failure was retried"
  echo "ok   $what: $(handshakes) connection, $(cat "$work/err")"
}

refused "no CA given" "SSL certificate problem: unable to get local issuer certificate"
grep -qF "TLS failed" "$work/log" || fail "no CA given: the server saw no refused handshake: $(cat "$work/log")"
grep -qF "not retried" "$work/err" || fail "no CA given: the error does not say it was not retried"
refused "the wrong CA" "SSL certificate problem" AWS_CA_BUNDLE="$work/other.pem"
connects=0 refused "a CA file that is not there" "CA bundle $work/none.pem (from AWS_CA_BUNDLE) cannot be read" \
  AWS_CA_BUNDLE="$work/none.pem"

listed "AWS_CA_BUNDLE" AWS_CA_BUNDLE="$work/ca.pem"
printf '[default]\nca_bundle = %s\n' "$work/ca.pem" >"$work/config"
listed "the profile's ca_bundle" AWS_CONFIG_FILE="$work/config"
listed "CURL_CA_BUNDLE" CURL_CA_BUNDLE="$work/ca.pem"
listed "SSL_CERT_FILE" SSL_CERT_FILE="$work/ca.pem"
# AWS_CA_BUNDLE comes before the profile's, and the profile's before CURL_CA_BUNDLE / SSL_CERT_FILE.
refused "AWS_CA_BUNDLE over ca_bundle" "SSL certificate problem" AWS_CONFIG_FILE="$work/config" \
  AWS_CA_BUNDLE="$work/other.pem"
printf '[default]\nca_bundle = %s\n' "$work/other.pem" >"$work/config2"
refused "ca_bundle over SSL_CERT_FILE" "SSL certificate problem" AWS_CONFIG_FILE="$work/config2" \
  SSL_CERT_FILE="$work/ca.pem" CURL_CA_BUNDLE="$work/ca.pem"

# Every request names pulse and libcurl, as botocore names itself: "pulse/VERSION libcurl/VERSION".
version=$("$PULSE_BIN" --version | awk '{print $2}')
python3 - "$work/hlog" "$version" <<'PY' || fail "User-Agent"
import json, re, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
want = re.compile(r"^pulse/%s libcurl/[0-9][0-9.]*\S*$" % re.escape(sys.argv[2]))
bad = [r["headers"].get("User-Agent") for r in reqs if not want.match(r["headers"].get("User-Agent") or "")]
if not reqs or bad:
    sys.exit("User-Agent: %d requests, these do not match pulse/%s libcurl/X: %s" % (len(reqs), sys.argv[2], bad[:3]))
print("ok   User-Agent of %d requests: %s" % (len(reqs), reqs[0]["headers"]["User-Agent"]))
PY
