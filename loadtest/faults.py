"""The fault matrix (docs/reliability.md): real faults against the running checkout stack under
steady load, for one on_unavailable policy. scripts/faults.sh starts the stack and calls
this once per policy, then renders the table.

While loadtest/steady.py buys at ordinary shops and loadtest/acquire_probe.php makes one
decision every 10 ms (same Valkey URL, timeout and policy as the checkout), each fault is
applied for --fault seconds, then given --recovery seconds. Per fault: checkouts answered
and how, acquire() p99 during the fault, PHP errors and crashes, recovery time (fault end
to the first decision made by Valkey again), checkout_guard connections left in Valkey.

With --tls-dir the server is Debian's redis-server serving TLS only (the certificates of
scripts/lib.sh's make_tls_certs in that directory): this script starts and restarts it with
the TLS arguments and talks to it over TLS too, the probe verifies it against the run's CA
(checkout_guard.tls.cafile), and faults.json's "tls" says what shows the connections were TLS.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

import valkey

import httpclient

HERE = os.path.dirname(os.path.abspath(__file__))
# valkey-py's TLS settings for this script's own connections (main() sets them for --tls-dir).
CLIENT_TLS: dict = {}
# Faults that do not apply over TLS, with the reason (printed by faults_report.py): none so
# far; every fault of the list acts on the server, the proxy or a worker the same way.
TLS_LEFT_OUT: dict = {}


def valkey_client(port: int, timeout: float = 3, verify: bool = True) -> valkey.Valkey:
    """A client of Valkey itself (not through the proxy), on one connection; over TLS it
    verifies the server against the run's CA unless `verify` is False."""
    tls = dict(CLIENT_TLS, ssl_cert_reqs="none") if CLIENT_TLS and not verify else CLIENT_TLS
    return valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=timeout, socket_connect_timeout=timeout,
                         single_connection_client=True, **tls)


def command(port: int, *args: str):
    """One command to Valkey (directly, not through the proxy), on a connection of its own."""
    with valkey_client(port) as c:
        return c.execute_command(*args)


def our_connections(port: int) -> int:
    with valkey_client(port) as c:
        if CLIENT_TLS:
            # Debian's redis-server 7.0 knows no CLIENT SETINFO, so no lib-name: every client
            # but this one is the checkout's (php-fpm workers, the probe).
            me = c.client_id()
            return sum(1 for client in c.client_list() if int(client["id"]) != me)
        return sum(1 for client in c.client_list() if client.get("lib-name") == "checkout_guard")


def log_size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def new_lines(path: str, offset: int) -> list:
    if not os.path.exists(path):
        return []
    with open(path, errors="replace") as f:
        f.seek(offset)
        return [line for line in f.read().splitlines() if line.strip()]


# The extension's own notice that it fails open (docs/operations.md, "Failing open is said in
# the log"): expected while a fault lasts, once a minute per worker and cause; not a PHP error.
FAIL_OPEN = re.compile(r"checkout_guard: (limiter '.*' (cannot reach|got no decision from) Valkey|telemetry sink '.*' cannot write)")


def php_errors(lines: list) -> list:
    return [l for l in lines if not FAIL_OPEN.search(l)]


class Valkey:
    def __init__(self, a):
        self.a = a

    def pid(self) -> int:
        return int(open(os.path.join(self.a.valkey_dir, "valkey.pid")).read().strip())

    def stop(self) -> None:
        pid = self.pid()
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGTERM)
        for _ in range(200):
            try:
                stat = open(f"/proc/{pid}/stat").read()
                if ") Z" in stat:
                    break
            except OSError:
                break
            time.sleep(0.02)

    def start(self, module: bool = True, cert: str = "server") -> None:
        """Starts Valkey empty; with the native module when the run has one, unless `module` is False;
        over TLS with the certificate `cert` (make_tls_certs: "server", or "wrong": another CA's)."""
        extra = ["--loadmodule", self.a.module] if self.a.module and module else []
        listen = ["--port", str(self.a.valkey_port)]
        if self.a.tls_dir:
            # TLS only, as scripts/lib.sh's start_tls_server starts it.
            certs = self.a.tls_dir
            listen = ["--port", "0", "--tls-port", str(self.a.valkey_port),
                      "--tls-cert-file", os.path.join(certs, f"{cert}.pem"), "--tls-key-file", os.path.join(certs, f"{cert}.key"),
                      "--tls-ca-cert-file", os.path.join(certs, "ca.pem"), "--tls-auth-clients", "no"]
        subprocess.run([self.a.valkey_bin, "--bind", "127.0.0.1", *listen, "--save", "",
                        "--appendonly", "no", "--daemonize", "yes", "--dir", self.a.valkey_dir,
                        "--pidfile", os.path.join(self.a.valkey_dir, "valkey.pid"),
                        "--logfile", os.path.join(self.a.valkey_dir, "valkey.log"), *extra], check=True)
        for _ in range(250):
            try:
                with valkey_client(self.a.valkey_port, timeout=0.2, verify=cert == "server") as c:
                    c.ping()
                return
            except valkey.exceptions.ValkeyError:
                time.sleep(0.02)


def busy_worker(ops_port: int):
    """A php-fpm worker that is serving a request right now."""
    status = httpclient.get_json(httpclient.local(ops_port, "/fpm-status?json&full"), timeout=2)
    running = [p["pid"] for p in status["processes"] if p["state"] == "Running" and "/fpm-status" not in p.get("request uri", "")]
    return running[0] if running else None


def faults(a, v: Valkey):
    """(name, apply, end) for each fault; apply/end return nothing."""
    port = a.valkey_port

    def worker_kill():
        for _ in range(100):
            pid = busy_worker(a.ops_port)
            if pid:
                os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.01)

    admin = {}

    def maxclients_on():
        # One connection kept for the fault's end: at maxclients 1 nobody else gets in.
        admin["c"] = valkey_client(port)
        admin["c"].execute_command("CONFIG", "SET", "maxclients", "1")
        admin["c"].execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")

    def maxclients_off():
        admin["c"].execute_command("CONFIG", "SET", "maxclients", "10000")
        admin.pop("c").close()

    def flush_and_restart():
        command(port, "SCRIPT", "FLUSH")
        v.stop()
        v.start()

    def restart(module: bool):
        v.stop()
        v.start(module=module)

    def restart_with(cert: str):
        v.stop()
        v.start(cert=cert)

    over_tls = [
        # A certificate rotated wrong: the server restarted with one the clients' CA did not
        # sign, so every worker's new handshake is refused (UnknownIssuer), then with its own.
        ("TLS: Valkey restarted with another CA's certificate (handshakes refused), then its own",
         lambda: restart_with("wrong"), lambda: restart_with("server")),
    ] if a.tls_dir else []
    with_module = [
        # A node restarted without the module (a half-upgraded or rolled-back server):
        # engine auto decides with the script there, and with the module once it is back.
        ("Valkey restarted without the module, then with it", lambda: restart(False), lambda: restart(True)),
    ] if a.module else []
    return [
        ("Valkey stopped, then started (empty)", v.stop, v.start),
        ("Valkey paused (SIGSTOP), then resumed", lambda: os.kill(v.pid(), signal.SIGSTOP), lambda: os.kill(v.pid(), signal.SIGCONT)),
        ("Valkey slow: +200 ms each way (TCP proxy)", lambda: open(a.proxy_control, "w").write("200"), lambda: open(a.proxy_control, "w").write("0")),
        ("SCRIPT FLUSH and a restart between two requests", flush_and_restart, lambda: None),
        ("Valkey at maxclients (connections dropped, new ones refused)", maxclients_on, maxclients_off),
        ("Valkey at maxmemory, noeviction (writes refused: OOM)",
         lambda: (command(port, "CONFIG", "SET", "maxmemory-policy", "noeviction"), command(port, "CONFIG", "SET", "maxmemory", "1")),
         lambda: command(port, "CONFIG", "SET", "maxmemory", "0")),
        ("a php-fpm worker killed mid-request (SIGKILL)", worker_kill, lambda: None),
    ] + with_module + over_tls


def p99(values):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(0.99 * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("run-dir", "valkey-dir", "valkey-bin", "proxy-url", "proxy-control", "policy", "ext", "out"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--valkey-port", type=int, required=True)
    ap.add_argument("--ops-port", type=int, required=True)
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--fault", type=float, default=5)
    ap.add_argument("--recovery", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--module", default="", help="the native module: Valkey runs with it (engine auto uses it)")
    ap.add_argument("--tls-dir", default="", help="the server is redis-server with TLS only, certificates here (ca.pem, server.pem, server.key)")
    ap.add_argument("--proxy-stats", default="", help="the proxy's connection counts (latency_proxy.py STATS_FILE)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tls_ini = []
    if a.tls_dir:
        CLIENT_TLS.update(ssl=True, ssl_ca_certs=os.path.join(a.tls_dir, "ca.pem"))
        tls_ini = ["-d", f"checkout_guard.tls.cafile={os.path.join(a.tls_dir, 'ca.pem')}"]
    v = Valkey(a)
    plan = [f for f in faults(a, v) if not (a.tls_dir and f[0] in TLS_LEFT_OUT)]
    total = a.warmup + len(plan) * (a.fault + a.recovery) + 1
    steady_out = os.path.join(a.out, "checkouts.jsonl")
    probe_out = os.path.join(a.out, "probe.jsonl")
    php_errors_log = os.path.join(a.run_dir, "php-errors.log")
    fpm_log = os.path.join(a.run_dir, "php-fpm.log")
    t0 = time.monotonic()
    steady = subprocess.Popen([sys.executable, os.path.join(HERE, "steady.py"), str(a.http_port), "4", "8", str(total), steady_out])
    probe = subprocess.Popen(["php", "-n", "-d", f"extension={a.ext}", "-d", "checkout_guard.retry_interval_ms=1000",
                              "-d", "checkout_guard.timeout_ms=50", *tls_ini, os.path.join(HERE, "acquire_probe.php"),
                              a.proxy_url, a.policy, str(total), probe_out])
    time.sleep(a.warmup)
    windows = []
    for name, apply, end in plan:
        errors_at, fpm_at = log_size(php_errors_log), log_size(fpm_log)
        start = time.monotonic() - t0
        apply()
        time.sleep(a.fault)
        end()
        ended = time.monotonic() - t0
        time.sleep(a.recovery)
        windows.append({"fault": name, "start": start, "end": ended,
                        "php_errors": php_errors(new_lines(php_errors_log, errors_at)),
                        "fail_open_notices": len(new_lines(php_errors_log, errors_at)) - len(php_errors(new_lines(php_errors_log, errors_at))),
                        "crashes": [l for l in new_lines(fpm_log, fpm_at) if "signal" in l and "SIGKILL" not in l and "SIGQUIT" not in l],
                        "killed": [l for l in new_lines(fpm_log, fpm_at) if "SIGKILL" in l],
                        "recycled": [l for l in new_lines(fpm_log, fpm_at) if "exited with code 0" in l],
                        "connections": our_connections(a.valkey_port)})
    steady.wait(timeout=60)
    probe.wait(timeout=60)
    checkouts = [json.loads(l) for l in open(steady_out)]
    decisions = [json.loads(l) for l in open(probe_out)]
    rows = []
    for w in windows:
        during = [c for c in checkouts if w["start"] <= c["t"] < w["end"]]
        how = {}
        for c in during:
            how[c["class"]] = how.get(c["class"], 0) + 1
        probe_during = [d["us"] / 1000 for d in decisions if w["start"] <= d["t"] < w["end"]]
        unavailable = [d for d in decisions if w["start"] <= d["t"] < w["end"] and d["reason"] in ("unavailable", "threw")]
        recovered = next((d["t"] for d in decisions if d["t"] >= w["end"] and d["reason"] not in ("unavailable", "threw")), None)
        # Which engine decided (the probe's health()['engine'] after each decision).
        engines = {}
        for d in decisions:
            if w["start"] <= d["t"] < w["end"] and d["reason"] not in ("unavailable", "threw"):
                engines[d.get("engine")] = engines.get(d.get("engine"), 0) + 1
        after = [d.get("engine") for d in decisions if d["t"] >= w["end"] + a.recovery / 2 and d["reason"] not in ("unavailable", "threw")]
        rows.append({
            "fault": w["fault"], "policy": a.policy, "checkouts": how,
            "acquire_p99_ms": round(p99(probe_during), 1) if probe_during else None,
            "acquire_max_ms": round(max(probe_during), 1) if probe_during else None,
            "decisions_by_policy": len(unavailable),
            "php_errors": len(w["php_errors"]), "php_error_lines": w["php_errors"][:3],
            "crashes": len(w["crashes"]), "workers_killed": len(w["killed"]), "workers_recycled": len(w["recycled"]),
            "recovery_s": None if recovered is None else round(max(0.0, recovered - w["end"]), 3),
            "connections_after": w["connections"],
            "engines_during": engines, "engine_after": after[-1] if after else None,
        })
    tls = None
    if a.tls_dir:
        # Over TLS itself (this client would fail on a plain port): the server's own ports
        # (port 0: no plain listener) and version.
        with valkey_client(a.valkey_port) as c:
            server, version = c.config_get("*port"), c.info("server").get("redis_version")
        proxied = json.load(open(a.proxy_stats)) if a.proxy_stats and os.path.exists(a.proxy_stats) else {"tls": 0, "plain": 0}
        tls = {"server": f"redis-server {version}",
               "server_port": server.get("port"), "server_tls_port": server.get("tls-port"),
               "proxy_connections": proxied,
               "probe_health_tls": next((d.get("tls") for d in reversed(decisions) if d.get("tls")), None),
               "left_out": [f"{name}: {why}" for name, why in TLS_LEFT_OUT.items()]}
    json.dump({"policy": a.policy, "module": bool(a.module), "workers": a.workers, "fault_s": a.fault, "recovery_window_s": a.recovery,
               "url": a.proxy_url, "valkey_port": a.valkey_port, "tls": tls, "rows": rows},
              open(os.path.join(a.out, "faults.json"), "w"), indent=1)
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
