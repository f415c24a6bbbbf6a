"""The scan against DuckDB on one generated day (scripts/bench-scan.sh): the best of 3
wall-clock runs per engine and thread count, peak RSS, and a check that both engines find
the same windows.

  python bench/scan_compare.py EVENTS_JSONL
"""

import json
import os
import resource
import subprocess
import sys
import time

ARGS = ["--fine-threshold", "150", "--coarse-threshold", "0.5"]


def best_of(cmd: list, runs: int = 3) -> tuple[float, str, int]:
    """(best wall-clock seconds, stdout of the last run, peak RSS kB of all children so far)."""
    best = None
    out = ""
    for _ in range(runs):
        t = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        secs = time.perf_counter() - t
        best = secs if best is None or secs < best else best
    return best, out, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def table(lines: int, size: int, windows: int, res: dict) -> str:
    """res: {engine: (seconds, peak RSS kB)}."""
    out = [f"{lines:,} events ({size / 1e9:.2f} GB), {windows} windows, identical in both engines",
           f"{'engine':<28} {'seconds':>8} {'M events/s':>11} {'peak RSS':>10}"]
    for name, (secs, rss) in res.items():
        out.append(f"{name:<28} {secs:>8.2f} {lines / secs / 1e6:>11.2f} {rss / 1024:>8.0f} MB")
    out.append("(best of 3 wall-clock runs each; peak RSS of checkout-guard is the largest of its runs so far)")
    return "\n".join(out)


def main(f: str) -> None:
    lines = sum(1 for _ in open(f, "rb"))
    res = {}
    cg = None
    for threads in (1, 2):
        secs, out, rss = best_of(["target/release/checkout-guard", "scan", "--json", "--threads", str(threads), *ARGS, f])
        windows = [(w["start_ms"], w["end_ms"], w["calls"]) for w in json.loads(out)["windows"]]
        assert cg is None or windows == cg, "threads changed the answer"
        cg = windows
        res[f"checkout-guard {threads} thread(s)"] = (secs, rss)
    for threads in (1, 2):
        secs, out, _ = best_of([sys.executable, "sql/duckdb_scan.py", "scan", f, "--threads", str(threads), *ARGS])
        d = json.loads(out)
        rows = [(r["start_ms"], r["end_ms"], r["calls"]) for r in d["rows"]]
        assert rows == cg, f"DuckDB ({threads} threads) found other windows: {len(rows)} vs {len(cg)}"
        res[f"DuckDB {threads} thread(s)"] = (secs, d["max_rss_kb"])
    print(table(lines, os.path.getsize(f), len(cg), res))


if __name__ == "__main__":
    main(sys.argv[1])
