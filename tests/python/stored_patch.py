# SPDX-License-Identifier: Apache-2.0
# Test helper: the bytes of a published patch, put together from the objects its record names.
import json
import os
import subprocess


def patch_bytes(store_dir: str, run: str, record_key: str) -> bytes:
    """The patch of the sync-patch record at RECORD_KEY in the file:// store at STORE_DIR: its
    head, then its data in parts, each read from the run's objects/ (`pulse manifest show`
    reads the record)."""
    shown = subprocess.run([os.environ["PULSE_BIN"], "manifest", "show", "--store", "file://" + store_dir,
                            "--run", run, "--json", record_key], check=True, capture_output=True, text=True).stdout
    objdir = os.path.join(store_dir, run, "objects")
    parts = []
    for o in json.loads(shown)["objects"]:
        with open(os.path.join(objdir, o["digest"]), "rb") as f:
            parts.append(f.read())
    return b"".join(parts)
