#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The state directory: created 0700, refused when group or others can write it, and held by one pulse process at a time.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"

P synth --params 100K --steps 2 --out ckpt >/dev/null
publish 0 1

# 1. A state directory the node creates is private to its user.
mkdir a
follow a --once 2>a.log || fail "follow --once: $(cat a.log)"
[ "$(stat -c %a a/state)" = 700 ] || fail "created state directory has mode $(stat -c %a a/state), wanted 700"
[ "$(stat -c %a tstate)" = 700 ] || fail "publisher's state directory has mode $(stat -c %a tstate), wanted 700"
ok "state directories are created 0700"

# 2. One others can write (0777, 0770) is refused before anything is read or written, by the
#    follower, pull and the publisher, with the chmod to run.
for mode in 777 770 702; do
  mkdir -p "w$mode/state"
  chmod "$mode" "w$mode/state"
  if follow "w$mode" --once 2>"w$mode.log"; then fail "follow with a $mode state directory ran"; fi
  grep -q "state directory $work/w$mode/state has mode 0$mode: group or others can write it (run chmod 700 $work/w$mode/state)" \
    "w$mode.log" || grep -q "w$mode/state has mode 0$mode: group or others can write it (run chmod 700" "w$mode.log" \
    || fail "no clear refusal for mode $mode: $(cat "w$mode.log")"
  [ ! -e "w$mode/w.safetensors" ] || fail "weights written with a $mode state directory"
  [ -z "$(ls -A "w$mode/state")" ] || fail "files written into a $mode state directory: $(ls -A "w$mode/state")"
  if P pull --store "$store" --run r --trust trainer.pub --state "w$mode/state" --weights "w$mode/w.safetensors" \
    >/dev/null 2>"p$mode.log"; then fail "pull with a $mode state directory ran"; fi
  grep -q "has mode 0$mode: group or others can write it (run chmod 700" "p$mode.log" \
    || fail "pull: no clear refusal for mode $mode: $(cat "p$mode.log")"
done
mkdir -p pub777
chmod 777 pub777
if P publish --store "$store" --run r2 --key trainer.key --state pub777 "$(ckpt 0)" >/dev/null 2>pub777.log; then
  fail "publish with a 0777 state directory ran"
fi
grep -q "has mode 0777: group or others can write it (run chmod 700" pub777.log \
  || fail "publish: no clear refusal: $(cat pub777.log)"
chmod 700 w777/state
follow w777 --once 2>w777b.log || fail "follow after chmod 700: $(cat w777b.log)"
ok "a state directory group or others can write is refused (follow, pull, publish), fine after chmod 700"

# 3. Two processes on one state directory: the second is refused, naming the first's pid,
#    and leaves the weights alone.
mkdir b
start_follow b.log b --poll-ms 200
holder=$bg
wait_until 60 grep -q "^$holder\$" b/state/lock || fail "the follower did not lock its state directory: $(cat b.log)"
wait_until 60 grep -q 'started' b.log || fail "the follower did not start: $(cat b.log)"
sum_before=$(cat b/state/lock)
if follow b --once 2>b2.log; then fail "a second follower on the same state directory ran"; fi
grep -q "state directory $work/b/state is in use by another pulse process (pid $holder)" b2.log \
  || grep -q "state directory b/state is in use by another pulse process (pid $holder)" b2.log \
  || fail "second follower: no clear refusal: $(cat b2.log)"
if P pull --store "$store" --run r --trust trainer.pub --state b/state --weights b/other.safetensors \
  >/dev/null 2>b3.log; then fail "pull on a state directory in use ran"; fi
grep -q "is in use by another pulse process (pid $holder)" b3.log || fail "pull: no clear refusal: $(cat b3.log)"
[ ! -e b/other.safetensors ] || fail "the refused pull wrote weights"
if P publish --store "$store" --run r3 --key trainer.key --state b/state "$(ckpt 0)" >/dev/null 2>b4.log; then
  fail "publish on a state directory in use ran"
fi
grep -q "is in use by another pulse process (pid $holder)" b4.log || fail "publish: no clear refusal: $(cat b4.log)"
[ "$(cat b/state/lock)" = "$sum_before" ] || fail "a refused process rewrote the lock file"
kill -TERM "$holder"
wait "$holder" || true
bg=""
# The lock dies with its holder, even killed: the next one takes it.
follow b --once 2>b5.log || fail "follow after the holder stopped: $(cat b5.log)"
start_follow b6.log b --poll-ms 200
holder=$bg
wait_until 60 grep -q "^$holder\$" b/state/lock || fail "no lock: $(cat b6.log)"
kill -9 "$holder"
wait "$holder" 2>/dev/null || true
bg=""
follow b --once 2>b7.log || fail "follow after kill -9 of the holder: $(cat b7.log)"
ok "a second follow, pull or publish on a state directory in use is refused with the holder's pid"

# 4. The lock file is never followed through a symbolic link.
mkdir -p c/state
chmod 700 c/state
ln -s "$work/victim" c/state/lock
if follow c --once 2>c.log; then fail "follow with a symlinked lock file ran"; fi
[ ! -e victim ] || fail "the lock file's link was followed"
ok "a symbolic link in place of the lock file is refused"

# 5. A LoCo trainer's state directory (pulse loco init / round) is held to the same rule.
PYTHONPATH="$here/../patch" python3 -c '
from mkckpt import write_safetensors
import struct
write_safetensors("theta0.safetensors", [("w", "F32", [64], struct.pack("<64f", *range(64)))])'
P loco init --state loco-new --global theta0.safetensors >/dev/null || fail "loco init"
[ "$(stat -c %a loco-new)" = 700 ] || fail "loco init created its state directory with mode $(stat -c %a loco-new)"
mkdir loco-open
chmod 777 loco-open
if P loco init --state loco-open --global theta0.safetensors >/dev/null 2>loco.log; then fail "loco init into a 0777 directory ran"; fi
grep -q "has mode 0777: group or others can write it (run chmod 700" loco.log || fail "loco init: no clear refusal: $(cat loco.log)"
[ -z "$(ls -A loco-open)" ] || fail "loco init wrote into a 0777 directory"
ok "loco init creates its state directory 0700 and refuses one others can write"
