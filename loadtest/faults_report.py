"""The fault matrix's table and must-hold checks, from .run/faults/<mode>/<run>/faults.json
(<policy>/ with the script deciding, module-<policy>/ with the native module, tls-<policy>/
with the script over TLS end to end).

  python faults_report.py OUT_DIR    -> markdown on stdout; exit 1 if a check fails
"""

import json
import os
import sys

POLICIES = ("allow", "deny", "throw")
RUNS = POLICIES + tuple(f"module-{p}" for p in POLICIES) + tuple(f"tls-{p}" for p in POLICIES)
# A decision waits at most timeout_ms (50) per attempt, twice (one transparent reconnect),
# plus connect: anything near a second would be a hang.
HANG_MS = 500
# Recovery target: under 1 s plus retry_interval_ms (1000).
RECOVERY_S = 2.0
# The checkout's directory: paths under it are printed relative to it (.run/...).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    out = sys.argv[1]
    results = {r: json.load(open(os.path.join(out, r, "faults.json"))) for r in RUNS if os.path.exists(os.path.join(out, r, "faults.json"))}
    any_r = next(iter(results.values()))
    lines = [
        f"# Fault matrix ({os.path.basename(out)})", "",
        f"php-fpm {any_r['workers']} workers recycled every 25 requests (pm.max_requests), steady checkouts at ordinary shops",
        f"(4 buyers x 8/s), one acquire() every 10 ms in a probe process; each fault {any_r['fault_s']:g} s, then {any_r['recovery_window_s']:g} s",
        "of recovery. timeout_ms 50, retry_interval_ms 1000.", "",
        "| fault | on_unavailable | engine (during / after) | checkouts during the fault | acquire() p99 / max ms | decided by the policy | PHP errors | crashes | php-fpm workers killed / recycled | recovery s | connections after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    failures = []
    tls_lines = []
    for run, res in results.items():
        tls = res.get("tls")
        policy = res["policy"] + (", TLS" if tls else "")
        expected = "module" if res.get("module") else "lua"
        if tls:
            conns = tls["proxy_connections"]
            tls_lines.append(f"- {run}: {res.get('url')} to {tls['server']} with `--port {tls['server_port']} --tls-port {tls['server_tls_port']}`; "
                             f"{conns['tls']} connections through the proxy began with a TLS handshake, {conns['plain']} with anything else; "
                             f"the probe's health()['tls']: {(tls['probe_health_tls'] or '').replace(ROOT + os.sep, '')}. Faults left out over TLS: "
                             + ("; ".join(tls["left_out"]) if tls["left_out"] else "none (every fault applies to a TLS server as to a plain one)") + ".")
            if tls["server_port"] != "0" or not conns["tls"] or conns["plain"] or not (tls["probe_health_tls"] or "").startswith("on"):
                failures.append(f"{run}: not TLS end to end: {tls}")
        for r in res["rows"]:
            how = ", ".join(f"{k} {v}" for k, v in sorted(r["checkouts"].items(), key=lambda kv: -kv[1])) or "none"
            rec = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.2f}"
            during = ", ".join(f"{k} {v}" for k, v in sorted((r.get("engines_during") or {}).items(), key=lambda kv: -kv[1])) or "none"
            lines.append(f"| {r['fault']} | {policy} | {during} / {r.get('engine_after')} | {how} | {r['acquire_p99_ms']} / {r['acquire_max_ms']} | {r['decisions_by_policy']} | {r['php_errors']} | {r['crashes']} | {r['workers_killed']} / {r['workers_recycled']} | {rec} | {r['connections_after']} |")
            where = f"{r['fault']} ({policy}, {expected})"
            if r.get("engine_after") != expected:
                failures.append(f"{where}: after recovery the {r.get('engine_after')} engine decided, not the {expected} one")
            if "without the module" in r["fault"] and not (r.get("engines_during") or {}).get("lua"):
                failures.append(f"{where}: the script did not take over while the module was missing: {r.get('engines_during')}")
            if r["php_errors"]:
                failures.append(f"{where}: {r['php_errors']} PHP errors, e.g. {r['php_error_lines'][:1]}")
            if r["crashes"]:
                failures.append(f"{where}: {r['crashes']} crashes")
            if r["acquire_max_ms"] is not None and r["acquire_max_ms"] > HANG_MS and "slow" not in r["fault"] and "paused" not in r["fault"]:
                failures.append(f"{where}: an acquire() took {r['acquire_max_ms']} ms")
            if r["acquire_p99_ms"] is not None and r["acquire_p99_ms"] > HANG_MS:
                failures.append(f"{where}: acquire() p99 {r['acquire_p99_ms']} ms: a hang, not a timeout")
            if r["recovery_s"] is None or r["recovery_s"] > RECOVERY_S:
                failures.append(f"{where}: recovery {r['recovery_s']} s (target < {RECOVERY_S} s)")
            if r["connections_after"] > res["workers"] + 1:
                failures.append(f"{where}: {r['connections_after']} connections left for {res['workers']} workers + 1 probe")
            killing = "worker killed" in r["fault"]
            if killing and r["workers_killed"] < 1:
                failures.append(f"{where}: no worker was killed")
            unexpected = {k: v for k, v in r["checkouts"].items() if k.startswith("error") or k == "io"}
            if unexpected and not killing:
                failures.append(f"{where}: unexpected answers {unexpected}")
    if tls_lines:
        lines += ["", "Over TLS (Debian's redis-server, TLS only; certificates made by the run; the proxy forwards the TLS bytes):", ""] + tls_lines
    lines += ["", "Must hold: no PHP error or crash, no acquire() over 500 ms outside the slow and paused",
              "faults (whose p99 must stay under it too), recovery under 2 s (1 s + retry_interval_ms),",
              "at most one connection per worker and the probe, no 5xx other than the policy's and the",
              "killed worker's own request; after recovery the engine of the run decides (the module",
              "where Valkey has it), and while a node runs without the module the script decides; a TLS",
              "run's server has no plain port and every connection the proxy forwarded was TLS.", ""]
    lines += ["All checks hold." if not failures else "Failed:"] + [f"- {f}" for f in failures]
    print("\n".join(lines))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
