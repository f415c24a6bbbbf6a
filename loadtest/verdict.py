"""The verdict of a load-test run: reads each run's nginx access logs (checkout and
provider) and prints, per scenario and limiter on/off, what a flash sale puts at stake; writes
one SVG chart per scenario (requests per second over time by outcome, hot vs ordinary).

Usage: python loadtest/verdict.py RESULTS_DIR   (as written by scripts/loadtest.sh)
Exit status 1 when something that must hold with the limiter on does not, or when the
limiter-off runs do not show the flash-sale failure (payment 429s taking ordinary shops down).
The runs of `scripts/loadtest.sh wait` get a section of their own (loadtest/wait_report.py):
waiting for tokens against not waiting.
"""

import json
import math
import os
import sys
from collections import defaultdict
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import charts  # noqa: E402
import wait_report  # noqa: E402

# Must match the limiter's settings in php/examples/checkout/bootstrap.php.
HOT_SHOP_CAP = (6, 25.0)   # capacity, per second
HOT_LANE_CAP = (8, 30.0)
SCENARIOS = ["flood", "lottery", "multi"]


def read_log(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(math.ceil(p / 100 * len(v))) - 1)]


def analyse(run_dir):
    with open(os.path.join(run_dir, "run.json")) as f:
        meta = json.load(f)
    hot = set(s for s in meta["hot_shops"].split(",") if s)
    reqs = []
    cut = 0
    for r in read_log(os.path.join(run_dir, "access.log")):
        if not r["u"].startswith("/checkout.php"):
            continue
        # 499: the client went away, i.e. Locust stopped at the end of the run mid-request.
        if int(r["s"]) == 499:
            cut += 1
            continue
        shop = parse_qs(urlsplit(r["u"]).query).get("shop", [""])[0]
        # (end time, status, ms, shop, seconds the payment waited for its token, php-fpm's
        # status: "" when nginx answered itself; "-" in logs from before it was logged)
        reqs.append((float(r["t"]), int(r["s"]), float(r["rt"]) * 1000, shop,
                     float(r.get("w") or 0), r.get("us", "-")))
    prov = read_log(os.path.join(run_dir, "provider.log"))
    t0 = min((r[0] for r in reqs), default=0)
    ordinary = [r for r in reqs if r[3] not in hot]
    hot_reqs = [r for r in reqs if r[3] in hot]
    payments = [p for p in prov if p["u"].startswith("/v1/charges")]
    zone_a = [p for p in prov if p["u"].startswith("/items/")]
    res = {
        "dir": run_dir,
        "meta": meta,
        "t0": t0,
        "reqs": reqs,
        "hot": hot,
        "checkouts": len(reqs),
        "payment_calls": len(payments),
        "payment_429": sum(1 for p in payments if int(p["s"]) == 429),
        "zone_a_429": sum(1 for p in zone_a if int(p["s"]) == 429),
        "ord_n": len(ordinary),
        "ord_ok": sum(1 for r in ordinary if r[1] == 200) / max(1, len(ordinary)),
        "ord_p50": pct([r[2] for r in ordinary], 50),
        "ord_p95": pct([r[2] for r in ordinary], 95),
        "ord_503": sum(1 for r in ordinary if r[1] == 503),
        "hot_503": sum(1 for r in hot_reqs if r[1] == 503),
        "hot_rates": {},
        "cut": cut,
        "fpm": read_log(os.path.join(run_dir, "fpm-status.jsonl")),
    }
    for shop in sorted(hot):
        mine = [r for r in hot_reqs if r[3] == shop]
        if not mine:
            continue
        start = min(r[0] for r in mine)
        window = max(r[0] for r in mine) - start
        admitted = sum(1 for r in mine if r[1] == 200)
        res["hot_rates"][shop] = (admitted, window, admitted / max(window, 1e-9))
    return res


def bound(cap, window):
    """Most a bucket may admit over `window` seconds from a full state."""
    return cap[0] + cap[1] * window


def chart(scenario, runs, path):
    """Two panels (limiter off, on): per-second counts of ordinary 200, hot 200, 503, 502."""
    series_def = [
        ("ordinary paid (200)", "#1b7837", lambda r, hot: r[3] not in hot and r[1] == 200),
        ("hot paid (200)", "#2166ac", lambda r, hot: r[3] in hot and r[1] == 200),
        ("limiter said busy (503)", "#f1a340", lambda r, hot: r[1] == 503),
        ("provider refused (502)", "#b2182b", lambda r, hot: r[1] == 502),
    ]
    panels = []
    for mode in ("off", "on"):
        run = runs.get(mode)
        if not run:
            continue
        secs = int(max((r[0] - run["t0"] for r in run["reqs"]), default=0)) + 1
        counts = {}
        for label, _, pred in series_def:
            counts[label] = [0] * secs
            for r in run["reqs"]:
                if pred(r, run["hot"]):
                    counts[label][int(r[0] - run["t0"])] += 1
        panels.append((f"{scenario}: limiter {mode}", counts))
    charts.per_second_panels(path, panels, [(label, colour) for label, colour, _ in series_def])


def main(root):
    runs = defaultdict(dict)
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if os.path.isfile(os.path.join(d, "run.json")):
            scenario, mode = name.rsplit("-", 1)
            runs[scenario][mode] = analyse(d)
    base = runs.get("baseline", {}).get("off") or runs.get("baseline", {}).get("on")
    waiting = {name: m["on"] for name, m in runs.items() if name in wait_report.RUNS and "on" in m}
    if not base and not waiting:
        print("no baseline run found in", root)
        return 2
    print(f"Load test verdict ({root})")
    failures = []
    if base:
        failures += flash_sales(root, runs, base)
    if waiting:
        if base:
            print()
        lines, wait_failures = wait_report.section(waiting)
        print("\n".join(lines))
        failures += wait_failures
        wait_report.chart(waiting, os.path.join(root, "chart-wait.svg"))
    busy = max(r["meta"]["cpu_busy"] for m in runs.values() for r in m.values())
    print()
    drawn = [s for s in SCENARIOS if s in runs] + (["wait"] if waiting else [])
    if drawn:
        print(f"charts: {', '.join(os.path.join(root, f'chart-{s}.svg') for s in drawn)}")
    if busy > 0.9:
        print(f"note: the machine's CPU was {busy:.0%} busy in the busiest run: latency figures include CPU contention")
    else:
        print(f"the machine was not the bottleneck: CPU at most {busy:.0%} busy")
    if failures:
        print("\nFAILED:")
        for f in failures:
            print("  -", f)
        return 1
    if base:
        print("\nverdict: with the limiter on, no payment 429s, ordinary shops at their baseline, "
              "hot shops at their caps; with it off, the flash-sale failure shows.")
    if waiting:
        print("\nverdict: " + wait_report.summary(waiting))
    return 0


def flash_sales(root, runs, base):
    """The flash-sale table (baseline and SCENARIOS, limiter off and on); returns the failures."""
    print(f"ordinary shops' baseline (no hot shop, limiter off): success {base['ord_ok']:.1%}, "
          f"p50 {base['ord_p50']:.0f} ms, p95 {base['ord_p95']:.0f} ms")
    hdr = (f"{'scenario':9} {'limiter':7} {'checkouts':>9} {'pay 429':>8} {'zoneA 429':>9} {'ord ok':>7} "
           f"{'ord p50':>8} {'ord p95':>8} {'503s':>6}  {'hot shop admitted/s (cap)':<34} {'cpu':>5}")
    print(hdr)
    print("-" * len(hdr))
    failures = []
    for scenario in ["baseline"] + SCENARIOS:
        for mode in ("off", "on"):
            r = runs.get(scenario, {}).get(mode)
            if not r:
                continue
            n_hot = len(r["hot_rates"])
            hot_txt = ", ".join(
                f"{shop} {rate:.1f} ({bound(HOT_SHOP_CAP, win) / max(win, 1e-9):.1f})"
                for shop, (adm, win, rate) in r["hot_rates"].items()
            ) or "-"
            lane_adm = sum(adm for adm, _, _ in r["hot_rates"].values())
            lane_win = max((win for _, win, _ in r["hot_rates"].values()), default=0)
            if n_hot > 1:
                hot_txt += f"; together {lane_adm / max(lane_win, 1e-9):.1f} (lane {bound(HOT_LANE_CAP, lane_win) / max(lane_win, 1e-9):.1f})"
            print(f"{scenario:9} {mode:7} {r['checkouts']:>9} {r['payment_429']:>8} {r['zone_a_429']:>9} "
                  f"{r['ord_ok']:>7.1%} {r['ord_p50']:>6.0f}ms {r['ord_p95']:>6.0f}ms {r['ord_503'] + r['hot_503']:>6}  "
                  f"{hot_txt:<34} {r['meta']['cpu_busy']:>5.0%}")
            if scenario == "baseline":
                continue
            if mode == "on":
                if r["payment_429"] > max(2, 0.005 * r["payment_calls"]):
                    failures.append(f"{scenario}/on: {r['payment_429']} payment 429s from the provider")
                if r["ord_ok"] < base["ord_ok"] - 0.05:
                    failures.append(f"{scenario}/on: ordinary success {r['ord_ok']:.1%} vs baseline {base['ord_ok']:.1%}")
                for shop, (adm, win, rate) in r["hot_rates"].items():
                    if adm > bound(HOT_SHOP_CAP, win) * 1.05 + 1:
                        failures.append(f"{scenario}/on: {shop} admitted {adm} in {win:.1f}s, above its cap")
                if n_hot > 1 and lane_adm > bound(HOT_LANE_CAP, lane_win) * 1.05 + 1:
                    failures.append(f"{scenario}/on: hot shops admitted {lane_adm} in {lane_win:.1f}s, above the hot lane")
            else:
                if r["payment_429"] == 0 or r["ord_ok"] > base["ord_ok"] - 0.10:
                    failures.append(f"{scenario}/off: the flash-sale failure did not show (payment 429s {r['payment_429']}, "
                                    f"ordinary success {r['ord_ok']:.1%}): the scenario is not realistic enough")
        if scenario != "baseline" and scenario in runs:
            path = os.path.join(root, f"chart-{scenario}.svg")
            chart(scenario, runs[scenario], path)
    return failures


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
