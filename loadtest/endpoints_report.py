"""The endpoint scenario's report (issue 42; scripts/loadtest.sh endpoints): what the
provider answered per endpoint, and how many checkouts (create then confirm) completed for
ordinary shops and for the hot shop, per run against the baseline (no flood).

  python loadtest/endpoints_report.py OUT          the load runs under OUT (baseline,
      global, endpoints, priorities): OUT/report.md, report.json, chart.png and chart.svg;
      the report on stdout; exit 1 when a check fails
  python loadtest/endpoints_report.py smoke OUT    the smoke runs under OUT (global,
      endpoints, priorities, each with its smoke.json of answer codes): one JSON line

Read from nginx's access logs: the provider's (provider.log: every call, its status and
the shop, sent as ?shop=) and the checkout's (access.log: every page and its answer).
A checkout is created when the provider answered the create 200, completed (paid) when it
answered the confirm 200; created but not confirmed is a payment left behind.
"""

import json
import os
import sys
from collections import Counter
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import charts  # noqa: E402
from verdict import read_log  # noqa: E402

RUNS = ("baseline", "global", "endpoints", "priorities")
ENDPOINTS = ("create", "confirm", "retrieve", "items")
HOT_SHOP = os.environ.get("HOT_SHOP", "flash-1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 0.02   # "at baseline": a success ratio at most 2 points below the baseline's


def endpoint_of(uri: str) -> str:
    """The provider endpoint of a request URI: create, confirm, retrieve, items (the
    endpoint API), zoneA, charges (the older paths), or other."""
    path = urlsplit(uri).path
    if path == "/v1/payment_intents":
        return "create"
    if path.startswith("/v1/payment_intents/"):
        return "confirm" if path.endswith("/confirm") else "retrieve"
    if path.startswith("/v1/items/"):
        return "items"
    if path.startswith("/items/"):
        return "zoneA"
    if path.startswith("/v1/charges"):
        return "charges"
    return "other"


def shop_of(uri: str) -> str:
    return parse_qs(urlsplit(uri).query).get("shop", [""])[0]


def who(shop: str) -> str:
    return "hot" if shop == HOT_SHOP else "ordinary"


def provider_429s(run_dir: str) -> dict:
    counts = Counter(endpoint_of(r.get("u", "")) for r in read_log(os.path.join(run_dir, "provider.log")) if r.get("s") == 429)
    return {e: counts.get(e, 0) for e in ENDPOINTS}


def run_stats(run_dir: str) -> dict:
    provider = read_log(os.path.join(run_dir, "provider.log"))
    access = read_log(os.path.join(run_dir, "access.log"))
    meta = {}
    if os.path.exists(os.path.join(run_dir, "run.json")):
        meta = json.load(open(os.path.join(run_dir, "run.json")))
    t0 = min([r["t"] for r in access] + [r["t"] for r in provider], default=0.0)
    secs = max(1, int(meta.get("duration") or 0) or int(max([r["t"] for r in access], default=t0) - t0) + 1)

    def per_second(rows):
        c = [0] * secs
        for r in rows:
            i = int(r["t"] - t0)
            if 0 <= i < secs:
                c[i] += 1
        return c

    calls = {e: {"calls": 0, "ok": 0, "429": 0} for e in ENDPOINTS}
    made = {"ordinary": Counter(), "hot": Counter()}
    for r in provider:
        e = endpoint_of(r.get("u", ""))
        if e not in calls:
            continue
        calls[e]["calls"] += 1
        if r.get("s") == 200:
            calls[e]["ok"] += 1
            if e in ("create", "confirm"):
                made[who(shop_of(r["u"]))][e] += 1
        elif r.get("s") == 429:
            calls[e]["429"] += 1
    checkouts = {}
    for cls in ("ordinary", "hot"):
        pages = [r for r in access if urlsplit(r.get("u", "")).path == "/intent.php" and who(shop_of(r["u"])) == cls]
        codes = Counter(r.get("s") for r in pages)
        created, confirmed = made[cls]["create"], made[cls]["confirm"]
        checkouts[cls] = {
            "attempted": len(pages), "paid": codes.get(200, 0), "limited": codes.get(503, 0),
            "refused": codes.get(502, 0), "errors": sum(n for s, n in codes.items() if s not in (200, 502, 503)),
            "created": created, "confirmed": confirmed, "left_created": created - confirmed,
            "success": round(codes.get(200, 0) / len(pages), 4) if pages else None,
        }
    reads = [r for r in access if urlsplit(r.get("u", "")).path == "/lookup.php"]
    flood = [r for r in reads if shop_of(r["u"]) == HOT_SHOP]
    fc = Counter(r.get("s") for r in flood)
    paid = lambda cls: [r for r in access if urlsplit(r.get("u", "")).path == "/intent.php" and r.get("s") == 200 and who(shop_of(r["u"])) == cls]  # noqa: E731
    return {
        "seconds": secs, "meta": meta, "provider": calls,
        "provider_429": sum(c["429"] for c in calls.values()),
        "checkouts": checkouts,
        "flood": {"attempted": len(flood), "ok": fc.get(200, 0), "limited": fc.get(503, 0), "refused": fc.get(502, 0)},
        "per_second": {
            "paid, ordinary shops": per_second(paid("ordinary")),
            "paid, hot shop": per_second(paid("hot")),
            "flood answered 200": per_second([r for r in flood if r.get("s") == 200]),
            "provider 429s": per_second([r for r in provider if r.get("s") == 429 and endpoint_of(r.get("u", "")) in ENDPOINTS]),
        },
    }


def checks_for(runs: dict) -> list:
    """[(check, held, measured)] of the scenario's expectations."""
    out = []
    base = runs.get("baseline")
    for name in ("endpoints", "priorities"):
        if name in runs:
            out.append((f"{name}: no provider 429s", runs[name]["provider_429"] == 0, runs[name]["provider_429"]))
    if base and "priorities" in runs:
        for cls in ("ordinary", "hot"):
            b, p = base["checkouts"][cls]["success"], runs["priorities"]["checkouts"][cls]["success"]
            out.append((f"priorities: {cls} checkouts completed at baseline (within {100 * TOLERANCE:g} points)",
                        b is not None and p is not None and p >= b - TOLERANCE, f"{p} vs {b}"))
    if base and "global" in runs:
        g = runs["global"]
        worse = any(g["checkouts"][c]["success"] is not None and base["checkouts"][c]["success"] is not None
                    and g["checkouts"][c]["success"] < base["checkouts"][c]["success"] - 0.05 for c in ("ordinary", "hot"))
        out.append(("global only: the failure shows (provider 429s and checkouts below baseline)",
                    g["provider_429"] > 0 and worse,
                    f"{g['provider_429']} 429s, success {g['checkouts']['ordinary']['success']}/{g['checkouts']['hot']['success']}"))
    return out


def pct(v):
    return "-" if v is None else f"{100 * v:.1f}%"


def markdown(res: dict) -> str:
    runs = res["runs"]
    lines = [f"# Endpoints and priorities under a flood ({res['out']})", "",
             f"Flooded endpoint: `{res['flood_endpoint']}` (from {HOT_SHOP} and ordinary shops' reads); "
             f"each run {res['duration']} s. Provider: global {res['provider']['global']}, per endpoint "
             f"{res['provider']['endpoint']}.", "",
             "| run | 429 create | 429 confirm | 429 retrieve | 429 items | ordinary paid / tried | ordinary ok | hot paid / tried "
             "| hot ok | created, not confirmed | flood 200 / tried |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in runs.items():
        o, h, f = r["checkouts"]["ordinary"], r["checkouts"]["hot"], r["flood"]
        p = r["provider"]
        lines.append(f"| {name} | {p['create']['429']} | {p['confirm']['429']} | {p['retrieve']['429']} | {p['items']['429']} "
                     f"| {o['paid']} / {o['attempted']} | {pct(o['success'])} | {h['paid']} / {h['attempted']} "
                     f"| {pct(h['success'])} | {o['left_created'] + h['left_created']} | {f['ok']} / {f['attempted']} |")
    lines += ["", "Checks:", ""]
    lines += [f"- {'held' if ok else 'FAILED'}: {name} ({measured})" for name, ok, measured in res["checks"]]
    lines += ["", f"verdict: {res['verdict']}", ""]
    return "\n".join(lines)


def main(out: str) -> int:
    runs = {name: run_stats(os.path.join(out, name)) for name in RUNS if os.path.isdir(os.path.join(out, name))}
    if not runs:
        print(f"no runs under {out}", file=sys.stderr)
        return 1
    meta = next(iter(runs.values()))["meta"]
    checks = checks_for(runs)
    ok = bool(checks) and all(held for _, held, _ in checks)
    res = {
        "out": os.path.relpath(out, ROOT) if os.path.abspath(out).startswith(ROOT + os.sep) else out, "duration": meta.get("duration"), "flood_endpoint": meta.get("flood_endpoint", "items"),
        "provider": {"global": meta.get("provider_global", "?"), "endpoint": meta.get("provider_endpoint", "?")},
        "runs": runs, "checks": checks,
        "verdict": ("a check failed (above)" if not ok else
                    f"the checks of the runs made ({', '.join(runs)}) held" if set(runs) != set(RUNS) else
                    "with endpoints no provider 429s, and with priorities the checkouts complete at baseline "
                    "while the flood lasts; one global bucket alone lets the flood through to the provider's 429s"),
    }
    json.dump({**res, "runs": {n: {k: v for k, v in r.items() if k != "per_second"} for n, r in runs.items()}},
              open(os.path.join(out, "report.json"), "w"), indent=1)
    md = markdown(res)
    open(os.path.join(out, "report.md"), "w").write(md)
    series = [("paid, ordinary shops", charts.GREEN), ("paid, hot shop", charts.BLUE),
              ("flood answered 200", charts.ORANGE), ("provider 429s", charts.RED)]
    panels = [(name, r["per_second"]) for name, r in runs.items()]
    for ext in ("svg", "png"):
        charts.per_second_panels(os.path.join(out, f"chart.{ext}"), panels, series, width=4 * len(panels))
    print(md)
    return 0 if ok else 1


def smoke(out: str) -> int:
    res = {}
    for form in ("global", "endpoints", "priorities"):
        d = os.path.join(out, form)
        if not os.path.exists(os.path.join(d, "smoke.json")):
            continue
        res[form] = json.load(open(os.path.join(d, "smoke.json")))
        res[form]["provider_429"] = provider_429s(d)
    print(json.dumps(res, sort_keys=True))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "smoke":
        sys.exit(smoke(sys.argv[2]))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
