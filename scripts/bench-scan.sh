#!/usr/bin/env bash
# The scan against DuckDB on the same generated day (default 10 million events, ~2.3 GB
# of JSONL in .run/bench-scan/), same thresholds: events per second and peak memory, and
# a check that both find the same windows. Bounded: one file, three runs per engine.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
bash scripts/setup.sh >/dev/null
build_extension
EVENTS=${EVENTS:-10000000}
dir="$CG_ROOT/.run/bench-scan"; mkdir -p "$dir"
file="$dir/day-$EVENTS.jsonl"
[ -s "$file" ] || target/release/checkout-guard generate --events "$EVENTS" -o "$file"
.venv/bin/python - "$file" <<'PY'
import json, os, resource, subprocess, sys, time
f = sys.argv[1]
args = ["--fine-threshold", "150", "--coarse-threshold", "0.5"]
lines = sum(1 for _ in open(f, "rb"))
def run(cmd):
    best = None
    for _ in range(3):
        t = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        secs = time.perf_counter() - t
        best = secs if best is None or secs < best else best
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return best, out, rss
res = {}
cg = None
for threads in (1, 2):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    secs, out, rss = run(["target/release/checkout-guard", "scan", "--json", "--threads", str(threads), *args, f])
    windows = [(w["start_ms"], w["end_ms"], w["calls"]) for w in json.loads(out)["windows"]]
    assert cg is None or windows == cg, "threads changed the answer"
    cg = windows
    res[f"checkout-guard {threads} thread(s)"] = (secs, rss)
for threads in (1, 2):
    secs, out, _ = run([".venv/bin/python", "sql/duckdb_scan.py", "scan", f, "--threads", str(threads), *args])
    d = json.loads(out)
    rows = [(r["start_ms"], r["end_ms"], r["calls"]) for r in d["rows"]]
    assert rows == cg, f"DuckDB ({threads} threads) found other windows: {len(rows)} vs {len(cg)}"
    res[f"DuckDB {threads} thread(s)"] = (secs, d["max_rss_kb"])
print(f"{lines:,} events ({os.path.getsize(f) / 1e9:.2f} GB), {len(cg)} windows, identical in both engines")
print(f"{'engine':<28} {'seconds':>8} {'M events/s':>11} {'peak RSS':>10}")
for name, (secs, rss) in res.items():
    print(f"{name:<28} {secs:>8.2f} {lines / secs / 1e6:>11.2f} {rss / 1024:>8.0f} MB")
print("(best of 3 wall-clock runs each; peak RSS of checkout-guard is the largest of its runs so far)")
PY
