/* SPDX-License-Identifier: Apache-2.0 */
/* Internal: s3 credentials, region and endpoint, found the way the AWS tools find them. */
#ifndef PULSE_STORE_S3_CONFIG_H
#define PULSE_STORE_S3_CONFIG_H

struct s3_config {
    char *access_key;    /* NULL: anonymous (unsigned) requests */
    char *secret_key;
    char *session_token; /* NULL: none */
    char *region;        /* never NULL after load */
    char *endpoint;      /* "http://host:port[/path]" without trailing '/'; NULL: AWS */
};

/* Environment first (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, AWS_REGION,
 * AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL), then the AWS_PROFILE (default
 * "default") in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) and AWS_CONFIG_FILE
 * (~/.aws/config). Returns 0, PULSE_ERR_AUTH (half a key pair), PULSE_ERR_NOMEM. */
int s3_config_load(struct s3_config *c);
void s3_config_free(struct s3_config *c);

#endif
