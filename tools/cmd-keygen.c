/* SPDX-License-Identifier: Apache-2.0 */
/* pulse keygen: make a node's Ed25519 key pair, NAME.key (secret, 0600) and NAME.pub (shareable). */
#include <stdio.h>
#include <string.h>

#include "pulseweights/keys.h"
#include "tools/cli.h"
#include "tools/verbs.h"

static const char usage[] =
    "usage: pulse keygen [--comment TEXT] NAME\n"
    "\n"
    "Makes an Ed25519 key pair for a node:\n"
    "  NAME.key  the secret key (mode 0600; keep it on the publishing node only)\n"
    "  NAME.pub  the public key, one line: pulse-ed25519-public-v1 <hex> [TEXT];\n"
    "            give it to every follower that should trust this node (--trust)\n"
    "Existing files are never overwritten. Prints the node id (the public key in hex).\n"
    "\n"
    "options:\n"
    "  --comment TEXT  label stored in NAME.pub (default: the base name of NAME)\n"
    "  -h, --help      show this help\n";

int cmd_keygen(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return cli_finish_stdout("keygen");
    }
    const char *name = NULL, *comment = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--comment")) {
            if (++i == argc)
                return cli_usage_error("keygen", "--comment needs a value");
            comment = argv[i];
        } else if (!strcmp(argv[i], "--") && i + 1 < argc && !name) {
            name = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage_error("keygen", "unknown option '%s'", argv[i]);
        } else if (name) {
            return cli_usage_error("keygen", "one NAME only (got '%s' and '%s')", name, argv[i]);
        } else {
            name = argv[i];
        }
    }
    if (!name || !*name)
        return cli_usage_error("keygen", "missing NAME");
    if (!comment) {
        const char *slash = strrchr(name, '/');
        comment = slash ? slash + 1 : name;
    }

    pulse_secret_key *key = NULL;
    int err = pulse_key_generate(&key);
    if (err)
        return cli_fail("keygen", err, "generating a key");
    err = pulse_key_save(key, name, comment);
    uint8_t pub[PULSE_PUBLIC_KEY_BYTES];
    pulse_key_public(key, pub);
    pulse_key_free(&key);
    if (err)
        return cli_fail("keygen", err, "writing the key files");
    char id[PULSE_NODE_ID_HEX];
    pulse_node_id_hex(pub, id);
    printf("wrote %s.key (secret, mode 0600) and %s.pub\nnode id %s\n", name, name, id);
    return cli_finish_stdout("keygen");
}
