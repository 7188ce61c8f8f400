/* SPDX-License-Identifier: Apache-2.0 */
/* s3 credentials, region and endpoint from the environment and ~/.aws files, like the AWS CLI. */
#include "store/s3_config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/fail.h"

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    return s;
}

/* Sets *out (if still NULL) to `key`'s value in [section] of an INI file; missing files are
 * fine (the AWS tools treat them as empty). As the AWS tools read them (Python's configparser):
 * section names match exactly, key names in any case; a line is read whole, whatever its
 * length (an STS session token runs to kilobytes). */
static int ini_get(const char *path, const char *section, const char *key, char **out)
{
    if (*out || !path)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    int in = 0, rc = 0;
    while (getline(&line, &cap, f) >= 0) {
        char *s = trim(line);
        if (*s == '#' || *s == ';' || !*s)
            continue;
        if (*s == '[') {
            char *e = strchr(s, ']');
            if (e) {
                *e = 0;
                in = !strcmp(trim(s + 1), section);
            }
            continue;
        }
        char *eq = strchr(s, '=');
        if (!in || !eq)
            continue;
        *eq = 0;
        if (!strcasecmp(trim(s), key)) {
            *out = strdup(trim(eq + 1));
            rc = *out ? 0 : PULSE_ERR_NOMEM;
            break;
        }
    }
    if (line)
        explicit_bzero(line, cap);   /* it held a line of the credentials file */
    free(line);
    fclose(f);
    return rc;
}

static char *home_path(const char *override, const char *rel)
{
    const char *o = env(override);
    if (o)
        return strdup(o);
    const char *home = env("HOME");
    if (!home)
        return NULL;
    size_t n = strlen(home) + strlen(rel) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", home, rel);
    return p;
}

static int dup_env(char **out, const char *a, const char *b)
{
    const char *v = env(a);
    if (!v && b)
        v = env(b);
    if (!v || *out)
        return 0;
    *out = strdup(v);
    return *out ? 0 : PULSE_ERR_NOMEM;
}

void s3_config_free(struct s3_config *c)
{
    if (c->secret_key)
        memset(c->secret_key, 0, strlen(c->secret_key));
    free(c->access_key);
    free(c->secret_key);
    free(c->session_token);
    free(c->region);
    free(c->endpoint);
    memset(c, 0, sizeof *c);
}

int s3_config_load(struct s3_config *c)
{
    memset(c, 0, sizeof *c);
    int rc = 0;
    const char *profile = env("AWS_PROFILE");
    if (!profile)
        profile = "default";
    char section[300];
    if (!strcmp(profile, "default"))
        snprintf(section, sizeof section, "default");
    else
        snprintf(section, sizeof section, "profile %s", profile);
    char *cred_file = home_path("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    char *conf_file = home_path("AWS_CONFIG_FILE", ".aws/config");

    if (env("AWS_ACCESS_KEY_ID") || env("AWS_SECRET_ACCESS_KEY")) {
        rc |= dup_env(&c->access_key, "AWS_ACCESS_KEY_ID", NULL);
        rc |= dup_env(&c->secret_key, "AWS_SECRET_ACCESS_KEY", NULL);
        rc |= dup_env(&c->session_token, "AWS_SESSION_TOKEN", NULL);
    } else {
        rc |= ini_get(cred_file, profile, "aws_access_key_id", &c->access_key);
        rc |= ini_get(cred_file, profile, "aws_secret_access_key", &c->secret_key);
        rc |= ini_get(cred_file, profile, "aws_session_token", &c->session_token);
        /* The AWS CLI also reads keys from the config file's profile section. */
        rc |= ini_get(conf_file, section, "aws_access_key_id", &c->access_key);
        rc |= ini_get(conf_file, section, "aws_secret_access_key", &c->secret_key);
        rc |= ini_get(conf_file, section, "aws_session_token", &c->session_token);
    }
    rc |= dup_env(&c->region, "AWS_REGION", "AWS_DEFAULT_REGION");
    rc |= ini_get(conf_file, section, "region", &c->region);
    rc |= dup_env(&c->endpoint, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
    rc |= ini_get(conf_file, section, "endpoint_url", &c->endpoint);
    if (!c->region)
        c->region = strdup("us-east-1");
    free(cred_file);
    free(conf_file);
    if (rc || !c->region) {
        s3_config_free(c);
        return pulse_fail(PULSE_ERR_NOMEM, "s3 config: out of memory");
    }
    if (!c->access_key != !c->secret_key) {
        /* Name which half is missing, never the value of the other. */
        int have_id = c->access_key != NULL;
        s3_config_free(c);
        return pulse_fail(PULSE_ERR_AUTH, "s3 credentials: %s is set but %s is not",
                          have_id ? "the access key id" : "the secret key",
                          have_id ? "the secret key" : "the access key id");
    }
    if (c->endpoint) {
        size_t n = strlen(c->endpoint);
        while (n && c->endpoint[n - 1] == '/')
            c->endpoint[--n] = 0;
        if (strncmp(c->endpoint, "http://", 7) && strncmp(c->endpoint, "https://", 8)) {
            s3_config_free(c);
            return pulse_fail(PULSE_ERR_FORMAT, "AWS_ENDPOINT_URL must start with http:// or https://");
        }
    }
    return 0;
}
