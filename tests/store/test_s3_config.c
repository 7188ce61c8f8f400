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
                                  "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_PROFILE" };
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

    /* no files, no environment: anonymous, and AWS's default region */
    clear_env();
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
    CHECK_OK(s3_config_load(&c));
    CHECK(c.access_key == NULL && c.secret_key == NULL && eq(c.region, "us-east-1"));
    s3_config_free(&c);

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

int main(void)
{
    snprintf(dir, sizeof dir, "%s/pulse-s3-config-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        return 1;
    snprintf(cred, sizeof cred, "%s/credentials", dir);
    snprintf(conf, sizeof conf, "%s/config", dir);
    profiles();
    long_lines();
    unlink(cred);
    unlink(conf);
    rmdir(dir);
    return check_done("store-s3-config");
}
