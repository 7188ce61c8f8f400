#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Against RGW: AWS profile files as the AWS tools read them ([services] endpoints), and errors that say what is wrong: missing profile, no credentials, refused keys, anonymous access.
# shellcheck source=tests/s3/lib.sh
. "$(dirname "$0")/lib.sh"

access=$AWS_ACCESS_KEY_ID secret=$AWS_SECRET_ACCESS_KEY
# Profile files only: no keys or endpoint in the environment.
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_PROFILE
export AWS_SHARED_CREDENTIALS_FILE=$work/credentials AWS_CONFIG_FILE=$work/config
cat >"$AWS_SHARED_CREDENTIALS_FILE" <<EOT
[rgw]
aws_access_key_id = $access
aws_secret_access_key = $secret
[wrong]
aws_access_key_id = $access
aws_secret_access_key = definitely-wrong-secret
EOT
cat >"$AWS_CONFIG_FILE" <<EOT
[profile rgw]
region = us-east-1
services = local-rgw
s3 =
  addressing_style = path

[profile wrong]
services = local-rgw

[profile proc]
credential_process = /bin/false

[profile keyless]
services = local-rgw

[services local-rgw]
s3 =
  endpoint_url = $rgw_endpoint
EOT
store="s3://$bucket/$prefix"
echo payload >"$work/obj"

# expect_error WHAT WANT CMD...: CMD fails with one line holding WANT.
expect_error() {
  local what=$1 want=$2 rc=0
  shift 2
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  [ "$rc" != 0 ] || fail "$what: succeeded"
  one_line_error "$work/err"
  grep -qF -- "$want" "$work/err" || fail "$what: error lacks '$want': $(cat "$work/err")"
  ok "$what: $(cat "$work/err")"
}

# The endpoint from the profile's [services] section, as botocore takes it.
AWS_PROFILE=rgw pulse_store put "$store/k" "$work/obj" || fail "put through the services section failed"
AWS_PROFILE=rgw pulse_store get "$store/k" -o "$work/back" || fail "get through the services section failed"
cmp -s "$work/obj" "$work/back" || fail "read back differs"
ok "[services local-rgw] s3 endpoint_url reaches RGW"

# A profile that is not there: said so, naming both files, before any request.
expect_error "AWS_PROFILE=nosuch" "profile nosuch (AWS_PROFILE) not found: no [profile nosuch] in $AWS_CONFIG_FILE" \
  env AWS_PROFILE=nosuch "$PULSE_BIN" store ls "$store/"
# No credentials anywhere: said so, not unsigned requests ending in a bare 403.
expect_error "no credentials" "no AWS credentials found (looked in: env AWS_ACCESS_KEY_ID, profile keyless in" \
  env AWS_PROFILE=keyless "$PULSE_BIN" store ls "$store/"
expect_error "credential_process" "profile proc gets them through credential_process, which pulse does not follow" \
  env AWS_PROFILE=proc AWS_ENDPOINT_URL="$rgw_endpoint" "$PULSE_BIN" store ls "$store/"
# Keys RGW does not accept, and anonymous requests the bucket's policy does not allow.
expect_error "a wrong secret" "put $prefix/k: credentials refused (HTTP 403 SignatureDoesNotMatch)" \
  env AWS_PROFILE=wrong "$PULSE_BIN" store put "$store/k" "$work/obj"
expect_error "anonymous get" "access denied by the bucket's policy or ACL: anonymous requests may not get $prefix/k (HTTP 403" \
  env AWS_PROFILE=keyless PULSE_S3_ANONYMOUS=1 "$PULSE_BIN" store get "$store/k" -o "$work/x"
expect_error "anonymous head" "access denied by the bucket's policy or ACL: anonymous requests may not head $prefix/k (HTTP 403)" \
  env AWS_PROFILE=keyless PULSE_S3_ANONYMOUS=1 "$PULSE_BIN" store head "$store/k"
expect_error "anonymous list" ": access denied by the bucket's policy or ACL: anonymous requests may not list $bucket (HTTP 403 AccessDenied)" \
  env AWS_PROFILE=keyless PULSE_S3_ANONYMOUS=1 "$PULSE_BIN" store ls "$store/"
AWS_PROFILE=rgw pulse_store rm "$store/k" || fail "rm failed"
