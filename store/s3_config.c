/* SPDX-License-Identifier: Apache-2.0 */
/* s3 credentials, region and endpoint from the environment and ~/.aws files, like the AWS CLI. */
#include "store/s3_config.h"

#include <ctype.h>
#include <errno.h>
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

/* Sets *out (if still NULL) to `key`'s value in [section] of an INI file, or with `sub`, to the
 * value of `key` nested under `sub =` there (botocore's nested sections: "s3 =" then indented
 * "endpoint_url = ..." lines). Missing files are fine (the AWS tools treat them as empty);
 * *seen (when given) becomes 1 when the file has the section. As the AWS tools read them
 * (Python's configparser): section names match exactly, key names in any case; a line is read
 * whole, whatever its length (an STS session token runs to kilobytes). */
static int ini_get_in(const char *path, const char *section, const char *sub, const char *key, char **out,
                      int *seen)
{
    if ((*out && !seen) || !path)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    int in = 0, rc = 0;
    char nested[64] = ""; /* the open nested block ("s3"), or "" */
    while (getline(&line, &cap, f) >= 0) {
        int indented = line[0] == ' ' || line[0] == '\t';
        char *s = trim(line);
        if (*s == '#' || *s == ';' || !*s)
            continue;
        if (*s == '[' && !(indented && nested[0])) {
            char *e = strchr(s, ']');
            if (e) {
                *e = 0;
                in = !strcmp(trim(s + 1), section);
                if (in && seen)
                    *seen = 1;
                nested[0] = 0;
            }
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq)
            continue;
        *eq = 0;
        char *name = trim(s), *val = trim(eq + 1);
        int match;
        if (indented && nested[0]) {
            match = sub && !strcasecmp(nested, sub) && !strcasecmp(name, key);
        } else {
            /* A key without a value opens a nested block of the indented lines after it. */
            snprintf(nested, sizeof nested, "%s", *val ? "" : name);
            match = !sub && !strcasecmp(name, key);
        }
        if (in && match && !*out) {
            *out = strdup(val);
            rc = *out ? 0 : PULSE_ERR_NOMEM;
            if (!seen)
                break;
        }
    }
    if (line)
        explicit_bzero(line, cap);   /* it held a line of the credentials file */
    free(line);
    fclose(f);
    return rc;
}

static int ini_get(const char *path, const char *section, const char *key, char **out)
{
    return ini_get_in(path, section, NULL, key, out, NULL);
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
    free(c->ca_bundle);
    memset(c, 0, sizeof *c);
}

/* Ways the AWS tools get credentials that pulse does not follow: a profile that has one of these
 * and no keys is named, with what to do instead, rather than sending unsigned requests. */
static const char *const unsupported_sources[] = {
    "credential_process", "sso_session", "sso_start_url", "role_arn", "web_identity_token_file",
    "credential_source",
};

/* Names the profile's way to credentials that pulse does not follow (PULSE_ERR_UNSUPPORTED), or
 * says where it looked for credentials (PULSE_ERR_AUTH). */
static int no_credentials(const char *profile, const char *section, const char *cred_file, const char *conf_file)
{
    static const char *const unsupported_env[] = { "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                                                   "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI" };
    for (size_t i = 0; i < sizeof unsupported_env / sizeof unsupported_env[0]; i++)
        if (env(unsupported_env[i]))
            return pulse_fail(PULSE_ERR_UNSUPPORTED, "s3 credentials: %s is set, a way to credentials that pulse "
                              "does not follow; export them: eval \"$(aws configure export-credentials --format env)\"",
                              unsupported_env[i]);
    for (size_t i = 0; i < sizeof unsupported_sources / sizeof unsupported_sources[0]; i++) {
        char *v = NULL;
        int rc = ini_get(cred_file, profile, unsupported_sources[i], &v);
        rc |= ini_get(conf_file, section, unsupported_sources[i], &v);
        if (rc)
            return pulse_fail(PULSE_ERR_NOMEM, "s3 config: out of memory");
        if (v) {
            free(v);
            return pulse_fail(PULSE_ERR_UNSUPPORTED, "s3 credentials: profile %s gets them through %s, which "
                              "pulse does not follow; export them for it: eval \"$(aws configure "
                              "export-credentials --profile %s --format env)\"", profile, unsupported_sources[i],
                              profile);
        }
    }
    return pulse_fail(PULSE_ERR_AUTH, "s3: no AWS credentials found (looked in: env AWS_ACCESS_KEY_ID, "
                      "profile %s in %.120s and %.120s); PULSE_S3_ANONYMOUS=1 sends unsigned requests "
                      "(a public bucket)", profile, cred_file ? cred_file : "(no HOME)",
                      conf_file ? conf_file : "(no HOME)");
}

/* A CA bundle that cannot be read fails every TLS request the same way: refuse it at once. */
static int check_ca(const struct s3_config *c)
{
    FILE *f = fopen(c->ca_bundle, "r");
    if (f) {
        fclose(f);
        return 0;
    }
    return pulse_fail(PULSE_ERR_INVALID, "s3: CA bundle %.200s (from %s) cannot be read: %s", c->ca_bundle,
                      c->ca_from, strerror(errno));
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
    char *services = NULL, *service_endpoint = NULL, *addressing = NULL, *ca_profile = NULL;
    const char *anon = env("PULSE_S3_ANONYMOUS");
    int seen_cred = 0, seen_conf = 0;

    /* Whether the profile exists at all: the AWS tools refuse a profile they cannot find
     * (except "default", which may be absent). */
    rc |= ini_get_in(cred_file, profile, NULL, "aws_access_key_id", &c->access_key, &seen_cred);
    rc |= ini_get_in(conf_file, section, NULL, "region", &c->region, &seen_conf);
    free(c->access_key);
    c->access_key = NULL;
    free(c->region);
    c->region = NULL;
    if (!rc && !seen_cred && !seen_conf && strcmp(profile, "default")) {
        rc = pulse_fail(PULSE_ERR_INVALID, "s3 config: profile %.100s (AWS_PROFILE) not found: no [profile %.100s] "
                        "in %.120s (AWS_CONFIG_FILE) and no [%.100s] in %.120s (AWS_SHARED_CREDENTIALS_FILE)",
                        profile, profile, conf_file ? conf_file : "~/.aws/config", profile,
                        cred_file ? cred_file : "~/.aws/credentials");
        goto out;
    }
    if (anon && strcmp(anon, "0") && strcmp(anon, "1")) {
        rc = pulse_fail(PULSE_ERR_INVALID, "PULSE_S3_ANONYMOUS must be 0 or 1");
        goto out;
    }
    c->anonymous = anon && !strcmp(anon, "1");

    if (c->anonymous) {
        /* Unsigned requests, as `aws --no-sign-request`: no keys are looked for or sent. */
    } else if (env("AWS_ACCESS_KEY_ID") || env("AWS_SECRET_ACCESS_KEY")) {
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
    /* The endpoint as botocore orders it: the service's env, the global env, the profile's
     * [services NAME] section's nested s3 endpoint_url, the profile's own endpoint_url. */
    rc |= dup_env(&c->endpoint, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
    rc |= ini_get(conf_file, section, "services", &services);
    if (!rc && services) {
        char ssec[300];
        int seen = 0;
        snprintf(ssec, sizeof ssec, "services %s", services);
        rc |= ini_get_in(conf_file, ssec, "s3", "endpoint_url", &service_endpoint, &seen);
        if (!rc && !seen) {
            rc = pulse_fail(PULSE_ERR_INVALID, "s3 config: profile %.100s says services = %.100s, but %.150s has "
                            "no [services %.100s] section", profile, services, conf_file, services);
            goto out;
        }
        if (!c->endpoint && service_endpoint) {
            c->endpoint = service_endpoint;
            service_endpoint = NULL;
        }
    }
    rc |= ini_get(conf_file, section, "endpoint_url", &c->endpoint);
    rc |= ini_get_in(conf_file, section, "s3", "addressing_style", &addressing, NULL);
    /* The CA bundle: botocore's (AWS_CA_BUNDLE, then the profile's ca_bundle), then those
     * the curl tool reads (CURL_CA_BUNDLE, then SSL_CERT_FILE). */
    rc |= ini_get(conf_file, section, "ca_bundle", &ca_profile);
    static const char *const ca_env[] = { "AWS_CA_BUNDLE", NULL, "CURL_CA_BUNDLE", "SSL_CERT_FILE" };
    for (size_t i = 0; !rc && !c->ca_bundle && i < 4; i++) {
        const char *v = ca_env[i] ? env(ca_env[i]) : ca_profile;
        if (v && *v) {
            c->ca_bundle = strdup(v);
            c->ca_from = ca_env[i] ? ca_env[i] : "the profile's ca_bundle";
            rc |= c->ca_bundle ? 0 : PULSE_ERR_NOMEM;
        }
    }
    if (!rc && !c->region)
        c->region = strdup("us-east-1");
    if (rc || !c->region) {
        rc = pulse_fail(PULSE_ERR_NOMEM, "s3 config: out of memory");
        goto out;
    }
    if (!c->access_key != !c->secret_key) {
        /* Name which half is missing, never the value of the other. */
        int have_id = c->access_key != NULL;
        rc = pulse_fail(PULSE_ERR_AUTH, "s3 credentials: %s is set but %s is not",
                        have_id ? "the access key id" : "the secret key",
                        have_id ? "the secret key" : "the access key id");
        goto out;
    }
    if (!c->access_key && !c->anonymous) {
        rc = no_credentials(profile, section, cred_file, conf_file);
        goto out;
    }
    if (!addressing || !strcmp(addressing, "auto")) {
        c->addressing = S3_ADDR_AUTO;
    } else if (!strcmp(addressing, "path")) {
        c->addressing = S3_ADDR_PATH;
    } else if (!strcmp(addressing, "virtual")) {
        c->addressing = S3_ADDR_VIRTUAL;
    } else {
        rc = pulse_fail(PULSE_ERR_INVALID, "s3 config: addressing_style '%.40s' of profile %.100s is not auto, "
                        "path or virtual", addressing, profile);
        goto out;
    }
    if (c->endpoint) {
        size_t n = strlen(c->endpoint);
        while (n && c->endpoint[n - 1] == '/')
            c->endpoint[--n] = 0;
        if (strncmp(c->endpoint, "http://", 7) && strncmp(c->endpoint, "https://", 8)) {
            rc = pulse_fail(PULSE_ERR_FORMAT, "AWS_ENDPOINT_URL must start with http:// or https://");
            goto out;
        }
    }
    if (c->ca_bundle && (!c->endpoint || !strncmp(c->endpoint, "https://", 8)))
        rc = check_ca(c);
out:
    if (rc)
        s3_config_free(c);
    free(cred_file);
    free(conf_file);
    free(services);
    free(service_endpoint);
    free(addressing);
    free(ca_profile);
    return rc;
}
