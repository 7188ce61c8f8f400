/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of node keys: key files round trip, modes, refusal to overwrite, trust sets, sign/verify. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "pulseweights/keys.h"
#include "tmpdir.h"

static void write_text(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, mode);
}

static size_t read_text(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return n;
}

static void test_round_trip(void)
{
    char name[256], key_path[512], pub_path[512];
    test_path(name, sizeof name, "node1");
    snprintf(key_path, sizeof key_path, "%s.key", name);
    snprintf(pub_path, sizeof pub_path, "%s.pub", name);

    pulse_secret_key *k = NULL, *k2 = NULL;
    CHECK_OK(pulse_key_generate(&k));
    CHECK_OK(pulse_key_save(k, name, "trainer one"));
    struct stat st;
    CHECK(stat(key_path, &st) == 0 && (st.st_mode & 07777) == 0600);
    CHECK(stat(pub_path, &st) == 0 && (st.st_mode & 07777) == 0644);

    uint8_t pub[32], pub2[32];
    pulse_key_public(k, pub);
    CHECK_OK(pulse_key_load_secret(key_path, &k2));
    if (k2) {
        pulse_key_public(k2, pub2);
        CHECK(memcmp(pub, pub2, 32) == 0);
    }
    pulse_public_key pk;
    CHECK_OK(pulse_key_load_public(pub_path, &pk));
    CHECK(memcmp(pk.key, pub, 32) == 0);
    CHECK(strcmp(pk.comment, "trainer one") == 0);

    /* The .pub text is exactly header, hex, comment. */
    char text[512], id[PULSE_NODE_ID_HEX], want[512];
    read_text(pub_path, text, sizeof text);
    pulse_node_id_hex(pub, id);
    snprintf(want, sizeof want, "pulse-ed25519-public-v1 %s trainer one\n", id);
    CHECK(strcmp(text, want) == 0);

    /* A signature by the loaded key verifies under the original public key. */
    const char msg[] = "record bytes";
    uint8_t sig[64];
    CHECK_OK(pulse_sign(k2, msg, sizeof msg, sig));
    CHECK_OK(pulse_verify(pub, msg, sizeof msg, sig));

    /* Never overwrite: both files stay as they were. */
    char before[512], after[512];
    read_text(key_path, before, sizeof before);
    pulse_secret_key *other = NULL;
    CHECK_OK(pulse_key_generate(&other));
    CHECK_ERR(pulse_key_save(other, name, NULL), PULSE_ERR_EXISTS);
    CHECK(strstr(pulse_last_error(), "node1.") != NULL);
    read_text(key_path, after, sizeof after);
    CHECK(strcmp(before, after) == 0);

    /* A taken .pub name refuses before a .key is written. */
    char lone[256], lone_pub[512], lone_key[512];
    test_path(lone, sizeof lone, "lone");
    snprintf(lone_pub, sizeof lone_pub, "%s.pub", lone);
    snprintf(lone_key, sizeof lone_key, "%s.key", lone);
    write_text(lone_pub, "taken\n", 0644);
    CHECK_ERR(pulse_key_save(other, lone, NULL), PULSE_ERR_EXISTS);
    CHECK(access(lone_key, F_OK) != 0);

    /* Comments must be one printable line. */
    char fresh[512];
    test_path(fresh, sizeof fresh, "fresh");
    CHECK_ERR(pulse_key_save(other, fresh, "two\nlines"), PULSE_ERR_INVALID);

    pulse_key_free(&k);
    pulse_key_free(&k2);
    pulse_key_free(&other);
    CHECK(k == NULL);
    pulse_key_free(&k);   /* NULL-safe */
}

static void test_modes_and_damage(void)
{
    char name[256], key_path[512];
    test_path(name, sizeof name, "modes");
    snprintf(key_path, sizeof key_path, "%s.key", name);
    pulse_secret_key *k = NULL, *k2 = NULL;
    CHECK_OK(pulse_key_generate(&k));
    CHECK_OK(pulse_key_save(k, name, NULL));

    /* Like ssh: any group or other permission refuses the key, naming the file and the mode. */
    chmod(key_path, 0644);
    CHECK_ERR(pulse_key_load_secret(key_path, &k2), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), key_path) != NULL);
    CHECK(strstr(pulse_last_error(), "0644") != NULL);
    CHECK(k2 == NULL);
    chmod(key_path, 0640);
    CHECK_ERR(pulse_key_load_secret(key_path, &k2), PULSE_ERR_INVALID);
    CHECK(strstr(pulse_last_error(), "0640") != NULL);
    chmod(key_path, 0604);
    CHECK_ERR(pulse_key_load_secret(key_path, &k2), PULSE_ERR_INVALID);
    chmod(key_path, 0400);
    CHECK_OK(pulse_key_load_secret(key_path, &k2));
    pulse_key_free(&k2);

    /* A damaged public half no longer matches the seed: refused, not loaded under a wrong identity. */
    char text[1024];
    size_t n = read_text(key_path, text, sizeof text);
    CHECK(n > 30);
    char damaged[512];
    test_path(damaged, sizeof damaged, "damaged.key");
    text[n - 2] = text[n - 2] == '0' ? '1' : '0';
    write_text(damaged, text, 0600);
    CHECK_ERR(pulse_key_load_secret(damaged, &k2), PULSE_ERR_FORMAT);
    CHECK(strstr(pulse_last_error(), "damaged.key") != NULL);

    write_text(damaged, "pulse-ed25519-secret-v2\n00\n", 0600);
    CHECK_ERR(pulse_key_load_secret(damaged, &k2), PULSE_ERR_FORMAT);
    char pubfile[512];
    test_path(pubfile, sizeof pubfile, "modes.pub");
    chmod(pubfile, 0600);
    CHECK_ERR(pulse_key_load_secret(pubfile, &k2), PULSE_ERR_FORMAT);   /* a .pub is not a secret key */
    CHECK_ERR(pulse_key_load_secret("/nonexistent/x.key", &k2), PULSE_ERR_NOTFOUND);
    pulse_key_free(&k);
}

static void test_public_files_and_trust(void)
{
    char dir[512], path[600];
    test_path(dir, sizeof dir, "trust");
    mkdir(dir, 0755);
    pulse_trust *t = NULL;
    CHECK_ERR(pulse_key_load_trust_dir(dir, &t), PULSE_ERR_NOTFOUND);   /* empty: trusting nobody */

    pulse_secret_key *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(pulse_key_generate(&a));
    CHECK_OK(pulse_key_generate(&b));
    CHECK_OK(pulse_key_generate(&c));
    snprintf(path, sizeof path, "%s/a", dir);
    CHECK_OK(pulse_key_save(a, path, "alpha"));
    snprintf(path, sizeof path, "%s/b", dir);
    CHECK_OK(pulse_key_save(b, path, NULL));
    snprintf(path, sizeof path, "%s/README", dir);
    write_text(path, "not a key\n", 0644);

    CHECK_OK(pulse_key_load_trust_dir(dir, &t));
    CHECK_EQ_INT(pulse_trust_count(t), 2);
    uint8_t pa[32], pb[32], pc[32];
    pulse_key_public(a, pa);
    pulse_key_public(b, pb);
    pulse_key_public(c, pc);
    const pulse_public_key *fa = pulse_trust_find(t, pa), *fb = pulse_trust_find(t, pb);
    CHECK(fa && !strcmp(fa->comment, "alpha"));
    CHECK(fb && !strcmp(fb->comment, "b"));   /* the comment defaults to the base name */
    CHECK(pulse_trust_find(t, pc) == NULL);
    /* Loading the same file again adds nothing. */
    snprintf(path, sizeof path, "%s/a.pub", dir);
    CHECK_OK(pulse_trust_load(t, path));
    CHECK_EQ_INT(pulse_trust_count(t), 2);
    CHECK(pulse_trust_get(t, 2) == NULL);
    pulse_trust_free(&t);
    CHECK(t == NULL);

    /* One malformed .pub refuses the whole set. */
    snprintf(path, sizeof path, "%s/z.pub", dir);
    write_text(path, "pulse-ed25519-public-v1 abcd\n", 0644);
    CHECK_ERR(pulse_key_load_trust_dir(dir, &t), PULSE_ERR_FORMAT);
    CHECK(strstr(pulse_last_error(), "z.pub") != NULL);
    CHECK(t == NULL);

    /* Public key file strictness. */
    pulse_public_key pk;
    char id[PULSE_NODE_ID_HEX], text[400];
    pulse_node_id_hex(pa, id);
    snprintf(text, sizeof text, "pulse-ed25519-public-v1 %s\n", id);
    write_text(path, text, 0644);
    CHECK_OK(pulse_key_load_public(path, &pk));
    CHECK(memcmp(pk.key, pa, 32) == 0);
    snprintf(text, sizeof text, "pulse-ed25519-public-v2 %s\n", id);
    write_text(path, text, 0644);
    CHECK_ERR(pulse_key_load_public(path, &pk), PULSE_ERR_FORMAT);
    snprintf(text, sizeof text, "pulse-ed25519-public-v1 %sff\n", id);
    write_text(path, text, 0644);
    CHECK_ERR(pulse_key_load_public(path, &pk), PULSE_ERR_FORMAT);
    snprintf(text, sizeof text, "pulse-ed25519-public-v1 %s x\nsecond line\n", id);
    write_text(path, text, 0644);
    CHECK_ERR(pulse_key_load_public(path, &pk), PULSE_ERR_FORMAT);
    id[10] = 'g';
    snprintf(text, sizeof text, "pulse-ed25519-public-v1 %s\n", id);
    write_text(path, text, 0644);
    CHECK_ERR(pulse_key_load_public(path, &pk), PULSE_ERR_FORMAT);
    unlink(path);

    pulse_key_free(&a);
    pulse_key_free(&b);
    pulse_key_free(&c);
}

static void test_sign_verify(void)
{
    pulse_secret_key *a = NULL, *b = NULL;
    CHECK_OK(pulse_key_generate(&a));
    CHECK_OK(pulse_key_generate(&b));
    uint8_t pa[32], pb[32], sig[64];
    pulse_key_public(a, pa);
    pulse_key_public(b, pb);
    uint8_t msg[100];
    for (int i = 0; i < 100; i++)
        msg[i] = (uint8_t)(i * 7);
    CHECK_OK(pulse_sign(a, msg, sizeof msg, sig));
    CHECK_OK(pulse_verify(pa, msg, sizeof msg, sig));
    CHECK_ERR(pulse_verify(pb, msg, sizeof msg, sig), PULSE_ERR_AUTH);   /* another key */
    CHECK_ERR(pulse_verify(pa, msg, sizeof msg - 1, sig), PULSE_ERR_AUTH); /* fewer bytes */
    msg[50] ^= 1;
    CHECK_ERR(pulse_verify(pa, msg, sizeof msg, sig), PULSE_ERR_AUTH);
    msg[50] ^= 1;
    sig[3] ^= 0x80;
    CHECK_ERR(pulse_verify(pa, msg, sizeof msg, sig), PULSE_ERR_AUTH);
    CHECK_OK(pulse_sign(a, NULL, 0, sig));   /* the empty message is a message too */
    CHECK_OK(pulse_verify(pa, NULL, 0, sig));
    pulse_key_free(&a);
    pulse_key_free(&b);

    uint8_t bytes[4];
    char hex[9];
    CHECK_OK(pulse_hex_decode("00fFa5", 6, bytes, 3));
    CHECK(bytes[0] == 0 && bytes[1] == 0xff && bytes[2] == 0xa5);
    pulse_hex_encode(bytes, 3, hex);
    CHECK(strcmp(hex, "00ffa5") == 0);
    CHECK_ERR(pulse_hex_decode("00fx", 4, bytes, 2), PULSE_ERR_FORMAT);
    CHECK_ERR(pulse_hex_decode("00f", 3, bytes, 2), PULSE_ERR_FORMAT);
}

int main(void)
{
    test_round_trip();
    test_modes_and_damage();
    test_public_files_and_trust();
    test_sign_verify();
    test_tmpdir_remove();
    return check_done("test_keys");
}
