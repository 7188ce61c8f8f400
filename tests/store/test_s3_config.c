/* SPDX-License-Identifier: Apache-2.0 */
/* Where the s3:// backend finds credentials, region and endpoint: the environment, then the AWS profile files, as the AWS tools read them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pulseweights.h"
#include "store/s3_config.h"

static char dir[64], cred[128], conf[128];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void clear_env(void)
{
    static const char *vars[] = { "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                                  "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_PROFILE",
                                  "PULSE_S3_ANONYMOUS", "AWS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_CONFIG_FILE", conf, 1);
}

static int eq(const char *a, const char *b)
{
    return a && b && !strcmp(a, b);
}

static void profiles(void)
{
    /* ~/.aws/credentials names profiles [NAME]; ~/.aws/config names them [profile NAME] */
    write_file(cred, "# a comment\n"
                     "[default]\n"
                     "aws_access_key_id = AKIADEFAULT\n"
                     "aws_secret_access_key=secret/default+1\n"
                     "\n"
                     "  [ ci ]  \n"
                     "; another comment\n"
                     "AWS_Access_Key_ID   =   AKIACI   \n"
                     "aws_secret_access_key = ci=secret\n");
    write_file(conf, "[default]\n"
                     "region = eu-west-3\n"
                     "[profile ci]\n"
                     "region = ap-south-1\n"
                     "endpoint_url = http://127.0.0.1:9000///\n"
                     "[ci]\n"
                     "region = not-this-one\n");
    struct s3_config c;
    clear_env();
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.access_key, "AKIADEFAULT") && eq(c.secret_key, "secret/default+1"));
    CHECK(c.session_token == NULL && c.endpoint == NULL);
    CHECK(eq(c.region, "eu-west-3"));
    s3_config_free(&c);

    setenv("AWS_PROFILE", "ci", 1);
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.access_key, "AKIACI"));         /* key names as the AWS tools take them: any case */
    CHECK(eq(c.secret_key, "ci=secret"));      /* the first '=' splits */
    CHECK(eq(c.region, "ap-south-1"));         /* [profile ci], not [ci], in the config file */
    CHECK(eq(c.endpoint, "http://127.0.0.1:9000"));
    s3_config_free(&c);

    /* the environment wins over the files, and its keys come as a pair */
    setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    setenv("AWS_REGION", "us-west-2", 1);
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.access_key, "AKIAENV") && eq(c.secret_key, "envsecret") && eq(c.region, "us-west-2"));
    s3_config_free(&c);
    unsetenv("AWS_SECRET_ACCESS_KEY");
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_AUTH);
    CHECK(strstr(pulse_last_error(), "the secret key is not") != NULL);
    CHECK(strstr(pulse_last_error(), "AKIAENV") == NULL);   /* never the value */

    /* no files, no environment: no credentials is an error naming where it looked (not unsigned
     * requests that end in a bare 403); anonymous only when asked for, and AWS's default region */
    clear_env();
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_AUTH);
    CHECK(strstr(pulse_last_error(), "no AWS credentials found") != NULL);
    CHECK(strstr(pulse_last_error(), "profile default in /nonexistent/credentials and /nonexistent/config") != NULL);
    CHECK(strstr(pulse_last_error(), "PULSE_S3_ANONYMOUS=1") != NULL);
    setenv("PULSE_S3_ANONYMOUS", "1", 1);
    CHECK_OK(s3_config_load(&c));
    CHECK(c.anonymous && c.access_key == NULL && c.secret_key == NULL && eq(c.region, "us-east-1"));
    s3_config_free(&c);
    setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1); /* anonymous sends no keys, as --no-sign-request */
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    CHECK_OK(s3_config_load(&c));
    CHECK(c.anonymous && c.access_key == NULL && c.secret_key == NULL);
    s3_config_free(&c);
    setenv("PULSE_S3_ANONYMOUS", "yes", 1);
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "PULSE_S3_ANONYMOUS must be 0 or 1") != NULL);

    /* an endpoint that is not a URL is refused */
    clear_env();
    setenv("AWS_ENDPOINT_URL", "127.0.0.1:9000", 1);
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_FORMAT);
    unsetenv("AWS_ENDPOINT_URL");
}

/* STS session tokens run to a few KiB: a line of any length is one line. */
static void long_lines(void)
{
    size_t n = 6000;
    char *token = malloc(n + 1), *text = malloc(n + 200);
    CHECK(token && text);
    if (!token || !text)
        return;
    for (size_t i = 0; i < n; i++)
        token[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i % 64];
    token[n] = 0;
    /* a long line that mentions another key must not be read as two lines */
    memcpy(token + 4090, "=aws_secret_access_key=", 23);
    snprintf(text, n + 200, "[default]\naws_session_token = %s\naws_access_key_id = A\naws_secret_access_key = S\n", token);
    write_file(cred, text);
    write_file(conf, "");
    clear_env();
    struct s3_config c;
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.session_token, token));
    CHECK(eq(c.secret_key, "S"));
    s3_config_free(&c);
    free(token);
    free(text);
}

/* AWS_PROFILE naming no profile is refused (as the AWS tools do), naming both files; "default"
 * may be absent. */
static void missing_profile(void)
{
    write_file(cred, "[ci]\naws_access_key_id = A\naws_secret_access_key = S\n");
    write_file(conf, "[profile other]\nregion = eu-west-1\n");
    clear_env();
    struct s3_config c;
    setenv("AWS_PROFILE", "nosuch", 1);
    setenv("AWS_ACCESS_KEY_ID", "A", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "profile nosuch (AWS_PROFILE) not found") != NULL);
    CHECK(strstr(pulse_last_error(), conf) != NULL && strstr(pulse_last_error(), cred) != NULL);
    setenv("AWS_PROFILE", "other", 1); /* in the config file only: found */
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.region, "eu-west-1"));
    s3_config_free(&c);
    setenv("AWS_PROFILE", "default", 1);
    CHECK_OK(s3_config_load(&c));
    s3_config_free(&c);
}

/* Credentials only through a credential_process (or SSO, a role): said so, with what to do. */
static void unsupported_sources(void)
{
    write_file(cred, "");
    write_file(conf, "[profile proc]\ncredential_process = /usr/bin/get-creds --json\n"
                     "[profile sso]\nsso_session = corp\n");
    clear_env();
    struct s3_config c;
    setenv("AWS_PROFILE", "proc", 1);
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_UNSUPPORTED);
    CHECK(strstr(pulse_last_error(), "profile proc gets them through credential_process") != NULL);
    CHECK(strstr(pulse_last_error(), "aws configure export-credentials --profile proc") != NULL);
    setenv("AWS_PROFILE", "sso", 1);
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_UNSUPPORTED);
    CHECK(strstr(pulse_last_error(), "sso_session") != NULL);
    unsetenv("AWS_PROFILE");
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token", 1);
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_UNSUPPORTED);
    CHECK(strstr(pulse_last_error(), "AWS_WEB_IDENTITY_TOKEN_FILE is set") != NULL);
    unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
    setenv("AWS_PROFILE", "sso", 1);
    setenv("AWS_ACCESS_KEY_ID", "A", 1); /* keys in the environment are used as they are */
    setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
    CHECK_OK(s3_config_load(&c));
    s3_config_free(&c);
}

/* botocore's services sections and nested s3 settings. */
static void services(void)
{
    write_file(cred, "[default]\naws_access_key_id = A\naws_secret_access_key = S\n"
                     "[svc]\naws_access_key_id = A\naws_secret_access_key = S\n"
                     "[bad]\naws_access_key_id = A\naws_secret_access_key = S\n");
    write_file(conf, "[default]\n"
                     "services = local\n"
                     "endpoint_url = http://profile-wide:1\n"
                     "s3 =\n"
                     "  addressing_style = virtual\n"
                     "  region = not-a-top-level-key\n"
                     "\n"
                     "[services local]\n"
                     "dynamodb =\n"
                     "  endpoint_url = http://dynamo:2\n"
                     "s3 =\n"
                     "  endpoint_url = http://127.0.0.1:4567/\n"
                     "[profile svc]\n"
                     "services = nosuch\n"
                     "[profile bad]\n"
                     "s3 =\n"
                     "    addressing_style = sideways\n");
    clear_env();
    struct s3_config c;
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.endpoint, "http://127.0.0.1:4567")); /* the services section's s3 endpoint wins */
    CHECK(c.addressing == S3_ADDR_VIRTUAL);
    CHECK(eq(c.region, "us-east-1"));                /* a nested key is not the profile's */
    s3_config_free(&c);
    setenv("AWS_ENDPOINT_URL", "http://env:3", 1);   /* the environment wins over both */
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.endpoint, "http://env:3"));
    s3_config_free(&c);
    unsetenv("AWS_ENDPOINT_URL");
    setenv("AWS_PROFILE", "svc", 1);
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "no [services nosuch] section") != NULL);
    setenv("AWS_PROFILE", "bad", 1);
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "addressing_style 'sideways'") != NULL);
    unsetenv("AWS_PROFILE");

    /* addressing_style = virtual on a custom endpoint puts the bucket in the host name */
    setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
    setenv("AWS_ACCESS_KEY_ID", "A", 1);
    pulse_store *st = NULL;
    char *url = NULL;
    CHECK_OK(pulse_store_open(&st, "s3://bkt/run", NULL));
    if (st) {
        CHECK_OK(pulse_store_presign(st, "k", 60, &url));
        CHECK(url && !strncmp(url, "http://bkt.127.0.0.1:4567/run/k?", 32));
        free(url);
        pulse_store_close(&st);
    }
}

/* The CA bundle: AWS_CA_BUNDLE, the profile's ca_bundle, CURL_CA_BUNDLE, SSL_CERT_FILE, in that
 * order; one that cannot be read is refused at once. */
static void ca_bundle(void)
{
    char a[160], b[160], d[160], e[160], text[400];
    snprintf(a, sizeof a, "%s/a.pem", dir);
    snprintf(b, sizeof b, "%s/b.pem", dir);
    snprintf(d, sizeof d, "%s/d.pem", dir);
    snprintf(e, sizeof e, "%s/e.pem", dir);
    write_file(a, "x");
    write_file(b, "x");
    write_file(d, "x");
    write_file(e, "x");
    write_file(cred, "[default]\naws_access_key_id = A\naws_secret_access_key = S\n");
    snprintf(text, sizeof text, "[default]\nca_bundle = %s\n", b);
    write_file(conf, text);
    clear_env();
    setenv("AWS_CA_BUNDLE", a, 1);
    setenv("CURL_CA_BUNDLE", d, 1);
    setenv("SSL_CERT_FILE", e, 1);
    struct s3_config c;
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.ca_bundle, a) && eq(c.ca_from, "AWS_CA_BUNDLE"));
    s3_config_free(&c);
    unsetenv("AWS_CA_BUNDLE");
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.ca_bundle, b));
    s3_config_free(&c);
    write_file(conf, "");
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.ca_bundle, d) && eq(c.ca_from, "CURL_CA_BUNDLE"));
    s3_config_free(&c);
    unsetenv("CURL_CA_BUNDLE");
    CHECK_OK(s3_config_load(&c));
    CHECK(eq(c.ca_bundle, e) && eq(c.ca_from, "SSL_CERT_FILE"));
    s3_config_free(&c);
    setenv("AWS_CA_BUNDLE", "/nonexistent/ca.pem", 1);
    CHECK_ERR(s3_config_load(&c), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "CA bundle /nonexistent/ca.pem (from AWS_CA_BUNDLE) cannot be read") != NULL);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9", 1); /* no TLS: the bundle is not needed */
    CHECK_OK(s3_config_load(&c));
    s3_config_free(&c);
    unlink(a);
    unlink(b);
    unlink(d);
    unlink(e);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/pulse-s3-config-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        return 1;
    snprintf(cred, sizeof cred, "%s/credentials", dir);
    snprintf(conf, sizeof conf, "%s/config", dir);
    profiles();
    long_lines();
    missing_profile();
    unsupported_sources();
    services();
    ca_bundle();
    unlink(cred);
    unlink(conf);
    rmdir(dir);
    return check_done("store-s3-config");
}
