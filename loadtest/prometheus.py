"""A real Prometheus (Debian's 2.42, /usr/bin/prometheus) scraping the example checkout's
/metrics during a load-test run (issue 40; scripts/loadtest.sh starts one per run, its
configuration and TSDB in RUN_DIR/prometheus/, on a free loopback port), and what its HTTP
API says afterwards against the load test's own count of the limiter's answers.

  python loadtest/prometheus.py config DIR TARGET RUN      writes DIR/prometheus.yml
  python loadtest/prometheus.py wait-up PORT               until the target was scraped up
  python loadtest/prometheus.py collect RUN_DIR START END  queries it: RUN_DIR/prometheus.json
  python loadtest/prometheus.py summary OUT_DIR            every run's: OUT_DIR/prometheus.json,
                                                           prometheus.md, chart-prometheus.svg/png

START and END are the load's unix times (Locust started, Locust done). The load test's own
count of limited answers: the checkout's 503s that php-fpm answered in the run's nginx
access log (`us` set: nginx's own flow-control 503 has none), i.e. the `limited` and
`limiter_unavailable` answers of checkout.php; the CheckoutStep events say the same.

Prometheus counts the denials in three ways, all PromQL over the load's window:
  denied_increase   increase() from zero: a subquery that reads a series not yet born as 0,
                    so the denials made before its first scrape count too (each run's
                    php-fpm master is new, and its series are born with the flood), and
                    bridges failed scrapes with last_over_time() (a scrape that times out
                    while every php-fpm worker is busy makes the series stale: read as 0, it
                    would come back as a counter reset and be counted twice);
  denied_by_reason  `sum by (reason) (increase(...{outcome="denied"}[W]))`, as an operator
                    writes it: right on series older than the window, a few percent low on
                    series born in it (Prometheus 2.42 has no created timestamps);
  denied_at_end     the counters' reading after the load (they start at 0 with the master).
Standard library only for the HTTP API (urllib); matplotlib for the chart (loadtest/charts.py).
"""

import json
import math
import os
import sys
import time
import urllib.parse
import urllib.request

JOB = "checkout"
SCRAPE_INTERVAL = 1  # seconds
DENIED = 'checkout_guard_decisions_total{job="checkout",outcome="denied"}'


def write_config(dir_: str, target: str, run: str) -> str:
    path = os.path.join(dir_, "prometheus.yml")
    with open(path, "w") as f:
        f.write(f"""# A Prometheus of this load-test run's own (scripts/loadtest.sh, loadtest/prometheus.py).
global:
  scrape_interval: {SCRAPE_INTERVAL}s
  scrape_timeout: {SCRAPE_INTERVAL}s
scrape_configs:
  - job_name: {JOB}
    metrics_path: /metrics
    static_configs:
      - targets: ["{target}"]
        labels:
          run: "{run}"
""")
    return path


def api(port: int, path: str, **params) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{url}: {body}")
    return body["data"]


def query(port: int, expr: str, at: float) -> list:
    """An instant query: [(labels, value)]."""
    return [(s["metric"], float(s["value"][1])) for s in api(port, "query", query=expr, time=f"{at:.3f}")["result"]]


def scalar(port: int, expr: str, at: float) -> float:
    """The single value of an instant query; 0 when it has none (an absent series)."""
    res = query(port, expr, at)
    return res[0][1] if res else 0.0


def last_scrape(port: int) -> float:
    """The time of the checkout's latest scrape (0 before the first)."""
    return scalar(port, f'timestamp(up{{job="{JOB}"}})', time.time())


def wait_up(port: int, timeout: float = 15) -> None:
    """Until Prometheus answers and has scraped the checkout with up == 1."""
    deadline = time.time() + timeout
    last = "no answer"
    while time.time() < deadline:
        try:
            if scalar(port, f'up{{job="{JOB}"}}', time.time()) == 1:
                return
            last = "the checkout not scraped up yet"
        except OSError as e:
            last = str(e)
        time.sleep(0.1)
    raise SystemExit(f"Prometheus on port {port}: {last} after {timeout:g} s")


def read_jsonl(path: str):
    if not os.path.exists(path):
        return
    with open(path) as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                pass


def own_counts(run_dir: str) -> dict:
    """The load test's own count of the limiter's refusals: php-fpm's 503s in the checkout's
    access log, and the CheckoutStep events that said why; and the payment calls and their
    429s in the provider's nginx log."""
    limited_503 = cut = 0
    for r in read_jsonl(os.path.join(run_dir, "access.log")):
        if not r.get("u", "").startswith("/checkout.php"):
            continue
        if int(r["s"]) == 503 and r.get("us", "-") not in ("", "-"):
            limited_503 += 1
        elif int(r["s"]) == 499:
            cut += 1
    payment_calls = payment_429 = 0
    for r in read_jsonl(os.path.join(run_dir, "provider.log")):
        if r.get("u", "").startswith("/v1/charges"):
            payment_calls += 1
            payment_429 += int(r["s"]) == 429
    steps = {"limited": 0, "limiter_unavailable": 0}
    for e in read_jsonl(os.path.join(run_dir, "events.jsonl")):
        if e.get("eventType") != "CheckoutStep":
            continue
        if e.get("step") == "limited":
            steps["limited"] += 1
        elif e.get("step") == "failed" and e.get("cause") == "limiter_unavailable":
            steps["limiter_unavailable"] += 1
    return {"limited_503": limited_503, "cut_499": cut, "events": steps,
            "payment_calls": payment_calls, "payment_429": payment_429}


def diff_pct(measured: float, reference: float):
    if reference == 0:
        return 0.0 if measured == 0 else None
    return round(100.0 * (measured - reference) / reference, 2)


def collect(run_dir: str, start: float, end: float) -> dict:
    port = int(next(line.split("=", 1)[1] for line in open(os.path.join(run_dir, "ports"))
                    if line.startswith("prometheus=")))
    # Requests cut when Locust stopped may still finish in PHP: two scrapes after the load's
    # end, the later a second after it, hold every decision the run made.
    deadline = time.time() + 10
    while last_scrape(port) < end + SCRAPE_INTERVAL + 0.1:
        if time.time() > deadline:
            raise SystemExit(f"Prometheus on port {port} did not scrape the checkout after the load")
        time.sleep(0.1)
    # The window: from a whole second before the load to the whole second after the last
    # scrape, so that the 1 s subquery steps fall on both flat ends (no extrapolation).
    t0 = math.floor(start) - 1
    t1 = math.floor(last_scrape(port))
    window = f"{t1 - t0}s"
    res = {
        "port": port,
        "scrape_interval": SCRAPE_INTERVAL,
        "load": {"start": start, "end": end},
        "window": {"start": t0, "end": t1, "seconds": t1 - t0},
        "scrapes": int(scalar(port, f'count_over_time(up{{job="{JOB}"}}[{window}])', t1)),
        "scrapes_up": int(scalar(port, f'sum_over_time(up{{job="{JOB}"}}[{window}])', t1)),
        "up_min": scalar(port, f'min_over_time(up{{job="{JOB}"}}[{window}])', t1),
        "up_max": scalar(port, f'max_over_time(up{{job="{JOB}"}}[{window}])', t1),
        "scrape_seconds_max": scalar(port, f'max_over_time(scrape_duration_seconds{{job="{JOB}"}}[{window}])', t1),
        "samples_scraped_max": scalar(port, f'max_over_time(scrape_samples_scraped{{job="{JOB}"}}[{window}])', t1),
        "series": {},
        "start_time_seconds": scalar(port, f'max(checkout_guard_metrics_start_time_seconds{{job="{JOB}"}})', t1),
        "resets": scalar(port, f'sum(resets(checkout_guard_decisions_total{{job="{JOB}"}}[{window}]))', t1),
    }
    for family in ("checkout_guard_decisions_total", "checkout_guard_near_limit_total",
                   "checkout_guard_local_denials_total", "checkout_guard_adaptive_share",
                   "checkout_guard_events_written_total", "checkout_guard_events_dropped_total",
                   "http_client_request_duration_seconds_count", "checkout_guard_metrics_start_time_seconds"):
        res["series"][family] = int(scalar(port, f'count({family}{{job="{JOB}"}})', t1))
    res["queries"] = {
        "denied_increase": f"increase((sum(last_over_time({DENIED}[{window}])) or vector(0))[{window}:1s])",
        "denied_by_reason": f"sum by (reason) (increase({DENIED}[{window}]))",
        "denied_at_end": f"sum({DENIED})",
        "decisions_by_outcome": f'sum by (outcome, reason, mode) (checkout_guard_decisions_total{{job="{JOB}"}})',
        "rate_by_reason": f'sum by (reason) (rate(checkout_guard_decisions_total{{job="{JOB}"}}[5s]))',
    }
    q = res["queries"]
    res["denied_increase"] = round(scalar(port, q["denied_increase"], t1), 2)
    res["denied_by_reason"] = {m.get("reason", ""): round(v, 2) for m, v in query(port, q["denied_by_reason"], t1)}
    res["denied_at_end"] = scalar(port, q["denied_at_end"], t1)
    res["decisions"] = [{**m, "value": v} for m, v in query(port, q["decisions_by_outcome"], t1)]
    res["denied_per_second"] = round(res["denied_increase"] / max(end - start, 1e-9), 2)
    series = api(port, "query_range", query=q["rate_by_reason"], start=t0, end=t1, step="1s")["result"]
    res["rate_by_reason"] = {s["metric"].get("reason", ""): [(float(t) - start, float(v)) for t, v in s["values"]]
                             for s in series}
    counters = ("checkout_guard_near_limit_total", "checkout_guard_local_denials_total",
                "checkout_guard_provider_throttled_total", "checkout_guard_reservations_waited_total",
                "checkout_guard_events_written_total", "checkout_guard_events_dropped_total",
                "checkout_guard_metrics_series_dropped_total")
    res["totals"] = {c: scalar(port, f'sum({c}{{job="{JOB}"}})', t1) for c in counters}
    res["http_calls"] = {f'{m.get("api", "")} {m.get("status_class", "")}': v for m, v in query(
        port, f'sum by (api, status_class) (http_client_request_duration_seconds_count{{job="{JOB}"}})', t1)}
    own = own_counts(run_dir)
    res["own"] = own
    res["diff_pct"] = {
        "denied_increase": diff_pct(res["denied_increase"], own["limited_503"]),
        "denied_by_reason": diff_pct(sum(res["denied_by_reason"].values()), own["limited_503"]),
        "denied_at_end": diff_pct(res["denied_at_end"], own["limited_503"]),
        # The provider's 429s as the checkout's measured client saw them (4xx: the stack's
        # provider answers no other 4xx), against the provider's nginx log.
        "payment_4xx": diff_pct(res["http_calls"].get("payment 4xx", 0), own["payment_429"]),
        "payment_calls": diff_pct(sum(v for k, v in res["http_calls"].items() if k.startswith("payment ")),
                                  own["payment_calls"]),
    }
    with open(os.path.join(run_dir, "prometheus.json"), "w") as f:
        json.dump(res, f, indent=1)
    return res


def summary(out: str) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import charts

    runs = {}
    for name in sorted(os.listdir(out)):
        p = os.path.join(out, name, "prometheus.json")
        if os.path.isfile(p):
            with open(p) as f:
                runs[name] = json.load(f)
    if not runs:
        print(f"no Prometheus results under {out}")
        return 2
    rows = []
    for name, r in runs.items():
        rows.append({
            "run": name, "scrapes": r["scrapes"], "scrapes_up": r["scrapes_up"], "up_min": r["up_min"],
            "decision_series": r["series"].get("checkout_guard_decisions_total", 0),
            "limited_503": r["own"]["limited_503"], "denied_increase": r["denied_increase"],
            "denied_at_end": r["denied_at_end"], "denied_by_reason": r["denied_by_reason"],
            "diff_pct": r["diff_pct"], "denied_per_second": r["denied_per_second"],
            "payment_calls": r["own"]["payment_calls"], "payment_429": r["own"]["payment_429"],
            "payment_calls_prometheus": sum(v for k, v in r["http_calls"].items() if k.startswith("payment ")),
            "payment_4xx_prometheus": r["http_calls"].get("payment 4xx", 0),
            "near_limit": r["totals"]["checkout_guard_near_limit_total"],
            "throttled": r["totals"]["checkout_guard_provider_throttled_total"],
        })
    report = {"runs": rows, "queries": next(iter(runs.values()))["queries"]}
    with open(os.path.join(out, "prometheus.json"), "w") as f:
        json.dump(report, f, indent=1)

    def pct(v):
        return "-" if v is None else f"{v:+.1f}%"

    lines = [
        f"# Prometheus scraped the checkout ({os.path.basename(os.path.normpath(out))})",
        "",
        f"A Prometheus of each run's own scraped the example checkout's `/metrics` every {SCRAPE_INTERVAL} s "
        "(`loadtest/prometheus.py`). The limiter's denials as PromQL counts them over the load, against the "
        "load test's own count (php-fpm's 503s in the access log):",
        "",
        "| run | scrapes (up) | decision series | 503s (own) | increase() from 0 | diff | counters at end | diff "
        "| increase() by reason | diff |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in rows:
        by_reason = ", ".join(f"{k} {v:g}" for k, v in sorted(r["denied_by_reason"].items())) or "-"
        lines.append(f"| {r['run']} | {r['scrapes']} ({r['scrapes_up']}) | {r['decision_series']} | {r['limited_503']} "
                     f"| {r['denied_increase']:g} | {pct(r['diff_pct']['denied_increase'])} | {r['denied_at_end']:g} "
                     f"| {pct(r['diff_pct']['denied_at_end'])} | {by_reason} | {pct(r['diff_pct']['denied_by_reason'])} |")
    q = report["queries"]
    lines += ["", "Payment calls as the checkout's measured client counted them "
              "(`http_client_request_duration_seconds_count{api=\"payment\"}`), against the provider's nginx log; "
              "the throttling answers feedback() reported to a limiter with `adaptive`; and the allowed decisions "
              "that left a bucket near empty:", "",
              "| run | calls (provider) | calls (Prometheus) | diff | 429s (provider) | 4xx (Prometheus) | diff "
              "| throttled (adaptive) | near_limit |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['run']} | {r['payment_calls']} | {r['payment_calls_prometheus']:g} | {pct(r['diff_pct']['payment_calls'])} "
              f"| {r['payment_429']} | {r['payment_4xx_prometheus']:g} | {pct(r['diff_pct']['payment_4xx'])} "
              f"| {r['throttled']:g} | {r['near_limit']:g} |" for r in rows]
    lines += ["", "Queries (W: the run's window, a second before the load to the last scrape after it):", ""]
    lines += [f"- {k}: `{v}`" for k, v in q.items()]
    drawn = [(name, r["rate_by_reason"]) for name, r in runs.items() if r["rate_by_reason"]]
    if drawn:
        for ext in ("svg", "png"):
            charts.series_panels(os.path.join(out, f"chart-prometheus.{ext}"),
                                 [(f"{name}: decisions by reason", s) for name, s in drawn],
                                 "seconds since the load started", "decisions per second (rate over 5 s)")
        lines += ["", "Decisions by reason over time, as scraped: [chart-prometheus.svg](chart-prometheus.svg)"]
    with open(os.path.join(out, "prometheus.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[4:4 + 2 + len(rows)]))
    return 0


def main(argv: list) -> int:
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "config" and len(argv) == 5:
        write_config(argv[2], argv[3], argv[4])
    elif cmd == "wait-up" and len(argv) == 3:
        wait_up(int(argv[2]))
    elif cmd == "collect" and len(argv) == 5:
        r = collect(argv[2], float(argv[3]), float(argv[4]))
        print(f"prometheus: {r['scrapes']} scrapes, {r['scrapes_up']} up; denied {r['denied_increase']:g} "
              f"(increase) / {r['denied_at_end']:g} (at end) vs {r['own']['limited_503']} limited 503s")
    elif cmd == "summary" and len(argv) == 3:
        return summary(argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
