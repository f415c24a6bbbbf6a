"""The what-if replay against reality (scripts/replay-check.sh): `checkout-guard replay`
on the flood's events, limiter off and on, against what the on and off runs really did.
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
    the limiter's denials, the provider's 429s, and the calls' time span."""
    admitted, denied, c429 = Counter(), Counter(), 0
    ts = []
    for e in events(path):
        t = e.get("eventType")
        if t == "ExternalApiCall" and e.get("api") == "payment":
            admitted[e.get("shop.id", "")] += 1
            c429 += e.get("http.response.status_code") == 429
            ts.append(e["timestamp"])
        elif t == "RateLimitDecision" and e.get("allowed") is False:
            denied[e.get("shop.id", "")] += 1
            ts.append(e["timestamp"])
    span = (max(ts) - min(ts)) / 1000 if ts else 0
    return {"admitted": admitted, "denied": denied, "provider_429": c429, "span_s": span}


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
    res = {"duration": a.duration, "limits": LIMITS, "provider": provider,
           "off": {"attempts": pred["totals"]["attempts"], "provider_429": off["provider_429"], "span_s": off["span_s"]},
           "on": {"admitted": sum(on["admitted"].values()), "denied": sum(on["denied"].values()),
                  "hot_admitted_per_s": on_hot_rate, "span_s": on["span_s"]},
           "predicted": {"hot_admitted_per_s": pred_hot_rate, "admitted": pred["totals"]["admitted"],
                         "provider_429": pred["provider_429"], "bare_provider_429": bare["provider_429"]},
           "per_shop": per_shop, "checks": checks}
    (out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    ok = all(c["holds"] for c in checks)
    lines = [f"# What-if replay against the load test ({a.duration:g} s runs)", "",
             "| check | measured | holds |", "| --- | --- | --- |"]
    lines += [f"| {c['check']} | {c['measured']} | {'yes' if c['holds'] else 'NO'} |" for c in checks]
    lines += ["", "All checks hold." if ok else "Some checks FAILED."]
    (out / "verdict.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
