"""The verdict's section on waiting for tokens (scripts/loadtest.sh wait): the same flood run
without waiting (flood-nowait, the twin) and with acquire()'s maxWaitSeconds, compared on
what waiting is for (ordinary 503s avoided), what must not change (the provider's payment
429s: none), and what it costs (latency, the waits themselves, php-fpm workers held).

Used by loadtest/verdict.py; `section(runs)` takes the analysed runs by scenario name and
returns the lines to print and the failures.
"""

import math

import charts

TWIN = "flood-nowait"
# In the order they are printed; flood-wait must avoid ordinary 503s without filling the
# pool, flood-starve must fill it (else the run does not show what it is there for).
RUNS = ["flood-nowait", "flood-wait", "flood-wait-long", "flood-starve", "flood-starve-shed"]
SHORT = "flood-wait"
STARVE = "flood-starve"
# A pool is "starved" when every worker is busy in at least this share of the samples.
STARVED_SHARE = 0.5


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(math.ceil(p / 100 * len(v))) - 1)]


def waits(values) -> dict:
    """The waits (seconds) of the checkouts that waited: n, mean, p50, p95, max."""
    v = [w for w in values if w > 0]
    if not v:
        return {"n": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    return {"n": len(v), "mean": sum(v) / len(v), "p50": pct(v, 50), "p95": pct(v, 95), "max": max(v)}


def pool(samples: list) -> dict:
    """php-fpm's pool over a run from loadtest/fpm_status.py's samples: busy workers
    (p50, p95, max, mean), the pool's size, the share of samples with every worker busy,
    the listen queue (max, p95) and php-fpm's own 'max children reached'."""
    if not samples:
        return {"samples": 0, "size": 0, "busy_p50": 0, "busy_p95": 0, "busy_max": 0, "busy_mean": 0.0,
                "full_share": 0.0, "queue_max": 0, "queue_p95": 0, "children_reached": 0}
    busy = [s["active"] for s in samples]
    size = max(s["total"] for s in samples)
    queue = [s["queue"] for s in samples]
    return {
        "samples": len(samples),
        "size": size,
        "busy_p50": pct(busy, 50),
        "busy_p95": pct(busy, 95),
        "busy_max": max(busy),
        "busy_mean": sum(busy) / len(busy),
        "full_share": sum(1 for b in busy if b >= size) / len(busy),
        "queue_max": max(max(queue), max(s.get("max_queue", 0) for s in samples)),
        "queue_p95": pct(queue, 95),
        "children_reached": max(s.get("max_children_reached", 0) for s in samples),
    }


def stats(run: dict) -> dict:
    """What the section prints for one analysed run (verdict.analyse's result)."""
    hot = run["hot"]
    dur = max(float(run["meta"].get("duration") or 0), 1e-9)
    ordinary = [r for r in run["reqs"] if r[3] not in hot]
    hot_reqs = [r for r in run["reqs"] if r[3] in hot]
    w = waits([r[4] for r in run["reqs"]])
    return {
        "max_wait": float(run["meta"].get("max_wait", 0)),
        "hot_max_wait": float(run["meta"].get("hot_max_wait", 0)),
        "flow_limit": int(run["meta"].get("flow_limit", 0)),
        "checkouts": len(run["reqs"]),
        "served_per_s": len(run["reqs"]) / dur,
        "payment_429": run["payment_429"],
        "ord_n": len(ordinary),
        "ord_ok": sum(1 for r in ordinary if r[1] == 200) / max(1, len(ordinary)),
        "ord_503": sum(1 for r in ordinary if r[1] == 503),
        "ord_shed": sum(1 for r in ordinary if r[1] == 503 and r[5] == ""),
        "ord_5xx": sum(1 for r in ordinary if r[1] in (500, 502, 504)),
        "ord_p50": pct([r[2] for r in ordinary], 50),
        "ord_p95": pct([r[2] for r in ordinary], 95),
        "hot_p95": pct([r[2] for r in hot_reqs], 95),
        "hot_rate": sum(rate for _, _, rate in run["hot_rates"].values()),
        "cut": run.get("cut", 0),
        "waited_ord": sum(1 for r in ordinary if r[4] > 0),
        "waited_hot": sum(1 for r in hot_reqs if r[4] > 0),
        "waits": w,
        # Little's law: workers asleep in acquire() on average = waits per second x mean wait.
        "asleep": w["n"] / dur * w["mean"],
        "pool": pool(run.get("fpm", [])),
        "cpu": run["meta"].get("cpu_busy", 0.0),
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def section(runs: dict) -> tuple:
    """runs: {scenario name: analysed run} (limiter on). Returns (lines, failures)."""
    names = [n for n in RUNS if n in runs]
    if not names:
        return [], []
    s = {n: stats(runs[n]) for n in names}
    first = runs[names[0]]["meta"]
    lines = [
        "Waiting for tokens (acquire()'s maxWaitSeconds) during a flood, limiter on: the same traffic in every run "
        f"(ordinary users {first.get('ordinary_users', '?')}, hot users {first.get('hot_users', '?')} on "
        f"{first.get('hot_shops', '?')}, php-fpm pool {first.get('fpm_workers', '?')})",
    ]
    hdr = (f"{'run':17} {'wait ord/hot':>12} {'served/s':>8} {'pay 429':>7} {'ord ok':>6} {'ord 503':>7} {'(shed)':>6} {'ord 5xx':>7} "
           f"{'ord p50':>7} {'ord p95':>7} {'hot p95':>7} {'hot ok/s':>8} {'cut':>4} {'cpu':>5}")
    lines += [hdr, "-" * len(hdr)]
    for n in names:
        x = s[n]
        wait = f"{x['max_wait']:g}/{x['hot_max_wait']:g}s"
        lines.append(
            f"{n:17} {wait:>12} {x['served_per_s']:>8.1f} {x['payment_429']:>7} {x['ord_ok']:>6.1%} {x['ord_503']:>7} {x['ord_shed']:>6} "
            f"{x['ord_5xx']:>7} {x['ord_p50']:>5.0f}ms {x['ord_p95']:>5.0f}ms {x['hot_p95']:>5.0f}ms {x['hot_rate']:>8.1f} "
            f"{x['cut']:>4} {x['cpu']:>5.0%}")
    lines.append("")
    hdr = (f"{'run':17} {'waited ord/hot':>14} {'wait p50':>8} {'p95':>6} {'max':>6} {'asleep':>6} "
           f"{'busy p50':>8} {'p95':>4} {'max':>4} {'pool':>4} {'full':>5} {'queue max':>9}")
    lines += [hdr, "-" * len(hdr)]
    for n in names:
        x, w, p = s[n], s[n]["waits"], s[n]["pool"]
        waited = f"{x['waited_ord']}/{x['waited_hot']}"
        lines.append(
            f"{n:17} {waited:>14} {_ms(w['p50']):>6}ms {_ms(w['p95']):>4}ms {_ms(w['max']):>4}ms {x['asleep']:>6.1f} "
            f"{p['busy_p50']:>8} {p['busy_p95']:>4} {p['busy_max']:>4} {p['size']:>4} {p['full_share']:>5.0%} {p['queue_max']:>9}")
    lines.append("")
    failures = []
    twin = s.get(TWIN)
    for n in names:
        x = s[n]
        if x["payment_429"] > 0:
            failures.append(f"{n}: {x['payment_429']} payment 429s from the provider (waiting must not let one through)")
        if twin and n != TWIN:
            avoided = twin["ord_503"] - x["ord_503"]
            share = avoided / twin["ord_503"] if twin["ord_503"] else 0.0
            change = f"{avoided} avoided, {share:.0%}" if avoided >= 0 else f"{-avoided} more"
            lines.append(
                f"{n} vs {TWIN}: ordinary 503s {twin['ord_503']} -> {x['ord_503']} ({change}); "
                f"ordinary p50 {twin['ord_p50']:.0f} -> {x['ord_p50']:.0f} ms, p95 {twin['ord_p95']:.0f} -> {x['ord_p95']:.0f} ms; "
                f"busy workers p50 {twin['pool']['busy_p50']} -> {x['pool']['busy_p50']} of {x['pool']['size']}; "
                f"payment 429s {twin['payment_429']} and {x['payment_429']}")
    if twin and twin["ord_503"] == 0:
        failures.append(f"{TWIN}: no ordinary 503s without waiting: nothing for waiting to avoid (the flood is not tight enough)")
    if twin and SHORT in s:
        x = s[SHORT]
        if twin["ord_503"] and x["ord_503"] >= twin["ord_503"]:
            failures.append(f"{SHORT}: waiting avoided no ordinary 503s ({twin['ord_503']} -> {x['ord_503']})")
        if x["pool"]["full_share"] >= STARVED_SHARE:
            failures.append(f"{SHORT}: the short wait starved the pool (every worker busy in "
                            f"{x['pool']['full_share']:.0%} of the samples)")
    if STARVE in s and s[STARVE]["pool"]["samples"] and s[STARVE]["pool"]["full_share"] < STARVED_SHARE:
        failures.append(f"{STARVE}: the long wait did not starve the pool (every worker busy in only "
                        f"{s[STARVE]['pool']['full_share']:.0%} of the samples): the run does not show what it is for")
    lines.append("asleep: workers asleep in acquire() on average (Little's law: waits per second x mean wait); "
                 "busy: php-fpm's active workers sampled every 0.2 s; full: share of samples with every worker busy; "
                 "queue: connections waiting for a worker; cut: requests still in flight when Locust stopped (499)")
    return lines, failures


def summary(runs: dict) -> str:
    """The verdict's closing sentence for the runs there are (when nothing failed)."""
    parts = ["waiting let no payment 429 through"]
    if TWIN in runs and SHORT in runs:
        parts.append("a short wait for ordinary shops avoided their 503s without filling the pool")
    if STARVE in runs:
        parts.append("a long wait for everybody starved the pool")
    return "; ".join(parts) + "."


def chart(runs: dict, path: str) -> None:
    """One panel per waiting run: ordinary checkouts paid and refused per second, the hot
    shop's paid, and php-fpm's busy workers (the mean of the second's samples)."""
    series = [("ordinary paid (200)", charts.GREEN), ("ordinary refused (503)", charts.ORANGE),
              ("hot paid (200)", charts.BLUE), ("php-fpm busy workers", charts.DARK_RED)]
    panels = []
    for name in [n for n in RUNS if n in runs]:
        run = runs[name]
        t0 = min((r[0] for r in run["reqs"]), default=0)
        secs = int(max((r[0] - t0 for r in run["reqs"]), default=0)) + 1
        counts = {label: [0] * secs for label, _ in series}
        for r in run["reqs"]:
            s = int(r[0] - t0)
            if r[3] in run["hot"]:
                counts["hot paid (200)"][s] += r[1] == 200
            elif r[1] == 200:
                counts["ordinary paid (200)"][s] += 1
            elif r[1] == 503:
                counts["ordinary refused (503)"][s] += 1
        busy = [[] for _ in range(secs)]
        for smp in run.get("fpm", []):
            s = int(smp["t"] - t0)
            if 0 <= s < secs:
                busy[s].append(smp["active"])
        counts["php-fpm busy workers"] = [sum(b) / len(b) if b else 0 for b in busy]
        meta = run["meta"]
        title = f"{name} (wait {float(meta.get('max_wait', 0)):g}/{float(meta.get('hot_max_wait', 0)):g} s)"
        panels.append((title, counts))
    charts.per_second_panels(path, panels, series, xlabel="seconds; per second", width=3.2 * max(1, len(panels)))
