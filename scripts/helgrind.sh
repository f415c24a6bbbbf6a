#!/usr/bin/env bash
# A race detector over the threaded host (ZTS): the extension built with the `std-locks`
# feature (the runtime's locks on std::sync, pthread-based, which helgrind sees; the
# shipped extension uses parking_lot, which it does not) against the ZTS PHP of
# scripts/zts.sh, and tests/zts/host.c running THREADS x REQUESTS of
# tests/zts/scripts/limiter.php against a throw-away Valkey under
# `valgrind --tool=helgrind`. Reports are summarised (contexts, grouped by top frame);
# scripts/helgrind.supp holds the suppressions, each with why it is benign.
# Exits 1 when an unsuppressed report remains.
#
#   scripts/helgrind.sh [THREADS [REQUESTS]]    # default 4 x 10
# Log: .run/helgrind/helgrind.log. Cargo target: CG_CACHE/target/helgrind/CHECKOUT
# (its own: the feature changes the runtime crate; zts.sh's target is not invalidated).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$CG_ROOT/scripts/chroot.sh"
source "$CG_ROOT/scripts/zts.sh"
cd "$CG_ROOT"
threads=${1:-4}; requests=${2:-10}
[[ "$threads" =~ ^[1-9][0-9]?$ ]] || { echo "helgrind.sh: THREADS must be 1..99, got '$threads'" >&2; exit 2; }
[[ "$requests" =~ ^[1-9][0-9]{0,2}$ ]] || { echo "helgrind.sh: REQUESTS must be 1..999, got '$requests'" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "helgrind.sh: valgrind not found: run scripts/setup.sh" >&2; exit 1; }
bash scripts/setup.sh >/dev/null
prefix=$(cg_zts_ensure)
host=$(cg_zts_host)
target="$CG_CACHE/target/helgrind/$(basename "$CG_ROOT")-$(printf %s "$CG_ROOT" | sha1sum | cut -c1-8)"
mkdir -p "$target"
log "helgrind: cargo build --release -p checkout_guard --features std-locks (ZTS PHP)"
( flock 9
  PHP="$prefix/bin/php" PHP_CONFIG="$prefix/bin/php-config" CARGO_TARGET_DIR="$target" \
    cargo build --release --locked --quiet -p checkout_guard --features std-locks
) 9>"$target.lock"
ext="$target/release/libcheckout_guard.so"

out="$CG_ROOT/.run/helgrind"
rm -rf "$out"; mkdir -p "$out"
trap 'stop_pidfile "$out/valkey/valkey.pid"' EXIT INT TERM
port=$(free_port)
start_valkey "$out/valkey" "$port"
printf 'extension=%s\nmemory_limit=128M\ncheckout_guard.timeout_ms=2000\n' "$ext" > "$out/php.ini"
# Every thread decides for a shop of its own and one shared by all (the pool's one
# connection, the live-limit cache and the telemetry buffer are shared), a health read
# and a measured call: the process-wide state a request thread touches.
cat > "$out/cfg.json" <<JSON
{"options": {"name": "helgrind-$$", "url": "redis://127.0.0.1:$port", "timeout_ms": 2000,
   "global": {"capacity": 100000, "refill_per_second": 1000.0}},
 "out": "$out/out",
 "steps": {"*": [["acquire", "shared", 2], ["acquire", "own", 1], ["health"], ["measure", "api", "ok"], ["record", "e", 2]]}}
JSON
log "helgrind: host $threads x $requests (limiter.php) under valgrind --tool=helgrind"
t0=$SECONDS
status=0
USE_ZEND_ALLOC=0 ZEND_DONT_UNLOAD_MODULES=1 timeout 900 \
  valgrind --tool=helgrind --suppressions="$CG_ROOT/scripts/helgrind.supp" --num-callers=30 \
    --gen-suppressions=all --log-file="$out/helgrind.log" \
    "$host" -c "$out/php.ini" "$threads" "$requests" tests/zts/scripts/limiter.php "$out/cfg.json" \
    > "$out/stdout" 2> "$out/stderr" || status=$?
log "helgrind: host ended with status $status in $((SECONDS - t0)) s"
[ "$status" -eq 0 ] || { echo "helgrind.sh: the host failed (status $status):" >&2; tail -20 "$out/stderr" >&2; }
# Contexts grouped by their top frame (the first "at"/"by" line of each report).
python3 - "$out/helgrind.log" <<'PY' || status=1
import re, sys, collections
text = open(sys.argv[1], errors="replace").read()
blocks = re.split(r"\n==\d+== ----------------------------------------------------------------\n", text)
tops = collections.Counter()
for b in blocks:
    m = re.search(r"==\d+== (Possible data race|Lock order|Thread #\d+ (?:unlocked|was created|'s call)|[A-Z][^\n]*)\n", b)
    if not m or "Possible data race" not in b and "Lock order" not in b and "unlocked" not in b:
        continue
    frame = re.search(r"==\d+==\s+(?:at|by) 0x[0-9A-F]+: ([^\n]*)", b[m.end():])
    kind = "race" if "Possible data race" in b else m.group(1).split(" (")[0]
    tops[(kind, frame.group(1) if frame else "?")] += 1
summ = re.findall(r"ERROR SUMMARY: (\d+) errors from (\d+) contexts \(suppressed: (\d+) from (\d+)\)", text)
for (kind, frame), n in tops.most_common():
    print(f"{n:5d}  {kind:10s} {frame}")
if not summ:
    print("helgrind.sh: no ERROR SUMMARY in the log (did valgrind run?)", file=sys.stderr); sys.exit(1)
e, c, se, sc = map(int, summ[-1])
print(f"helgrind: {e} errors from {c} contexts unsuppressed; suppressed {se} from {sc} contexts")
sys.exit(1 if c else 0)
PY
exit $status
