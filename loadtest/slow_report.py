"""The slow provider's report (scripts/loadtest.sh slow-provider; issue 37): the same flood
against a provider that serves a bounded number of charges at once and has an incident in
the middle third of the run (service time ~1.5 s instead of ~40 ms), in front of a fixed
php-fpm pool. Four runs: slow-baseline (no flood), slow-off (the flood, no limiter),
slow-buckets (the buckets alone), slow-inflight (buckets + `in_flight`). Per run:

- ordinary shops' checkouts: success (paid), p50 and p95 against the baseline's, over the
  run and over the incident (by the checkout's start);
- the hot shop: calls let through to the provider (admitted) per second, over the run and
  over the incident, against Little's law's share (K leases / the incident's service
  time); the most payment calls it had in flight at once;
- php-fpm's pool: busy workers and the listen queue over time (pm.status), the seconds
  the pool was full;
- the provider: payment 429s (nginx's log), calls that timed out in the checkout (the
  ExternalApiCall events with an error), the longest a charge queued for a free slot;
- the limiter's denials by reason.

Reads each run's slow.json (its settings), run.json, access.log (nginx: every checkout),
provider.log (nginx in front of the provider), events.jsonl (the checkout's telemetry),
fpm-status.jsonl (loadtest/fpm_status.py) and calls.jsonl (loadtest/provider.py
--calls-log: every charge served, and the start of the run's clock). Writes report.md,
report.json, chart.png and chart.svg to RESULTS_DIR.

  python loadtest/slow_report.py RESULTS_DIR   (.run/loadtest/slow-provider)
  python loadtest/slow_report.py --lease-stats RUN_DIR   (scripts/loadtest.sh, before the
      stack of a run stops: the limiter's lease counters to RUN_DIR/lease-stats.json)

Exit status 1 when a judged check fails. The harness's checks are always judged (the
baseline is served; with the buckets alone the pool fills during the incident and the
ordinary shops fail or wait); the in-flight checks only when slow-inflight had `in_flight`
set (IN_FLIGHT= runs it without: then they are listed as not judged).
"""

import json
import math
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import charts  # noqa: E402
from verdict import read_log  # noqa: E402

RUNS = ("baseline", "off", "buckets", "inflight")
PROBE_SHOP = "probe"     # scripts/loadtest.sh's checkout before the load
P95_FACTOR = 1.5         # with in_flight, ordinary p95 within 1.5x the baseline's (issue 37)
SUCCESS_SLACK = 0.02     # ... and their success within 2 points of the baseline's
FULL_S = 1.0             # the pool counts as filled when full for at least 1 s of samples
BIN_S = 0.5              # the chart's and the in-flight series' time step
FAIL_OPEN_MATCH_S = 0.5  # a failed-open decision's call starts within 0.5 s of it
TIMESTAMP_S = 0.001      # the events' timestamps are whole milliseconds


def load_json(path: str):
    with open(path) as f:
        return json.load(f)


def pct(values: list, p: float):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(math.ceil(p / 100 * len(v))) - 1)]


def parse_spec(spec: str) -> dict:
    """'global=16,hot_shop=6' -> {'global': 16.0, 'hot_shop': 6.0} (CHECKOUT_IN_FLIGHT)."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        k, _, v = part.partition("=")
        out[k] = float(v)
    return out


def max_overlap(intervals: list, start: float, end: float, step: float) -> tuple:
    """(most intervals open at once overall, [most open at once in each step-long bin from
    start to end]) of [(from, to)] intervals: a sweep, +1 at from and -1 at to; an interval
    that ends when another starts is not counted with it."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    bins = [0] * max(0, int(math.ceil((end - start) / step)))
    now = peak = j = 0
    for i in range(len(bins)):
        lo = start + i * step
        while j < len(edges) and edges[j][0] < lo:
            now += edges[j][1]
            peak = max(peak, now)
            j += 1
        most = now
        while j < len(edges) and edges[j][0] < lo + step:
            now += edges[j][1]
            most = max(most, now)
            j += 1
        bins[i] = most
        peak = max(peak, most)
    for _, d in edges[j:]:
        now += d
        peak = max(peak, now)
    return peak, bins


def checkout_stats(rows: list) -> dict:
    """rows: (start s, status, ms)."""
    ms = [r[2] for r in rows]
    return {
        "checkouts": len(rows),
        "ok": round(sum(1 for r in rows if r[1] == 200) / len(rows), 4) if rows else None,
        "p50_ms": pct(ms, 50),
        "p95_ms": pct(ms, 95),
        "statuses": {str(k): v for k, v in sorted(Counter(r[1] for r in rows).items())},
    }


def run_stats(d: str) -> dict:
    settings = load_json(os.path.join(d, "slow.json"))
    meta = load_json(os.path.join(d, "run.json"))
    duration = float(meta["duration"])
    calls_log = read_log(os.path.join(d, "calls.jsonl"))
    # The last start: the probe's charge before the load starts the clock once, the load's
    # first charge (after POST /_schedule/arm) starts it again.
    start = next((x for x in reversed(calls_log) if x.get("event") == "start"), None)
    if start is None:
        raise ValueError(f"{d}: the provider's clock never started (no 'start' line in calls.jsonl)")
    t0 = float(start["t"])
    inc_a, inc_b, inc_s = (float(x) for x in settings["incident"].split(":"))
    hot = set(s for s in meta["hot_shops"].split(",") if s)
    in_incident = lambda t: inc_a <= t < inc_b  # noqa: E731

    # Checkouts (nginx), by the time they started on the run's clock; 499 = Locust stopped
    # mid-request at the end of the run (left out, counted).
    ordinary, hot_rows, cut = [], [], 0
    for r in read_log(os.path.join(d, "access.log")):
        if not r["u"].startswith("/checkout.php") or f"shop={PROBE_SHOP}&" in r["u"] + "&":
            continue
        if int(r["s"]) == 499:
            cut += 1
            continue
        shop = r["u"].split("shop=", 1)[1].split("&", 1)[0]
        began = float(r["t"]) - float(r["rt"]) - t0
        if began < -2:   # a checkout of an earlier run's load (none expected)
            continue
        row = (began, int(r["s"]), float(r["rt"]) * 1000)
        (hot_rows if shop in hot else ordinary).append(row)

    # Payment calls as the checkout made them (ExternalApiCall, start + duration). The
    # start is in whole milliseconds (cut, not rounded): a call ran at least from
    # timestamp + 1 ms to timestamp + duration, and that is the interval counted, so two
    # calls count as in flight together only where they certainly were (a lease released
    # and taken again within the same millisecond is not an overlap).
    events = read_log(os.path.join(d, "events.jsonl"))
    pay = []
    for e in events:
        if e.get("eventType") != "ExternalApiCall" or e.get("api") != "payment" or e.get("shop.id") == PROBE_SHOP:
            continue
        a = float(e["timestamp"]) / 1000 - t0
        if a < -2:
            continue
        # A call that got no answer (Guzzle's timeout, a refused connection) has an error
        # type and status 0; a 429 has its status as its error type.
        no_answer = bool(e.get("error.type")) and not e.get("http.response.status_code")
        pay.append([a + TIMESTAMP_S, a + float(e.get("duration.ms", 0)) / 1000, e.get("shop.id") in hot,
                    no_answer, e.get("shop.id"), True])
    pay.sort()
    # A decision Valkey did not answer within the limiter's timeout fails open
    # (on_unavailable allow: reason `unavailable`, allowed): its call went out without a
    # lease. Each is matched to its shop's next payment call (within FAIL_OPEN_MATCH_S),
    # which the in-flight limits are then not judged on.
    fail_open = sorted((float(e["timestamp"]) / 1000 - t0, e.get("shop.id")) for e in events
                       if e.get("eventType") == "RateLimitDecision" and e.get("reason") == "unavailable" and e.get("allowed"))
    for t, shop in fail_open:
        call = next((p for p in pay if p[4] == shop and p[5] and t - 0.002 <= p[0] - TIMESTAMP_S <= t + FAIL_OPEN_MATCH_S), None)
        if call is not None:
            call[5] = False
    hot_calls = [p for p in pay if p[2]]
    end = duration + 5
    decided = lambda calls: [(p[0], p[1]) for p in calls if p[5]]  # noqa: E731
    hot_peak, hot_bins = max_overlap(decided(hot_calls), 0, end, BIN_S)
    all_peak, all_bins = max_overlap(decided(pay), 0, end, BIN_S)
    hot_peak_any, _ = max_overlap([(p[0], p[1]) for p in hot_calls], 0, end, BIN_S)
    all_peak_any, _ = max_overlap([(p[0], p[1]) for p in pay], 0, end, BIN_S)
    hot_inc_peak, _ = max_overlap(decided([p for p in hot_calls if in_incident(p[0])]), 0, end, BIN_S)
    steps = [e for e in events if e.get("eventType") == "CheckoutStep" and e.get("step") == "limited"
             and e.get("shop.id") != PROBE_SHOP]
    limited = Counter(e.get("reason", "?") for e in steps)
    limited_ordinary = Counter(e.get("reason", "?") for e in steps if e.get("shop.id") not in hot)

    # The provider: nginx's answers to payments (429 = its limit_req) and its own queue.
    prov = [p for p in read_log(os.path.join(d, "provider.log")) if p["u"].startswith("/v1/charges")]
    served = [c for c in calls_log if "wait" in c and float(c["t"]) >= t0]
    # php-fpm's pool over the run.
    fpm = [f for f in read_log(os.path.join(d, "fpm-status.jsonl"))]
    fpm_t = [(float(f["t"]) - t0, f) for f in fpm if float(f["t"]) - t0 >= -1]
    interval = (fpm_t[-1][0] - fpm_t[0][0]) / max(1, len(fpm_t) - 1) if len(fpm_t) > 1 else 0.2
    full = [(t, f) for t, f in fpm_t if f["active"] >= f["total"] > 0]
    inc_len = inc_b - inc_a
    return {
        "settings": settings,
        "duration_s": duration,
        "incident": {"from_s": inc_a, "to_s": inc_b, "service_s": inc_s},
        "cpu_busy": meta.get("cpu_busy"),
        "ordinary": checkout_stats(ordinary),
        "ordinary_incident": checkout_stats([r for r in ordinary if in_incident(r[0])]),
        "hot": {
            "checkouts": len(hot_rows),
            "paid": sum(1 for r in hot_rows if r[1] == 200),
            "admitted": len(hot_calls),
            "admitted_per_s": round(len(hot_calls) / duration, 2),
            "admitted_per_s_incident": round(sum(1 for p in hot_calls if in_incident(p[0])) / inc_len, 2),
            "paid_per_s_incident": round(sum(1 for r in hot_rows if r[1] == 200 and in_incident(r[0])) / inc_len, 2),
            "max_in_flight": hot_peak,
            "max_in_flight_incident": hot_inc_peak,
            "max_in_flight_with_fail_open": hot_peak_any,
        },
        "payment_calls": len(pay),
        "max_in_flight": all_peak,
        "max_in_flight_with_fail_open": all_peak_any,
        "fail_open": len(fail_open),
        "fail_open_unmatched": sum(1 for t, shop in fail_open) - sum(1 for p in pay if not p[5]),
        "timeouts": sum(1 for p in pay if p[3]),
        "hot_timeouts": sum(1 for p in hot_calls if p[3]),
        "provider": {
            "payments": len(prov),
            "429": sum(1 for p in prov if int(p["s"]) == 429),
            "499": sum(1 for p in prov if int(p["s"]) == 499),
            "served": len(served),
            "queued": sum(1 for c in served if float(c["wait"]) > 0),
            "max_wait_s": round(max((float(c["wait"]) for c in served), default=0.0), 3),
        },
        "fpm": {
            "pool": max((f["total"] for _, f in fpm_t), default=0),
            "max_active": max((f["active"] for _, f in fpm_t), default=0),
            "max_queue": max((f["queue"] for _, f in fpm_t), default=0),
            "full_s": round(len(full) * interval, 1),
            "full_s_incident": round(sum(1 for t, _ in full if in_incident(t)) * interval, 1),
            "samples": len(fpm_t),
        },
        "leases": load_json(os.path.join(d, "lease-stats.json")) if os.path.exists(os.path.join(d, "lease-stats.json")) else None,
        "limited_reasons": dict(sorted(limited.items())),
        "limited_reasons_ordinary": dict(sorted(limited_ordinary.items())),
        "cut": cut,
        "series": {
            "fpm": [(round(t, 2), f["active"], f["queue"]) for t, f in fpm_t],
            "ordinary": [(round(r[0], 3), r[1], round(r[2])) for r in ordinary],
            "in_flight_hot": hot_bins,
            "in_flight_all": all_bins,
            "bin_s": BIN_S,
        },
    }


def checks_for(runs: dict) -> tuple:
    """([{"check", "holds", "measured", "judged"}], whether in_flight was judged)."""
    base, buckets, inflight = runs["baseline"], runs["buckets"], runs["inflight"]
    b_ok, b_p95 = base["ordinary"]["ok"], base["ordinary"]["p95_ms"]
    out = []

    def check(name, holds, measured, judged=True):
        out.append({"check": name, "holds": bool(holds), "measured": measured, "judged": judged})

    check("baseline: the ordinary shops are served through the incident (success at least 95%)",
          b_ok is not None and b_ok >= 0.95, f"{b_ok:.1%}" if b_ok is not None else "no checkouts")
    fb = buckets["fpm"]
    check(f"buckets alone: the pool fills during the incident (every worker busy for {FULL_S:g} s or more)",
          fb["full_s_incident"] >= FULL_S, f"full {fb['full_s_incident']:g} s of {buckets['incident']['to_s'] - buckets['incident']['from_s']:g} s, "
          f"listen queue up to {fb['max_queue']}")
    o, oi, bi = buckets["ordinary"], buckets["ordinary_incident"], base["ordinary_incident"]
    fails = o["ok"] is not None and o["ok"] < b_ok - 0.05
    waits = oi["p95_ms"] is not None and bi["p95_ms"] and oi["p95_ms"] > P95_FACTOR * bi["p95_ms"]
    check(f"buckets alone: the ordinary shops fail (success 5 points under the baseline's) or wait (their p95 in "
          f"the incident above {P95_FACTOR:g}x the baseline's in the incident)", fails or waits,
          f"success {o['ok']:.1%} vs {b_ok:.1%}; in the incident p95 {fmt_ms(oi['p95_ms'])} ms vs "
          f"{fmt_ms(bi['p95_ms'])} ms" + (f" ({oi['p95_ms'] / bi['p95_ms']:.2f}x)" if oi["p95_ms"] and bi["p95_ms"] else ""))
    spec = parse_spec(inflight["settings"].get("in_flight", ""))
    judged = bool(spec)
    o = inflight["ordinary"]
    check(f"in_flight: the ordinary shops at their baseline success (within {SUCCESS_SLACK * 100:g} points)",
          o["ok"] is not None and o["ok"] >= b_ok - SUCCESS_SLACK, f"{o['ok']:.1%} vs {b_ok:.1%}", judged)
    check(f"in_flight: the ordinary shops' p95 within {P95_FACTOR:g}x the baseline's",
          o["p95_ms"] is not None and o["p95_ms"] <= P95_FACTOR * b_p95,
          f"{fmt_ms(o['p95_ms'])} ms vs {b_p95:.0f} ms" + (f" ({o['p95_ms'] / b_p95:.2f}x)" if o["p95_ms"] else ""), judged)
    oi, bi = inflight["ordinary_incident"], base["ordinary_incident"]
    check(f"in_flight: the ordinary shops' p95 in the incident within {P95_FACTOR:g}x the baseline's in the incident",
          oi["p95_ms"] is not None and bi["p95_ms"] and oi["p95_ms"] <= P95_FACTOR * bi["p95_ms"],
          f"{fmt_ms(oi['p95_ms'])} ms vs {fmt_ms(bi['p95_ms'])} ms" +
          (f" ({oi['p95_ms'] / bi['p95_ms']:.2f}x)" if oi["p95_ms"] and bi["p95_ms"] else ""), judged)
    fo = inflight["fail_open"]

    def held(level, most, most_any):
        if level is None:
            return "no such level"
        text = f"at most {most} at once, {level:g} allowed"
        return text + (f"; {most_any} with the {fo} call(s) let through failing open" if fo else "")

    k = spec.get("hot_shop")
    check("in_flight: the hot shop held to its in-flight share (its payment calls the limiter decided, in flight at "
          "once, at most hot_shop)", k is not None and inflight["hot"]["max_in_flight"] <= k,
          held(k, inflight["hot"]["max_in_flight"], inflight["hot"]["max_in_flight_with_fail_open"]), judged)
    n = spec.get("global")
    check("in_flight: payment calls the limiter decided, in flight at once, at most global",
          n is not None and inflight["max_in_flight"] <= n,
          held(n, inflight["max_in_flight"], inflight["max_in_flight_with_fail_open"]), judged)
    return out, judged


def fmt_ms(v):
    return "-" if v is None else f"{v:.0f}"


def markdown(res: dict) -> str:
    runs, s = res["runs"], res["settings"]
    base = runs["baseline"]
    b95 = base["ordinary"]["p95_ms"]
    lines = [
        "# Slow provider: in-flight leases (scripts/loadtest.sh slow-provider)", "",
        f"The provider serves {s['concurrency']} charges at once (first come first served, queueing past them); "
        f"from {s['incident']['from_s']:g} s to {s['incident']['to_s']:g} s of each {s['duration_s']:g} s run its "
        f"service time is ~{s['incident']['service_s']:g} s instead of ~40 ms (its incident). php-fpm: a fixed pool of "
        f"{s['fpm_workers']} workers. Ordinary shops: {s['ordinary_users']} users; the flood: {s['hot_users']} users at "
        f"flash-1 (hot shop bucket 25/s). slow-inflight: `in_flight` = `{s['in_flight'] or '(not set)'}`.", "",
        "| run | limiter | ordinary checkouts | ordinary paid | p50 | p95 | p95 vs baseline | in the incident: paid / p95 | "
        "hot admitted/s (incident) | hot in flight, most | pool full (incident) | listen queue, most | provider 429 | timeouts | provider queued, longest | cpu |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in RUNS:
        r = runs[name]
        o, oi, h, f, p = r["ordinary"], r["ordinary_incident"], r["hot"], r["fpm"], r["provider"]
        lim = {"baseline": "buckets", "off": "none", "buckets": "buckets",
               "inflight": "buckets + in_flight" if r["settings"].get("in_flight") else "buckets (in_flight not set)"}[name]
        ratio = "-" if not o["p95_ms"] or not b95 else f"{o['p95_ms'] / b95:.2f}x"
        hot = "-" if name == "baseline" else f"{h['admitted_per_s']:g} ({h['admitted_per_s_incident']:g})"
        hot_if = "-" if name == "baseline" else str(h["max_in_flight"])
        lines.append(
            f"| slow-{name} | {lim} | {o['checkouts']} | {o['ok']:.1%} | {fmt_ms(o['p50_ms'])} ms | {fmt_ms(o['p95_ms'])} ms | {ratio} | "
            f"{(oi['ok'] or 0):.1%} / {fmt_ms(oi['p95_ms'])} ms | {hot} | {hot_if} | {f['full_s']:g} s ({f['full_s_incident']:g} s) | "
            f"{f['max_queue']} | {p['429']} | {r['timeouts']} | {p['max_wait_s']:g} s | {r['cpu_busy']:.0%} |")
    spec = parse_spec(s["in_flight"] or "")
    if spec.get("hot_shop"):
        lines += ["", f"Little's law: a hot shop held to {spec['hot_shop']:g} calls in flight, each ~{s['incident']['service_s']:g} s "
                  f"in the incident, is admitted at most {spec['hot_shop'] / s['incident']['service_s']:.1f}/s then "
                  f"(measured: {runs['inflight']['hot']['admitted_per_s_incident']:g}/s)."]
    leases = runs["inflight"].get("leases")
    if leases and leases["stats"]:
        st = leases["stats"]
        held = st.get("hold_us", 0) / max(1, st.get("released", 0)) / 1e6
        lines += ["", f"Leases in slow-inflight (the limiter's counters in Valkey at the end of the load): "
                  f"{st.get('released', 0)} released, of them {st.get('leaked', 0)} at the request's end (RSHUTDOWN: "
                  f"not released by the client), held {held:.3f} s on average; {st.get('expired', 0)} expired; "
                  f"still live: " + (", ".join(f"{k} {n}" for k, n in leases["live"].items()) or "none") + "."]
    lines += ["", "Denials by reason (CheckoutStep `limited`):", ""]
    for name in RUNS:
        reasons = ", ".join(f"{k}: {v}" for k, v in runs[name]["limited_reasons"].items()) or "-"
        ordinary = ", ".join(f"{k}: {v}" for k, v in runs[name]["limited_reasons_ordinary"].items()) or "none"
        lines.append(f"- slow-{name}: {reasons} (of them ordinary shops': {ordinary})")
    lines += ["", "| check | measured | |", "| --- | --- | --- |"]
    for c in res["checks"]:
        verdict = ("holds" if c["holds"] else "**fails**") if c["judged"] else "not judged"
        lines.append(f"| {c['check']} | {c['measured']} | {verdict} |")
    lines += ["", "Columns: ordinary shops' checkouts (success = paid, latency at nginx) over the run and over the incident "
              "(by the checkout's start); the hot shop's payment calls let through to the provider per second (over the "
              "run, and over the incident) and the most it had in flight at once (ExternalApiCall events); seconds "
              "php-fpm's pool had every worker busy (pm.status samples) and its longest listen queue; payment 429s "
              "at the provider's nginx; payment calls that failed in the checkout (Guzzle's 3 s timeout); the longest "
              "a charge waited for a free slot at the provider.", "",
              "Chart: chart.png (chart.svg): per run, php-fpm's busy workers and listen queue, each ordinary checkout's "
              "latency (red: not paid), and the payment calls in flight (hot shop, all), the incident shaded."]
    return "\n".join(lines) + "\n"


def lease_stats(d: str, limiter: str = "payments") -> dict:
    """The limiter's lease counters in the run's Valkey at the end of the load (issue 37's
    `{cg:NAME}:f:stats`: released, hold_us, leaked, expired) and the leases still live
    per level; written to DIR/lease-stats.json before the stack stops."""
    import valkey

    ports = dict(line.strip().split("=", 1) for line in open(os.path.join(d, "ports")) if "=" in line)
    v = valkey.Valkey(host="127.0.0.1", port=int(ports["valkey"]), socket_timeout=2)
    secs, micros = v.time()
    now = secs * 1_000_000 + micros
    tag = "{cg:%s}" % limiter
    stats = {k.decode(): int(x) for k, x in v.hgetall(f"{tag}:f:stats").items()}
    live = {key.decode().split(":f:", 1)[1]: v.zcount(key, f"({now}", "+inf") for key in v.scan_iter(f"{tag}:f:*")
            if key.decode() != f"{tag}:f:stats"}
    out = {"stats": stats, "live": dict(sorted(live.items()))}
    with open(os.path.join(d, "lease-stats.json"), "w") as f:
        json.dump(out, f)
    return out


def main(root: str) -> int:
    runs = {}
    for name in RUNS:
        d = os.path.join(root, f"slow-{name}")
        if not os.path.isfile(os.path.join(d, "run.json")):
            print(f"no finished run in {d}")
            return 2
        runs[name] = run_stats(d)
    checks, judged = checks_for(runs)
    meta = load_json(os.path.join(root, "slow-off", "run.json"))
    first = runs["inflight"]
    res = {
        "settings": {
            "concurrency": first["settings"]["concurrency"],
            "incident": first["incident"],
            "duration_s": first["duration_s"],
            "fpm_workers": first["settings"]["fpm_workers"],
            "in_flight": first["settings"].get("in_flight", ""),
            "ordinary_users": meta.get("ordinary_users"),
            "hot_users": meta.get("hot_users"),
            "p95_factor": P95_FACTOR,
            "success_slack": SUCCESS_SLACK,
        },
        "runs": {k: {kk: vv for kk, vv in v.items() if kk != "series"} for k, v in runs.items()},
        "checks": checks,
        "in_flight_judged": judged,
    }
    with open(os.path.join(root, "report.json"), "w") as f:
        json.dump(res, f, indent=1)
    text = markdown(res)
    with open(os.path.join(root, "report.md"), "w") as f:
        f.write(text)
    rows = []
    for name in RUNS:
        r = runs[name]
        spec = parse_spec(r["settings"].get("in_flight", ""))
        title = {"baseline": "baseline\n(no flood)", "off": "flood,\nno limiter", "buckets": "flood,\nbuckets alone",
                 "inflight": "flood, buckets\n+ in_flight\n" + (r["settings"]["in_flight"].replace(",", "\n") if spec else "(not set)")}[name]
        rows.append((title, r["series"], spec))
    for ext in ("png", "svg"):
        charts.slow_provider_grid(os.path.join(root, f"chart.{ext}"), rows, first["incident"], first["settings"]["fpm_workers"],
                                  first["duration_s"])
    print(text)
    failed = [c for c in checks if c["judged"] and not c["holds"]]
    if not judged:
        print("in_flight was not set in slow-inflight (IN_FLIGHT empty): the in-flight checks not judged.")
    print("All judged checks hold." if not failed else f"{len(failed)} check(s) failed.")
    print(f"report: {os.path.join(root, 'report.md')}, {os.path.join(root, 'report.json')}, chart: {os.path.join(root, 'chart.png')}")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1] == "--lease-stats":
        lease_stats(sys.argv[2])
        sys.exit(0)
    sys.exit(main(sys.argv[1]))
