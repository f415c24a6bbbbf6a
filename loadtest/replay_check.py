"""The what-if replay against reality (scripts/replay-check.sh): `checkout-guard replay`
on the flood's events, limiter off and on, against what the on and off runs really did;
with --in-flight, also the flood against a slow provider, limiter off and on with that
`in_flight` (slow-off, slow-on), against the in-flight denials the on run really had.
Writes results.json and verdict.md into --out; exits 1 when a check fails."""
import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

HOT = "flash-1"
# The example checkout's limits (php/examples/checkout/bootstrap.php's defaults), as the
# on run decided with them.
LIMITS = "global=10/45 hot_lane=8/30 hot_shop=6/25"


def events(path: Path):
    with open(path) as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                continue


def measured(path: Path) -> dict:
    """What a run really did at the payment api: per shop the calls made (admitted) and
    the limiter's denials (and of them the in-flight ones, reason in_flight_*), the
    provider's 429s, the calls' mean duration (ms) and the time span."""
    admitted, denied, in_flight, c429 = Counter(), Counter(), Counter(), 0
    ts, durations = [], []
    for e in events(path):
        t = e.get("eventType")
        if t == "ExternalApiCall" and e.get("api") == "payment":
            admitted[e.get("shop.id", "")] += 1
            c429 += e.get("http.response.status_code") == 429
            ts.append(e["timestamp"])
            if isinstance(e.get("duration.ms"), (int, float)):
                durations.append(e["duration.ms"])
        elif t == "RateLimitDecision" and e.get("allowed") is False:
            denied[e.get("shop.id", "")] += 1
            if str(e.get("reason", "")).startswith("in_flight_"):
                in_flight[e.get("shop.id", "")] += 1
            ts.append(e["timestamp"])
    span = (max(ts) - min(ts)) / 1000 if ts else 0
    mean_ms = sum(durations) / len(durations) if durations else 0.0
    return {"admitted": admitted, "denied": denied, "in_flight_denied": in_flight,
            "provider_429": c429, "span_s": span, "mean_call_ms": mean_ms}


def in_flight_limits(spec: str) -> str:
    """CHECKOUT_IN_FLIGHT's `global=N,hot_lane=M,hot_shop=K,lease_seconds=S` as replay's
    --limits words: `in_flight=N/M/K lease_seconds=S` (`-` for a level not given)."""
    f = dict(part.split("=", 1) for part in spec.split(",") if part.strip())
    words = ["in_flight=" + "/".join(f.get(k, "-") for k in ("global", "hot_lane", "hot_shop"))]
    if "lease_seconds" in f:
        words.append(f"lease_seconds={f['lease_seconds']}")
    return " ".join(words)


def in_flight_denied(shop_counts: dict) -> int:
    return sum(shop_counts["denied_in_flight"].values())


# The in-flight run's own events replayed: how far its in-flight denials per shop may be
# from the run's (see docs/scan.md, "In-flight leases against a real run"): a real lease is
# held from the decision to the end of the request (RSHUTDOWN), the replay's from the
# call's recorded start for its recorded duration, both on the workers' clocks in whole
# milliseconds; a call that starts within those few milliseconds of a release is decided
# the other way. Each such call moves one denial: a few per shop, not a share.
IN_FLIGHT_REPRO = (0.05, 5)    # per shop: within 5% or 5 denials, whichever is more
# The off run's events predict the hot shop's admitted rate under in_flight (K leases of
# ~SLOW s: about K/SLOW a second), not its denials' count: the off run's buyers, never
# denied, came back slower (every checkout waited for the provider), so it offered fewer
# attempts.
IN_FLIGHT_PREDICT = 0.10


def replay(bin_: str, files, *args) -> dict:
    cmd = [bin_, "replay", *map(str, files), "--api", "payment", "--json", *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--payment-rate", type=float, required=True)
    ap.add_argument("--payment-burst", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--in-flight", default="", help="CHECKOUT_IN_FLIGHT of the slow-on run")
    ap.add_argument("--slow-seconds", type=float, default=0.0)
    a = ap.parse_args()
    out = Path(a.out)
    off_f, on_f = out / "flood-off/events.jsonl", out / "flood-on/events.jsonl"
    off, on = measured(off_f), measured(on_f)
    # nginx's limit_req with burst B and nodelay answers B + 1 at once, then RATE/s.
    provider = f"{a.payment_burst + 1}/{a.payment_rate:g}"
    pred = replay(a.bin, [off_f], "--limits", LIMITS, "--hot", HOT, "--provider", provider)
    bare = replay(a.bin, [off_f], "--provider", provider)
    again = replay(a.bin, [on_f], "--limits", LIMITS, "--hot", HOT, "--limiter", "payments")
    on_hot_rate = on["admitted"][HOT] / on["span_s"]
    pred_hot_rate = pred["shops"][HOT]["admitted"] / off["span_s"]
    ordinary = {s: c for s, c in pred["shops"].items() if s != HOT}
    ord_denied = sum(c["denied_total"] for c in ordinary.values())
    ord_attempts = sum(c["attempts"] for c in ordinary.values())
    rel = lambda x, y: abs(x - y) / y if y else (0.0 if x == 0 else float("inf"))
    per_shop = []
    for shop, c in again["shops"].items():
        real = on["admitted"].get(shop, 0)
        per_shop.append({"shop": shop, "replayed": c["admitted"], "measured": real,
                         "off_by": rel(c["admitted"], real)})
    worst = max(per_shop, key=lambda r: r["off_by"]) if per_shop else None
    checks = [
        {"check": f"hot shop's admitted rate predicted from the off run within 5% of the on run's",
         "measured": f"predicted {pred_hot_rate:.2f}/s, on run {on_hot_rate:.2f}/s ({rel(pred_hot_rate, on_hot_rate):.1%})",
         "holds": rel(pred_hot_rate, on_hot_rate) <= 0.05},
        {"check": "ordinary shops all admitted in the prediction",
         "measured": f"{ord_denied} of {ord_attempts} denied", "holds": ord_denied == 0 and ord_attempts > 0},
        {"check": f"no provider 429 predicted with the limits (provider {provider})",
         "measured": str(pred["provider_429"]), "holds": pred["provider_429"] == 0},
        {"check": "without limits, predicted 429s within 10% of the off run's real 429s",
         "measured": f"predicted {bare['provider_429']}, real {off['provider_429']} ({rel(bare['provider_429'], off['provider_429']):.1%})",
         "holds": off["provider_429"] > 0 and rel(bare["provider_429"], off["provider_429"]) <= 0.10},
        {"check": "the on run's events replayed with its limits: admitted within 2% per shop",
         "measured": f"worst {worst['shop']}: replayed {worst['replayed']}, measured {worst['measured']} ({worst['off_by']:.1%})" if worst else "no shops",
         "holds": worst is not None and worst["off_by"] <= 0.02},
    ]
    res_in_flight = None
    if a.in_flight:
        extra, res_in_flight = check_in_flight(a, out, rel)
        checks += extra
    res = {"duration": a.duration, "limits": LIMITS, "provider": provider,
           "off": {"attempts": pred["totals"]["attempts"], "provider_429": off["provider_429"], "span_s": off["span_s"]},
           "on": {"admitted": sum(on["admitted"].values()), "denied": sum(on["denied"].values()),
                  "hot_admitted_per_s": on_hot_rate, "span_s": on["span_s"]},
           "predicted": {"hot_admitted_per_s": pred_hot_rate, "admitted": pred["totals"]["admitted"],
                         "provider_429": pred["provider_429"], "bare_provider_429": bare["provider_429"]},
           "per_shop": per_shop, "in_flight": res_in_flight, "checks": checks}
    (out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    ok = all(c["holds"] for c in checks)
    lines = [f"# What-if replay against the load test ({a.duration:g} s runs)", "",
             "| check | measured | holds |", "| --- | --- | --- |"]
    lines += [f"| {c['check']} | {c['measured']} | {'yes' if c['holds'] else 'NO'} |" for c in checks]
    lines += ["", "All checks hold." if ok else "Some checks FAILED."]
    (out / "verdict.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


def check_in_flight(a, out: Path, rel):
    """The slow-provider runs: the on run (in_flight on) replayed with its own limits and
    in_flight, and the off run's events with them, against the on run's real in-flight
    denials. Returns the checks and the figures."""
    off_f, on_f = out / "slow-off/events.jsonl", out / "slow-on/events.jsonl"
    off, on = measured(off_f), measured(on_f)
    limits = f"{LIMITS} {in_flight_limits(a.in_flight)}"
    again = replay(a.bin, [on_f], "--limits", limits, "--hot", HOT, "--limiter", "payments")
    pred = replay(a.bin, [off_f], "--limits", limits, "--hot", HOT)
    per_shop, worst = [], None
    for shop in sorted(set(again["shops"]) | set(on["in_flight_denied"])):
        got = in_flight_denied(again["shops"][shop]) if shop in again["shops"] else 0
        real = on["in_flight_denied"].get(shop, 0)
        allowed = max(IN_FLIGHT_REPRO[0] * real, IN_FLIGHT_REPRO[1])
        row = {"shop": shop, "replayed": got, "measured": real, "diff": got - real,
               "allowed": allowed, "holds": abs(got - real) <= allowed}
        per_shop.append(row)
        if worst is None or abs(row["diff"]) / allowed > abs(worst["diff"]) / worst["allowed"]:
            worst = row
    real_total = sum(on["in_flight_denied"].values())
    got_total = in_flight_denied(again["totals"])
    on_hot_rate = on["admitted"][HOT] / on["span_s"] if on["span_s"] else 0.0
    pred_hot_rate = pred["shops"].get(HOT, {}).get("admitted", 0) / off["span_s"] if off["span_s"] else 0.0
    ordinary = {s: c for s, c in pred["shops"].items() if s != HOT}
    pred_ord = sum(in_flight_denied(c) for c in ordinary.values())
    ord_attempts = sum(c["attempts"] for c in ordinary.values())
    real_ord = sum(n for s, n in on["in_flight_denied"].items() if s != HOT)
    real_ord_attempts = sum(on["admitted"][s] + on["denied"][s] for s in set(on["admitted"]) | set(on["denied"]) if s != HOT)
    ord_allowed = max(IN_FLIGHT_REPRO[1], 0.01 * ord_attempts)
    checks = [
        {"check": "in-flight run: the leases bound (the hot shop's in-flight denials, at least 50)",
         "measured": f"{on['in_flight_denied'][HOT]} in-flight denials of {HOT}, {real_total} in all; calls {on['mean_call_ms']:.0f} ms on average",
         "holds": on["in_flight_denied"][HOT] >= 50},
        {"check": f"the in-flight run's events replayed with its in_flight: in-flight denials per shop within {IN_FLIGHT_REPRO[0]:.0%} or {IN_FLIGHT_REPRO[1]}",
         "measured": (f"total replayed {got_total}, real {real_total}; worst {worst['shop']}: replayed {worst['replayed']}, real {worst['measured']}"
                      if worst else "no shops"),
         "holds": bool(per_shop) and all(r["holds"] for r in per_shop)},
        {"check": f"the slow off run's events with the in_flight: hot shop's admitted rate within {IN_FLIGHT_PREDICT:.0%} of the in-flight run's",
         "measured": f"predicted {pred_hot_rate:.2f}/s, in-flight run {on_hot_rate:.2f}/s ({rel(pred_hot_rate, on_hot_rate):.1%})",
         "holds": on_hot_rate > 0 and rel(pred_hot_rate, on_hot_rate) <= IN_FLIGHT_PREDICT},
        {"check": f"the slow off run's events with the in_flight: ordinary shops' in-flight denials as the run's (at most 1% of attempts or {IN_FLIGHT_REPRO[1]}, both)",
         "measured": f"predicted {pred_ord} of {ord_attempts}, real {real_ord} of {real_ord_attempts}",
         "holds": ord_attempts > 0 and pred_ord <= ord_allowed and real_ord <= max(IN_FLIGHT_REPRO[1], 0.01 * real_ord_attempts)},
    ]
    res = {"in_flight": a.in_flight, "limits": limits, "slow_seconds": a.slow_seconds,
           "on": {"admitted": sum(on["admitted"].values()), "in_flight_denied": real_total,
                  "hot_in_flight_denied": on["in_flight_denied"][HOT], "hot_admitted_per_s": on_hot_rate,
                  "mean_call_ms": on["mean_call_ms"], "span_s": on["span_s"]},
           "off": {"attempts": pred["totals"]["attempts"], "mean_call_ms": off["mean_call_ms"], "span_s": off["span_s"]},
           "replayed": {"in_flight_denied": got_total, "peak": again["totals"]["in_flight"]["peak"]},
           "predicted": {"hot_admitted_per_s": pred_hot_rate, "hot_in_flight_denied": in_flight_denied(pred["shops"][HOT]) if HOT in pred["shops"] else 0,
                         "ordinary_in_flight_denied": pred_ord, "peak": pred["totals"]["in_flight"]["peak"]},
           "per_shop": per_shop}
    return checks, res


if __name__ == "__main__":
    sys.exit(main())
