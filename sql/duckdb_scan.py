"""Runs sql/scan.sql (or peaks.sql) on DuckDB directly over JSONL files, reading only the
columns the scan needs. Prints JSON. Usage:
  python sql/duckdb_scan.py scan|peaks FILE [--threads N] [--fine-ms 1000] [--coarse-ms 300000]
                            [--fine-threshold 50] [--coarse-threshold 5]
"""

import argparse
import json
import os
import resource
import sys
import time

import duckdb

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("query", choices=["scan", "peaks"])
    p.add_argument("file")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fine-ms", type=int, default=1000)
    p.add_argument("--coarse-ms", type=int, default=300000)
    p.add_argument("--fine-threshold", type=float, default=50)
    p.add_argument("--coarse-threshold", type=float, default=5)
    a = p.parse_args()
    path = a.file.replace("'", "''")
    events = (
        f"read_json('{path}', format='newline_delimited', ignore_errors=true, "
        "columns={'eventType': 'VARCHAR', 'timestamp': 'BIGINT', 'api': 'VARCHAR'})"
    )
    sql = open(os.path.join(HERE, a.query + ".sql")).read()
    for k, v in {"events": events, "fine_ms": a.fine_ms, "coarse_ms": a.coarse_ms,
                 "fine_threshold": a.fine_threshold, "coarse_threshold": a.coarse_threshold}.items():
        sql = sql.replace("{" + k + "}", str(v))
    con = duckdb.connect()
    con.execute(f"SET threads = {a.threads}")
    t0 = time.perf_counter()
    rows = con.execute(sql).fetchall()
    secs = time.perf_counter() - t0
    cols = ["start_ms", "end_ms", "peak_rps", "calls"] if a.query == "scan" else ["day", "api", "peak_rps", "events"]
    out = {
        "rows": [dict(zip(cols, [float(x) if isinstance(x, float) else x for x in r])) for r in rows],
        "seconds": secs,
        "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
