"""The soak (docs/reliability.md): the checkout stack under steady load for a bounded time,
sampled every --every seconds: RSS and open file descriptors of each php-fpm worker,
Valkey's connected_clients and used_memory. They must stay flat.

  python soak.py --run-dir DIR --valkey-port P --http-port H --seconds S --out DIR
"""

import argparse
import json
import os
import subprocess
import sys
import time

import valkey

HERE = os.path.dirname(os.path.abspath(__file__))


def valkey_info(port: int) -> dict:
    with valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2,
                       single_connection_client=True) as c:
        return c.info()


def workers(master: int) -> list:
    try:
        kids = open(f"/proc/{master}/task/{master}/children").read().split()
    except OSError:
        return []
    return [int(k) for k in kids]


def proc_sample(pid: int, reads: int = 5, gap: float = 0.02):
    """A worker's RSS, and its open fds: the fewest of a few reads 20 ms apart, so a
    socket a request holds for its duration (the provider's, while the worker waits on it)
    is not taken for a leak; a leaked fd stays open and is in every read."""
    try:
        rss = next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:"))
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        for _ in range(reads - 1):
            time.sleep(gap)
            fds = min(fds, len(os.listdir(f"/proc/{pid}/fd")))
        return rss, fds
    except (OSError, StopIteration):
        return None


def fds_check(settled: list, end: dict) -> tuple:
    """Whether the workers' open fds stayed flat: each worker's fds once the load has
    stopped (`end`, pid -> fds, every worker idle) against the fewest it was seen with while
    the load ran (`settled`: per sample, pid -> fds). A leaked fd stays open, so it is there
    at the end, above what the worker held when it was last seen between requests; a
    socket a request holds (the provider's, while the worker waits on it) is gone at the
    end, however many samples caught the worker busy. A worker not seen while the load ran,
    or gone at the end, is not judged."""
    if not end:
        return False, "fds per worker: no worker left once the load stopped"
    leaks = []
    for pid, fds in sorted(end.items()):
        seen = [row[pid] for row in settled if pid in row]
        if seen and fds > min(seen):
            leaks.append(f"worker {pid}: {min(seen)} -> {fds}")
    if leaks:
        return False, "fds per worker rose (fewest seen under load -> once it stopped): " + ", ".join(leaks)
    return True, (f"fds per worker once the load stopped ({sorted(set(end.values()))}) not above the "
                  f"fewest seen under load, {len(end)} workers")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--valkey-port", type=int, required=True)
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--every", type=float, default=5)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    master = int(open(os.path.join(a.run_dir, "php-fpm.pid")).read().strip())
    load = subprocess.Popen([sys.executable, os.path.join(HERE, "steady.py"), str(a.http_port), "8", "10",
                             str(a.seconds), os.path.join(a.out, "soak-checkouts.jsonl")])
    t0 = time.monotonic()
    samples = []
    print("    t s | workers | RSS kB per worker (min-max) | fds per worker (min-max) | Valkey clients | Valkey used_memory")
    while time.monotonic() - t0 < a.seconds:
        time.sleep(a.every)
        by_pid = {pid: s for pid, s in ((p, proc_sample(p)) for p in workers(master)) if s}
        procs = list(by_pid.values())
        info = valkey_info(a.valkey_port)
        row = {"t": round(time.monotonic() - t0, 1), "workers": len(procs),
               "rss_min": min(p[0] for p in procs), "rss_max": max(p[0] for p in procs),
               "fds_min": min(p[1] for p in procs), "fds_max": max(p[1] for p in procs),
               "clients": int(info["connected_clients"]), "used_memory": int(info["used_memory"]),
               "fds_by_pid": {pid: s[1] for pid, s in by_pid.items()}}
        samples.append(row)
        print(f"{row['t']:7.1f} | {row['workers']:7d} | {row['rss_min']:>8d}-{row['rss_max']:<8d}          | "
              f"{row['fds_min']:>4d}-{row['fds_max']:<4d}                 | {row['clients']:14d} | {row['used_memory']}", flush=True)
    load.wait(timeout=60)
    # Every worker idle now: its fds once the load stopped (a leak stays open).
    end = {pid: s[1] for pid, s in ((p, proc_sample(p)) for p in workers(master)) if s}
    answers = {}
    for line in open(os.path.join(a.out, "soak-checkouts.jsonl")):
        c = json.loads(line)["class"]
        answers[c] = answers.get(c, 0) + 1
    # Flat: after the first third (warm-up: OPcache, connections, buffers), RSS grows by
    # less than 1 MiB per worker, connected_clients do not move, and the workers' open fds
    # do not rise (fds_check: judged once the load stopped, every worker idle, so a socket
    # a request holds while it runs is not taken for a leak, however often a sample caught
    # the worker busy).
    settled = samples[len(samples) // 3:]
    checks = [
        (settled[-1]["rss_max"] - settled[0]["rss_max"] < 1024, f"worker RSS max {settled[0]['rss_max']} -> {settled[-1]['rss_max']} kB"),
        fds_check([r["fds_by_pid"] for r in settled], end),
        (len({s["clients"] for s in settled}) == 1, f"Valkey connected_clients {sorted({s['clients'] for s in settled})}"),
        (set(answers) <= {"paid", "limited"}, f"checkouts answered {answers}"),
    ]
    json.dump({"samples": samples, "end_fds": end, "answers": answers, "checks": [{"holds": h, "check": t} for h, t in checks]},
              open(os.path.join(a.out, "soak.json"), "w"), indent=1)
    for h, t in checks:
        print(f"- [{'x' if h else ' '}] {t}")
    sys.exit(0 if all(h for h, _ in checks) else 1)


if __name__ == "__main__":
    main()
