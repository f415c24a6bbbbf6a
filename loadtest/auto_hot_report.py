"""The auto_hot demo's verdict (scripts/auto-hot-demo.sh): reads the run's nginx access
log, the provider's log and the workers' events, and prints when the flooded shop became
hot, what it was admitted before and after, and how the ordinary shops fared. Writes
results.json and verdict.md to OUT. Exit 1 when an expectation fails.

  python loadtest/auto_hot_report.py RUN_DIR OUT
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from verdict import HOT_SHOP_CAP, analyse, bound, read_log  # noqa: E402

# Must match the defaults of `auto_hot` (docs/operations.md: auto_hot).
WINDOW_S, SHARE = 10.0, 0.3
FLASH = "flash-1"
SKEW = 0.2


def main(run_dir, out):
    r = analyse(run_dir)
    reqs = r["reqs"]
    flash = [q for q in reqs if q[3] == FLASH]
    ordinary = [q for q in reqs if q[3] != FLASH]
    if not flash:
        print("no request reached flash-1: the flood did not run")
        return 1
    flood_start = min(q[0] for q in flash)
    end = max(q[0] for q in reqs)
    events = read_log(os.path.join(run_dir, "events.jsonl"))
    hot = [e for e in events if e.get("eventType") == "RateLimitHot"]
    flash_hot = [e for e in hot if e.get("shop.id") == FLASH]
    became = min((e["timestamp"] / 1000 for e in flash_hot), default=None)
    checks = []

    def check(name, holds, measured):
        checks.append({"check": name, "holds": bool(holds), "measured": measured})

    res = {
        "flood_start_s": round(flood_start - r["t0"], 2),
        "duration_s": round(end - r["t0"], 2),
        "hot_events": hot,
        "payment_429": r["payment_429"],
    }
    check("flash-1 became hot by itself (a RateLimitHot event)", became is not None, f"{len(flash_hot)} event(s)")
    check("no ordinary shop was made hot", all(e.get("shop.id") == FLASH for e in hot),
          ", ".join(sorted({e.get("shop.id") for e in hot})) or "none")
    if became is not None:
        to_hot = became - flood_start
        res["time_to_hot_s"] = round(to_hot, 2)
        res["share_when_hot"] = flash_hot[0]["share"]
        check("capped within 5 s of the flood's start", to_hot <= 5.0, f"{to_hot:.2f} s")
        before = sum(1 for q in flash if q[0] < became and q[1] == 200)
        after = [q for q in flash if q[0] >= became]
        admitted_after = sum(1 for q in after if q[1] == 200)
        window = max((q[0] for q in after), default=became) - became
        # nginx logs a checkout when it ends, ~70 ms after its decision (the provider call
        # comes after it): the decisions of the logged window started up to SKEW earlier.
        limit = bound(HOT_SHOP_CAP, window + SKEW)
        res.update({
            "flash_admitted_before_hot": before,
            "flash_admitted_after_hot": admitted_after,
            "flash_after_window_s": round(window, 2),
            "flash_after_limit": round(limit, 1),
            "flash_after_per_s": round(admitted_after / max(window, 1e-9), 1),
            "flash_requests": len(flash),
        })
        check("after it became hot, flash-1 admitted at most hot_shop's capacity + rate x t",
              admitted_after <= limit, f"{admitted_after} <= {limit:.0f} ({admitted_after / max(window, 1e-9):.1f}/s vs {HOT_SHOP_CAP[1]:.0f}/s)")
    cut = became if became is not None else end
    during = [q for q in ordinary if flood_start <= q[0] < cut]
    after = [q for q in ordinary if q[0] >= cut]
    ok_during = sum(1 for q in during if q[1] == 200) / max(1, len(during))
    ok = sum(1 for q in after if q[1] == 200) / max(1, len(after))
    ok_settled = [q for q in after if q[0] >= cut + 1.0]
    ok_settled = sum(1 for q in ok_settled if q[1] == 200) / max(1, len(ok_settled))
    res.update({"ordinary_before_hot": len(during), "ordinary_ok_before_hot": round(ok_during, 4),
                "ordinary_after_hot": len(after), "ordinary_ok_after_hot": round(ok, 4),
                "ordinary_ok_from_1s_after_hot": round(ok_settled, 4),
                "ordinary_ok_overall": round(r["ord_ok"], 4), "ordinary_p50_ms": round(r["ord_p50"], 1)})
    settled_n = sum(1 for q in after if q[0] >= cut + 1.0)
    check("ordinary shops kept buying from 1 s after it became hot (>= 95% paid)", ok_settled >= 0.95,
          f"{100 * ok_settled:.1f}% of {settled_n} ({100 * ok:.1f}% from the moment it became hot)")
    check("no payment 429 from the provider", r["payment_429"] == 0, str(r["payment_429"]))
    res["checks"] = checks

    # Seconds since the start: checkouts paid per second, flash-1 and ordinary.
    per = {}
    for q in reqs:
        s = int(q[0] - r["t0"])
        row = per.setdefault(s, {"flash_paid": 0, "flash_503": 0, "ordinary_paid": 0, "ordinary_other": 0})
        if q[3] == FLASH:
            row["flash_paid" if q[1] == 200 else "flash_503"] += 1
        else:
            row["ordinary_paid" if q[1] == 200 else "ordinary_other"] += 1
    res["per_second"] = [dict(t=s, **per[s]) for s in sorted(per)]
    json.dump(res, open(os.path.join(out, "results.json"), "w"), indent=1)

    lines = ["# auto_hot on the load-test stack", "",
             f"No shop declared hot; `auto_hot` on with its defaults ({WINDOW_S:.0f} s window, {SHARE:.0%} share, hot for 5 minutes).",
             f"Ordinary buyers at 20 shops from the start; a flood at {FLASH} from {res['flood_start_s']} s; {res['duration_s']} s in all.", ""]
    if became is not None:
        lines += [f"{FLASH} became hot {res['time_to_hot_s']} s after its flood began, at a share of "
                  f"{100 * res['share_when_hot']:.0f}% of the global bucket's consumption over the window "
                  f"(RateLimitHot event: `{json.dumps(flash_hot[0])}`).", "",
                  f"Before: {res['flash_admitted_before_hot']} of its checkouts admitted. After: {res['flash_admitted_after_hot']} in "
                  f"{res['flash_after_window_s']} s ({res['flash_after_per_s']}/s; hot_shop allows {HOT_SHOP_CAP[0]} + {HOT_SHOP_CAP[1]:.0f}/s x t = {res['flash_after_limit']}), "
                  f"of {res['flash_requests']} requests in all.", ""]
    lines += [f"Ordinary shops: while the flood was not yet found, {res['ordinary_before_hot']} checkouts, {100 * ok_during:.1f}% paid "
              f"(the flood had drained the global bucket); once flash-1 was hot, {res['ordinary_after_hot']} checkouts, {100 * ok:.1f}% paid "
              f"({100 * ok_settled:.1f}% from 1 s after, when the global bucket had refilled); p50 {res['ordinary_p50_ms']} ms over the run. "
              f"Payment 429s from the provider: {r['payment_429']}.", "",
              "| check | measured | |", "| --- | --- | --- |"]
    for c in checks:
        lines.append(f"| {c['check']} | {c['measured']} | {'holds' if c['holds'] else '**fails**'} |")
    lines += ["", "| s | flash-1 paid | flash-1 503 | ordinary paid | ordinary other |", "| --- | --- | --- | --- | --- |"]
    for row in res["per_second"]:
        lines.append(f"| {row['t']} | {row['flash_paid']} | {row['flash_503']} | {row['ordinary_paid']} | {row['ordinary_other']} |")
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "verdict.md"), "w").write(text)
    print(text)
    failed = [c for c in checks if not c["holds"]]
    print("All checks hold." if not failed else f"{len(failed)} check(s) failed.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
