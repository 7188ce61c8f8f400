/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: s3 credentials, region and endpoint, found the way the AWS tools find them. */
#ifndef PULSE_STORE_S3_CONFIG_H
#define PULSE_STORE_S3_CONFIG_H

enum { S3_ADDR_AUTO, S3_ADDR_PATH, S3_ADDR_VIRTUAL };

struct s3_config {
    char *access_key;    /* NULL: anonymous (unsigned) requests */
    char *secret_key;
    char *session_token; /* NULL: none */
    char *region;        /* never NULL after load */
    char *endpoint;      /* "http://host:port[/path]" without trailing '/'; NULL: AWS */
    char *ca_bundle;     /* PEM file of the CAs to trust; NULL: libcurl's default */
    const char *ca_from; /* where ca_bundle came from, for errors ("AWS_CA_BUNDLE", ...) */
    int addressing;      /* the profile's s3 addressing_style: auto (path style on a custom
                          * endpoint, bucket.host on AWS), path or virtual */
    int anonymous;       /* PULSE_S3_ANONYMOUS=1: unsigned requests, no credentials looked for */
};

/* Environment first (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, AWS_REGION,
 * AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS_CA_BUNDLE), then the
 * AWS_PROFILE (default "default") in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) and
 * AWS_CONFIG_FILE (~/.aws/config), with its `services` section and its nested `s3 =` settings;
 * then CURL_CA_BUNDLE, SSL_CERT_FILE. Returns 0; PULSE_ERR_INVALID (AWS_PROFILE names no
 * profile, a bad setting or CA bundle); PULSE_ERR_AUTH (half a key pair, or no credentials and
 * no PULSE_S3_ANONYMOUS=1); PULSE_ERR_UNSUPPORTED (credentials only through a credential_process,
 * SSO or role); PULSE_ERR_FORMAT (endpoint not a URL); PULSE_ERR_NOMEM. */
int s3_config_load(struct s3_config *c);
void s3_config_free(struct s3_config *c);

#endif
