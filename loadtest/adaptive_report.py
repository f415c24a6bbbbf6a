"""The adaptive budget's report (scripts/loadtest.sh adaptive; issue 27): the same flood
against a provider whose real payment limit moves (60%, 40% and 100% of the limiter's
configured global rate, a third of the run each), once with the limiter as configured
(adaptive-off) and once with its `adaptive` option (adaptive-on). Per run:

- the share of payment calls the provider answered 429;
- per phase, the admitted rate (calls the limiter let through to the provider, per
  second) from SETTLE_S after the change to the phase's end, against the provider's real
  limit, and whether it is within TOLERANCE of it;
- ordinary shops' success (checkouts paid) against the adaptive-off run's;
- how long the budget took to climb back after the last change: the first second from
  which the admitted rate (its mean over SMOOTH_S seconds) stays within TOLERANCE of the
  configured rate, to the end of the run.

Reads each run's charges.jsonl (loadtest/provider.py --log: every charge, and the start of
the provider's schedule), access.log (nginx: every checkout), events.jsonl (the checkout's
telemetry: CheckoutStep 'limited' with its reason, RateLimitAdapt) and adaptive.json (the
run's settings). Writes report.md, report.json, chart.png and chart.svg to RESULTS_DIR.

  python loadtest/adaptive_report.py RESULTS_DIR   (.run/loadtest/adaptive)

Exit status 1 when a check fails. The harness's checks are always judged (the
adaptive-off run shows the provider's 429s while its real limit is below the configured
rate, and admits the configured rate once it is back); adaptation's checks only when the
adaptive-on run had `adaptive` set (ADAPTIVE= runs both without: they are then listed as
not judged).
"""

import json
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import charts  # noqa: E402
from verdict import analyse, read_log  # noqa: E402

TOLERANCE = 0.10   # the admitted rate within 10% of the provider's real limit (issue 27)
SETTLE_S = 5.0     # measured from 5 s after each change of the real limit
SMOOTH_S = 3       # the recovery is judged on the admitted rate's mean over 3 s
RUNS = ("off", "on")
PROBE_SHOP = "probe"  # scripts/loadtest.sh's checkout before the load


def load_json(path: str):
    with open(path) as f:
        return json.load(f)


def schedule_of(lines: list) -> tuple:
    """(start epoch, [(seconds, rate)], calls [(seconds since start, status, retry_after)])
    from a charges.jsonl; the calls before the schedule's start (the probe) left out."""
    start = next((x for x in lines if x.get("event") == "start"), None)
    if start is None:
        raise ValueError("the provider's schedule never started (no 'start' line in charges.jsonl)")
    t0 = float(start["t"])
    steps = [(float(a), float(r)) for a, r in start["schedule"]]
    calls = [(float(x["t"]) - t0, int(x["s"]), x.get("ra")) for x in lines
             if "s" in x and float(x["t"]) >= t0]
    return t0, steps, calls


def rate_at(steps: list, t: float) -> float:
    rate = steps[0][1]
    for at, r in steps:
        if t >= at:
            rate = r
    return rate


def recovery(admitted: list, since: int, target: float, tolerance: float = TOLERANCE, smooth: int = SMOOTH_S):
    """Seconds after `since` from which the mean of `smooth` seconds of admitted calls stays
    within tolerance of target to the end; None when it never does (or too few seconds)."""
    means = [sum(admitted[k:k + smooth]) / smooth for k in range(since, len(admitted) - smooth + 1)]
    if not means:
        return None
    ok = [abs(m / target - 1) <= tolerance for m in means]
    if not ok[-1]:
        return None
    k = len(ok)
    while k > 0 and ok[k - 1]:
        k -= 1
    return k


def run_stats(d: str) -> dict:
    settings = load_json(os.path.join(d, "adaptive.json"))
    meta = load_json(os.path.join(d, "run.json"))
    t0, steps, calls = schedule_of(read_log(os.path.join(d, "charges.jsonl")))
    duration = float(meta["duration"])
    configured = float(settings["configured_global_rate"])
    last = max((c[0] for c in calls), default=0.0)
    secs = max(0, int(min(duration, last)))   # whole seconds; the last, cut short, left out
    admitted, throttled = [0] * secs, [0] * secs
    for t, s, _ in calls:
        k = int(t)
        if k < secs:
            admitted[k] += 1
            throttled[k] += s == 429
    ana = analyse(d)
    checkouts = [(r[0] - t0, r[1], r[3]) for r in ana["reqs"] if r[3] != PROBE_SHOP and 0 <= r[0] - t0 < duration]
    hot = ana["hot"]
    phases = []
    for i, (at, limit) in enumerate(steps):
        end = min(steps[i + 1][0] if i + 1 < len(steps) else duration, secs)
        a = at + SETTLE_S
        window = [c for c in calls if a <= c[0] < end]
        length = end - a
        rate = len(window) / length if length > 0 else float("nan")
        offered = sum(1 for c in checkouts if a <= c[0] < end)
        phases.append({
            "phase": i + 1,
            "from_s": at,
            "to_s": end,
            "window_s": [a, end],
            "limit": limit,
            "limit_share": round(limit / configured, 3),
            "admitted_per_s": round(rate, 2),
            "ok_per_s": round(sum(1 for c in window if c[1] == 200) / length, 2) if length > 0 else None,
            "error": round(rate / limit - 1, 4) if length > 0 else None,
            "within": bool(length > 0 and abs(rate / limit - 1) <= TOLERANCE),
            "share_429": round(sum(1 for c in window if c[1] == 429) / max(1, len(window)), 4),
            "checkouts_per_s": round(offered / length, 1) if length > 0 else None,
        })
    ordinary = [c for c in checkouts if c[2] not in hot]
    flood = [c for c in checkouts if c[2] in hot]
    events = read_log(os.path.join(d, "events.jsonl"))
    limited = Counter(e.get("reason", "?") for e in events
                      if e.get("eventType") == "CheckoutStep" and e.get("step") == "limited" and e.get("shop.id") != PROBE_SHOP)
    adapt = [e for e in events if e.get("eventType") == "RateLimitAdapt"]
    statuses = Counter(s for _, s, _ in calls)
    return {
        "adaptive": settings["adaptive"],
        "recover_seconds": settings["recover_seconds"],
        "configured": configured,
        "duration_s": duration,
        "seconds": secs,
        "calls": len(calls),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "share_429": round(statuses.get(429, 0) / max(1, len(calls)), 4),
        "retry_after_sent": sum(1 for c in calls if c[2] is not None),
        "phases": phases,
        "ordinary": {
            "checkouts": len(ordinary),
            "ok": round(sum(1 for c in ordinary if c[1] == 200) / max(1, len(ordinary)), 4),
            "limited_503": sum(1 for c in ordinary if c[1] == 503),
            "refused_502": sum(1 for c in ordinary if c[1] == 502),
        },
        "flood": {
            "checkouts": len(flood),
            "paid_per_s": round(sum(1 for c in flood if c[1] == 200) / max(duration, 1e-9), 2),
        },
        "recovery_s": recovery(admitted, int(steps[-1][0]), configured),
        "limited_reasons": dict(sorted(limited.items())),
        "adapt_events": len(adapt),
        "adapt_first": adapt[:3],
        "cpu_busy": meta.get("cpu_busy"),
        "per_second": {
            "admitted": admitted,
            "throttled": throttled,
            "limit": [rate_at(steps, k) for k in range(secs)],
            "changes": [at for at, _ in steps[1:]],
        },
    }


def checks_for(runs: dict) -> tuple:
    """([{"check", "holds", "measured", "judged"}], judged_adaptive)."""
    off, on = runs["off"], runs["on"]
    out = []

    def check(name, holds, measured, judged=True):
        out.append({"check": name, "holds": bool(holds), "measured": measured, "judged": judged})

    below = [p for p in off["phases"] if p["limit"] < off["configured"]]
    check("adaptive-off: past the real limit while it is below the configured rate (the provider answers 429)",
          below and all(p["error"] is not None and p["error"] > TOLERANCE for p in below),
          ", ".join(f"phase {p['phase']}: {p['admitted_per_s']}/s vs {p['limit']:g}/s" for p in below))
    lastp = off["phases"][-1]
    check(f"adaptive-off: the configured rate admitted once the real limit is back (within {TOLERANCE:.0%}: "
          "the demand passes it)", lastp["within"], f"phase {lastp['phase']}: {lastp['admitted_per_s']}/s vs {lastp['limit']:g}/s")
    judged = on["adaptive"] not in ("", "off")
    check("adaptive-on: a lower share of payment calls answered 429 than adaptive-off",
          on["share_429"] < off["share_429"], f"{on['share_429']:.1%} vs {off['share_429']:.1%}", judged)
    for p in on["phases"]:
        check(f"adaptive-on, phase {p['phase']} ({p['limit_share']:.0%} of the configured rate): the admitted rate within "
              f"{TOLERANCE:.0%} of the real limit from {SETTLE_S:g} s after the change",
              p["within"], f"{p['admitted_per_s']}/s vs {p['limit']:g}/s ({p['error']:+.1%})" if p["error"] is not None else "no window",
              judged)
    check("adaptive-on: the budget climbed back to the configured rate after the last change",
          on["recovery_s"] is not None, "never" if on["recovery_s"] is None else f"{on['recovery_s']} s", judged)
    check("adaptive-on: the limiter said why (RateLimitAdapt events)", on["adapt_events"] > 0,
          f"{on['adapt_events']} events", judged)
    return out, judged


def markdown(res: dict) -> str:
    runs, s = res["runs"], res["settings"]
    off, on = runs["off"], runs["on"]
    lines = ["# Adaptive budget under load (scripts/loadtest.sh adaptive)", "",
             f"The provider's real payment limit: {s['schedule_text']} (its own token bucket, burst {s['provider_burst']:g}); "
             f"the limiter's configured global rate {s['configured']:g}/s. Each run {s['duration_s']:g} s, the same flood "
             f"(40 users at flash-1) and ordinary shops ({s['ordinary_users']} users). adaptive-on: `adaptive` = "
             f"`{on['adaptive']}`" + (f", recover_seconds {on['recover_seconds']:g}" if on["adaptive"] not in ("", "off") else
                                      " (the option not set: both runs are the limiter as configured)") + ".", "",
             "| run | payment calls | answered 429 | Retry-After sent | ordinary paid | vs off | ordinary 503 / 502 | flood paid/s | climbed back | RateLimitAdapt | limited (reason: n) | cpu |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in RUNS:
        r = runs[name]
        o = r["ordinary"]
        reasons = ", ".join(f"{k}: {v}" for k, v in r["limited_reasons"].items()) or "-"
        back = "never" if r["recovery_s"] is None else f"{r['recovery_s']} s"
        lines.append(f"| adaptive-{name} | {r['calls']} | {r['share_429']:.1%} | {r['retry_after_sent']} | {o['ok']:.1%} | "
                     f"{(o['ok'] - off['ordinary']['ok']) * 100:+.1f} pts | {o['limited_503']} / {o['refused_502']} | "
                     f"{r['flood']['paid_per_s']:g} | {back} | {r['adapt_events']} | {reasons} | {r['cpu_busy']:.0%} |")
    lines += ["", f"Admitted rate (calls let through to the provider, per second) from {SETTLE_S:g} s after each change to "
              f"the phase's end, against the provider's real limit (within {TOLERANCE:.0%}?):", "",
              "| run | phase | real limit | window (s) | admitted/s | error | within | paid/s | answered 429 | checkouts/s |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in RUNS:
        for p in runs[name]["phases"]:
            err = "-" if p["error"] is None else f"{p['error']:+.1%}"
            lines.append(f"| adaptive-{name} | {p['phase']} | {p['limit']:g}/s ({p['limit_share']:.0%}) | "
                         f"{p['window_s'][0]:g}-{p['window_s'][1]:g} | {p['admitted_per_s']} | {err} | "
                         f"{'yes' if p['within'] else 'no'} | {p['ok_per_s']} | {p['share_429']:.1%} | {p['checkouts_per_s']} |")
    lines += ["", f"Climbed back: the first second after the last change from which the admitted rate (a {SMOOTH_S} s mean) "
              f"stays within {TOLERANCE:.0%} of the configured rate to the end of the run.", "",
              "| check | measured | |", "| --- | --- | --- |"]
    for c in res["checks"]:
        verdict = ("holds" if c["holds"] else "**fails**") if c["judged"] else "not judged"
        lines.append(f"| {c['check']} | {c['measured']} | {verdict} |")
    lines += ["", "Chart: chart.png (chart.svg): configured rate, the provider's real limit, the admitted rate and the "
              "calls answered 429, per second, one panel per run."]
    return "\n".join(lines) + "\n"


def main(root: str) -> int:
    runs = {}
    for name in RUNS:
        d = os.path.join(root, f"adaptive-{name}")
        if not os.path.isfile(os.path.join(d, "run.json")):
            print(f"no finished run in {d}")
            return 2
        runs[name] = run_stats(d)
    checks, judged = checks_for(runs)
    meta = load_json(os.path.join(root, "adaptive-off", "run.json"))
    settings = load_json(os.path.join(root, "adaptive-off", "adaptive.json"))
    res = {
        "settings": {
            "configured": settings["configured_global_rate"],
            "schedule": settings["schedule"],
            "schedule_text": ", ".join(f"{float(r):g}/s from {float(a):g} s" for a, r in
                                       (x.split(":") for x in settings["schedule"].split(","))),
            "phase_s": settings["phase_seconds"],
            "duration_s": float(meta["duration"]),
            "provider_burst": settings["provider_burst"],
            "retry_after_share": settings["retry_after_share"],
            "retry_after": settings["retry_after"],
            "ordinary_users": meta.get("ordinary_users"),
            "hot_users": meta.get("hot_users"),
            "tolerance": TOLERANCE,
            "settle_s": SETTLE_S,
            "smooth_s": SMOOTH_S,
        },
        "runs": runs,
        "checks": checks,
        "adaptive_judged": judged,
    }
    with open(os.path.join(root, "report.json"), "w") as f:
        json.dump(res, f, indent=1)
    text = markdown(res)
    with open(os.path.join(root, "report.md"), "w") as f:
        f.write(text)
    panels = []
    for name in RUNS:
        r = runs[name]
        ps = r["per_second"]
        title = f"adaptive-{name}" + ("" if r["adaptive"] in ("", "off") else f" (adaptive {r['adaptive']}, recover {r['recover_seconds']:g} s)")
        panels.append((title, {"configured": [r["configured"]] * r["seconds"], "limit": ps["limit"],
                               "admitted": ps["admitted"], "throttled": ps["throttled"], "changes": ps["changes"]}))
    for ext in ("png", "svg"):
        charts.rate_panels(os.path.join(root, f"chart.{ext}"), panels)
    print(text)
    failed = [c for c in checks if c["judged"] and not c["holds"]]
    if not judged:
        print("adaptive was not set in the adaptive-on run (ADAPTIVE empty or off): adaptation's checks not judged.")
    print("All judged checks hold." if not failed else f"{len(failed)} check(s) failed.")
    print(f"report: {os.path.join(root, 'report.md')}, {os.path.join(root, 'report.json')}, chart: {os.path.join(root, 'chart.png')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
