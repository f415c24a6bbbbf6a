"""The health-check experiment (docs/health.md).

A prober that behaves like the kubelet probes the local checkout stack while it is
flooded past its flow-control threshold, two ways at once:
  - liveness by HTTP through the application (/live.php): the existing method;
  - liveness by TCP (tcpSocket on php-fpm's and nginx's ports): the proposed one;
  - readiness by HTTP (/ready.php) alongside.
Probe timings come from deploy/k8s/checkout.yaml. Periods (and delays) are multiplied by
--scale, so 10 s periods become 1 s at 0.1; timeouts are not scaled, because the server's
latencies are not. Kubelet semantics (as Kubernetes defines them):
  - a probe fails on a timeout, a refused connection, or an HTTP status outside 200-399;
  - liveness: failureThreshold failures in a row -> the container is restarted (counted
    here, not done: the point is how many restarts the kubelet would have made);
  - readiness: failureThreshold failures in a row -> not ready; successThreshold successes
    in a row -> ready again; a pod starts not ready;
  - liveness and readiness wait for the startupProbe to succeed.

Phases: baseline, flood (flood.py at CONCURRENCY connections), recovery, dead (php-fpm
stopped: TCP liveness must catch it). Writes results.json, verdict.md and timeline.svg to
--out and exits 1 when an expectation does not hold (the verdict says which).
"""

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field

import yaml

import charts
import httpclient


@dataclass
class Probe:
    name: str
    kind: str  # liveness | readiness | startup
    method: str  # tcp | http
    port: int  # the local port
    path: str = ""
    period: float = 10.0
    timeout: float = 1.0
    failure_threshold: int = 3
    success_threshold: int = 1
    results: list = field(default_factory=list)  # (t, ok, detail, seconds)
    restarts: list = field(default_factory=list)  # t of each restart the kubelet would make
    transitions: list = field(default_factory=list)  # (t, ready)


def probes_from_manifest(path: str, ports: dict, scale: float) -> tuple[list, Probe]:
    """The manifest's probes, mapped to local ports, plus the startup probe."""
    deployment = next(d for d in yaml.safe_load_all(open(path)) if d and d.get("kind") == "Deployment")
    local = {8080: ports["http"], 9000: ports["fpm"]}
    probes, startup = [], None
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
            spec = c.get(kind)
            if not spec:
                continue
            method = "tcp" if "tcpSocket" in spec else "http"
            target = spec.get("tcpSocket") or spec.get("httpGet")
            p = Probe(
                name=f"{kind[:-5]}-{method}-{c['name']}",
                kind=kind[:-5],
                method=method,
                port=local[target["port"]],
                path=target.get("path", ""),
                period=spec.get("periodSeconds", 10) * scale,
                timeout=float(spec.get("timeoutSeconds", 1)),
                failure_threshold=spec.get("failureThreshold", 3),
                success_threshold=spec.get("successThreshold", 1),
            )
            if p.kind == "startup":
                startup = p
            else:
                probes.append(p)
    # The existing method, for comparison: HTTP liveness through the application, with
    # the timings of the manifest's liveness probe.
    tcp_live = next(p for p in probes if p.kind == "liveness")
    probes.insert(0, Probe(name="liveness-http-app", kind="liveness", method="http", port=ports["http"],
                           path="/live.php", period=tcp_live.period, timeout=tcp_live.timeout,
                           failure_threshold=tcp_live.failure_threshold))
    return probes, startup


async def probe_once(p: Probe) -> tuple[bool, str]:
    if p.method == "tcp":
        writer = None
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", p.port), p.timeout)
            return True, "connected"
        except (OSError, asyncio.TimeoutError) as e:
            return False, httpclient.error_name(e)
        finally:
            if writer is not None:
                writer.close()
    # As the kubelet: a connection of its own, the status line within the timeout.
    try:
        async with httpclient.session(keep_alive=False, connect_timeout=p.timeout, read_timeout=p.timeout) as s:
            status, _ = await httpclient.fetch(s, httpclient.local(p.port, p.path),
                                               headers={"User-Agent": "kube-probe/1.37"}, read_body=False)
        return 200 <= status < 400, str(status)
    except httpclient.IO_ERRORS as e:
        return False, httpclient.error_name(e)


async def run_probe(p: Probe, t0: float, stop_at: float) -> None:
    failures = successes = 0
    ready = False
    next_at = time.monotonic()
    while next_at < stop_at:
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        started = time.monotonic()
        ok, detail = await probe_once(p)
        t = started - t0
        p.results.append((round(t, 3), ok, detail, round(time.monotonic() - started, 4)))
        if ok:
            failures, successes = 0, successes + 1
        else:
            failures, successes = failures + 1, 0
        if p.kind == "liveness" and failures >= p.failure_threshold:
            p.restarts.append(round(t, 3))
            failures = 0
        if p.kind == "readiness":
            if ready and failures >= p.failure_threshold:
                ready = False
                p.transitions.append((round(t, 3), False))
            elif not ready and successes >= p.success_threshold:
                ready = True
                p.transitions.append((round(t, 3), True))
        next_at += p.period


async def wait_started(startup: Probe) -> None:
    for _ in range(startup.failure_threshold):
        ok, _ = await probe_once(startup)
        if ok:
            return
        await asyncio.sleep(startup.period)
    sys.exit(f"startupProbe never succeeded on port {startup.port}")


async def fpm_status(port: int) -> dict | None:
    try:
        return await httpclient.get_json_async(httpclient.local(port, "/fpm-status?json"), timeout=2)
    except httpclient.IO_ERRORS:
        return None


async def sample_fpm(port: int, t0: float, stop_at: float, samples: list) -> None:
    while time.monotonic() < stop_at:
        s = await fpm_status(port)
        samples.append({"t": round(time.monotonic() - t0, 3),
                        "active": s and s["active processes"], "idle": s and s["idle processes"],
                        "queue": s and s["listen queue"]})
        await asyncio.sleep(0.5)


def phase_of(t: float, phases: list) -> str:
    for name, start, end in phases:
        if start <= t < end:
            return name
    return phases[-1][0]


async def experiment(args) -> dict:
    ports = dict(line.strip().split("=", 1) for line in open(os.path.join(args.run_dir, "ports")) if "=" in line)
    ports = {k: int(v) for k, v in ports.items() if v}
    probes, startup = probes_from_manifest(args.manifest, ports, args.scale)
    await wait_started(startup)
    t0 = time.monotonic()
    b, f, r, d = args.baseline, args.flood, args.recovery, args.dead
    phases = [("baseline", 0, b), ("flood", b, b + f), ("recovery", b + f, b + f + r), ("dead", b + f + r, b + f + r + d)]
    stop_at = t0 + b + f + r + d
    samples: list = []
    tasks = [asyncio.create_task(run_probe(p, t0, stop_at)) for p in probes]
    tasks.append(asyncio.create_task(sample_fpm(ports["ops"], t0, stop_at, samples)))

    await asyncio.sleep(b)
    flood = await asyncio.create_subprocess_exec(
        sys.executable, os.path.join(os.path.dirname(__file__), "flood.py"), str(ports["http"]),
        args.flood_path, str(args.concurrency), str(f), stdout=asyncio.subprocess.PIPE)
    out, _ = await flood.communicate()
    flood_result = json.loads(out)
    await asyncio.sleep(max(0.0, t0 + b + f + r - time.monotonic()))
    # The server really dies: php-fpm stopped (master and workers).
    pid = int(open(os.path.join(args.run_dir, "php-fpm.pid")).read().strip())
    os.kill(pid, signal.SIGTERM)
    killed_at = round(time.monotonic() - t0, 3)
    await asyncio.gather(*tasks)

    methods = []
    for p in probes:
        row = {"probe": p.name, "kind": p.kind, "method": p.method, "target": f"{p.path or 'port'} ({p.port})",
               "period_s": round(p.period, 3), "timeout_s": p.timeout, "failure_threshold": p.failure_threshold,
               "sent": len(p.results), "failed": sum(1 for x in p.results if not x[1]), "phases": {}}
        for name, _, _ in phases:
            in_phase = [x for x in p.results if phase_of(x[0], phases) == name]
            row["phases"][name] = {
                "sent": len(in_phase), "failed": sum(1 for x in in_phase if not x[1]),
                "restarts": sum(1 for t in p.restarts if phase_of(t, phases) == name),
                "transitions": [list(x) for x in p.transitions if phase_of(x[0], phases) == name],
            }
        row["restarts"] = len(p.restarts)
        row["results"] = p.results
        row["restart_times"] = p.restarts
        row["transitions"] = [list(x) for x in p.transitions]
        methods.append(row)
    return {"scale": args.scale, "phases": phases, "killed_at": killed_at, "probes": methods,
            "flood": flood_result, "concurrency": args.concurrency, "fpm_status": samples,
            "flow_limit": args.flow_limit}


def checks(res: dict) -> list:
    """The expectations, each (holds, text)."""
    by = {p["probe"]: p for p in res["probes"]}
    ph = lambda p, name: by[p]["phases"][name]  # noqa: E731
    tcp = [p for p in by if p.startswith("liveness-tcp")]
    ready = next(p for p in by if p.startswith("readiness"))
    readiness = next(p for p in res["probes"] if p["probe"] == ready)
    b_end = res["phases"][0][2]
    f_start, f_end = res["phases"][1][1], res["phases"][1][2]
    r_end = res["phases"][2][2]
    was_unready = any(not r for t, r in readiness["transitions"] if f_start <= t < f_end + 2 * readiness["period_s"])
    back = readiness["transitions"] and any(r for t, r in readiness["transitions"] if f_end <= t < r_end)
    return [
        (res["flood"]["shed"] > 0, f"the flood passed the flow-control threshold ({res['flood']['shed']} requests shed with 503)"),
        (all(ph(p, n)["restarts"] == 0 for p in tcp for n in ("baseline", "flood", "recovery")),
         "TCP liveness: no restart while the server is alive (baseline, flood, recovery)"),
        (ph("liveness-http-app", "flood")["restarts"] >= 1, "HTTP liveness through the application: restarts during the flood"),
        (ph("liveness-http-app", "baseline")["restarts"] == 0, "HTTP liveness: no restart before the flood"),
        (readiness_at_time(readiness, b_end), "readiness: ready before the flood"),
        (was_unready, "readiness: not ready during the flood"),
        (bool(back), "readiness: ready again after the flood"),
        (ph("liveness-tcp-php-fpm", "dead")["restarts"] >= 1, "php-fpm stopped: TCP liveness on its port restarts it"),
    ]


def readiness_at_time(p: dict, t: float) -> bool:
    state = False
    for at, r in p["transitions"]:
        if at <= t:
            state = r
    return state


def table(res: dict) -> str:
    names = [p[0] for p in res["phases"]]
    out = ["| probe | period / timeout / threshold | sent | failed | " + " | ".join(f"{n}: failed/sent" for n in names) + " | restarts the kubelet would make | readiness transitions |",
           "|---|---|---|---|" + "---|" * len(names) + "---|---|"]
    for p in res["probes"]:
        cells = " | ".join(f"{p['phases'][n]['failed']}/{p['phases'][n]['sent']}" for n in names)
        if p["kind"] == "liveness":
            restarts = ", ".join(f"{n} {p['phases'][n]['restarts']}" for n in names)
            trans = "-"
        else:
            restarts = "-"
            trans = ", ".join(f"{'ready' if r else 'not ready'} at {t:.1f}s" for t, r in p["transitions"]) or "never ready"
        out.append(f"| {p['probe']} ({p['target']}) | {p['period_s']:g}s / {p['timeout_s']:g}s / {p['failure_threshold']} | {p['sent']} | {p['failed']} | {cells} | {restarts} | {trans} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--baseline", type=float, default=10)
    ap.add_argument("--flood", type=float, default=30)
    ap.add_argument("--recovery", type=float, default=15)
    ap.add_argument("--dead", type=float, default=8)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--flow-limit", type=int, default=0)
    ap.add_argument("--flood-path", default="/checkout.php?shop=flash&item=popular&channel=card")
    args = ap.parse_args()
    res = asyncio.run(experiment(args))
    verdict = checks(res)
    res["checks"] = [{"holds": h, "check": t} for h, t in verdict]
    os.makedirs(args.out, exist_ok=True)
    json.dump(res, open(os.path.join(args.out, "results.json"), "w"), indent=1)
    charts.health_timeline(os.path.join(args.out, "timeline.svg"), res)
    total = res["flood"]["total"]
    md = [f"# Health checks under overload ({time.strftime('%Y-%m-%d')})", "",
          "Phases (s): " + ", ".join(f"{n} {a:g}-{b:g}" for n, a, b in res["phases"]) + f"; php-fpm stopped at {res['killed_at']:g}s.",
          f"Flood: {res['concurrency']} connections, answers {json.dumps(total, sort_keys=True)}, of which {res['flood']['shed']} shed by the flow control (limit {res['flow_limit']} in flight).",
          "", table(res), "", "Expectations:"]
    md += [f"- [{'x' if h else ' '}] {t}" for h, t in verdict]
    open(os.path.join(args.out, "verdict.md"), "w").write("\n".join(md) + "\n")
    print("\n".join(md))
    sys.exit(0 if all(h for h, _ in verdict) else 1)


if __name__ == "__main__":
    main()
