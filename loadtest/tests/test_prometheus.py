"""Prometheus around the load test (issue 40): the alert rules of docs/operations.md (promtool
checks and unit-tests them), the per-run configuration loadtest/prometheus.py writes, the
load test's own count of limited answers, and the PromQL counts against a real Prometheus
scraping a counter born in the middle of the window (as each run's series are)."""

import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "loadtest"))
import free_ports  # noqa: E402
import prometheus  # noqa: E402

RULES = os.path.join(ROOT, "deploy", "prometheus", "checkout-guard.rules.yml")
PROMETHEUS, PROMTOOL = "/usr/bin/prometheus", "/usr/bin/promtool"


def read(path):
    with open(path) as f:
        return f.read()


def promtool(*args):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=os.path.dirname(RULES))


@unittest.skipUnless(os.access(PROMTOOL, os.X_OK), "promtool not installed: run scripts/setup.sh")
class RulesTest(unittest.TestCase):
    def test_the_rules_are_valid(self):
        r = promtool("check", "rules", RULES)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCESS: 5 rules found", r.stdout)

    def test_each_alert_fires_on_its_series_and_not_before(self):
        r = promtool("test", "rules", "checkout-guard.rules.test.yml")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_docs_show_the_rule_file_as_it_is(self):
        docs = read(os.path.join(ROOT, "docs", "operations.md"))
        blocks = re.findall(r"```yaml\n(.*?)```", docs, re.S)
        self.assertIn(read(RULES), blocks,
                      "docs/operations.md shows deploy/prometheus/checkout-guard.rules.yml in a ```yaml block")

    def test_the_docs_queries_and_scrape_configuration_parse(self):
        docs = read(os.path.join(ROOT, "docs", "operations.md"))
        section = docs[docs.index("## Watching a sale"):]
        section = section[:section.index("\n## ", 1)]
        queries = re.findall(r"^- [^`]*: `([^`]+)`(?: and `([^`]+)`)?$", section, re.M)
        exprs = [q for pair in queries for q in pair if q]
        self.assertGreaterEqual(len(exprs), 9, "the queries listed under **Queries.**")
        exprs.append(re.search(r"counted\s+twice\):\s*`([^`]+)`", section).group(1).replace("[W", "[1m"))
        scrape = re.findall(r"```yaml\n(scrape_configs:.*?)```", section, re.S)
        self.assertEqual(len(scrape), 1)
        with tempfile.TemporaryDirectory() as d:
            rules = os.path.join(d, "queries.yml")
            with open(rules, "w") as f:
                f.write("groups:\n  - name: docs\n    rules:\n")
                f.writelines(f"      - record: docs:query{i}\n        expr: {json.dumps(e)}\n" for i, e in enumerate(exprs))
            r = promtool("check", "rules", rules)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            cfg = os.path.join(d, "prometheus.yml")
            with open(cfg, "w") as f:
                f.write(scrape[0])
            r = promtool("check", "config", cfg)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_the_runs_configuration_is_valid(self):
        with tempfile.TemporaryDirectory() as d:
            path = prometheus.write_config(d, "127.0.0.1:9", "flood-on")
            r = promtool("check", "config", path)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(path) as f:
                self.assertIn("scrape_interval: 1s", f.read())


class OwnCountTest(unittest.TestCase):
    def test_only_php_fpms_503s_to_checkouts_count_and_only_payment_calls(self):
        with tempfile.TemporaryDirectory() as d:
            log = [
                {"u": "/checkout.php?shop=a", "s": 503, "us": "503"},   # the limiter's
                {"u": "/checkout.php?shop=a", "s": 503, "us": ""},      # nginx's flow control
                {"u": "/checkout.php?shop=a", "s": 200, "us": "200"},
                {"u": "/checkout.php?shop=a", "s": 499, "us": ""},      # cut by Locust
                {"u": "/ready.php", "s": 503, "us": "503"},
            ]
            with open(os.path.join(d, "access.log"), "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in log) + "not json\n")
            with open(os.path.join(d, "events.jsonl"), "w") as f:
                for e in ({"eventType": "CheckoutStep", "step": "limited", "reason": "hot_shop"},
                          {"eventType": "CheckoutStep", "step": "failed", "cause": "limiter_unavailable"},
                          {"eventType": "CheckoutStep", "step": "failed", "cause": "payment_429"},
                          {"eventType": "RateLimitDecision", "step": "limited"}):
                    f.write(json.dumps(e) + "\n")
            with open(os.path.join(d, "provider.log"), "w") as f:
                for u, st in (("/v1/charges", 200), ("/v1/charges", 429), ("/items/1", 429)):
                    f.write(json.dumps({"u": u, "s": st}) + "\n")
            self.assertEqual(prometheus.own_counts(d), {"limited_503": 1, "cut_499": 1,
                                                        "events": {"limited": 1, "limiter_unavailable": 1},
                                                        "payment_calls": 2, "payment_429": 1})


class Exposition(http.server.BaseHTTPRequestHandler):
    """/metrics: a denials counter absent until `value` is set, as a fresh master's; a 503
    while `failing` (a scrape that php-fpm's busy pool does not answer in time)."""
    value = None
    failing = False

    def do_GET(self):
        if Exposition.failing:
            self.send_error(503)
            return
        body = "# TYPE checkout_guard_decisions_total counter\n"
        if Exposition.value is not None:
            body += ('checkout_guard_decisions_total{limiter="payments",outcome="denied",reason="hot_shop",'
                     f'mode="enforce"}} {Exposition.value}\n')
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@unittest.skipUnless(os.access(PROMETHEUS, os.X_OK), "prometheus not installed: run scripts/setup.sh")
class CollectTest(unittest.TestCase):
    def test_the_count_from_zero_takes_in_what_came_before_the_first_scrape_and_bridges_failed_scrapes(self):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exposition)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        Exposition.value = None
        with tempfile.TemporaryDirectory() as d:
            (port,) = free_ports.free_ports(1)
            os.mkdir(os.path.join(d, "prometheus"))
            cfg = prometheus.write_config(os.path.join(d, "prometheus"), f"127.0.0.1:{server.server_port}", "t")
            proc = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={d}/prometheus/data",
                                     f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                with open(os.path.join(d, "ports"), "w") as f:
                    f.write(f"ops=1\nprometheus={port}\n")
                prometheus.wait_up(port)
                start = time.time()
                # 40 denials before the series' first scrape, then 40 more a second, and
                # two seconds of failed scrapes in between (the series goes stale).
                for v in (40, 80):
                    time.sleep(1.0)
                    Exposition.value = v
                time.sleep(1.0)
                Exposition.failing = True
                time.sleep(2.0)
                Exposition.value = 120
                Exposition.failing = False
                time.sleep(1.0)
                end = time.time()
                with open(os.path.join(d, "access.log"), "w") as f:
                    f.writelines(json.dumps({"u": "/checkout.php?shop=a", "s": 503, "us": "503"}) + "\n"
                                 for _ in range(120))
                r = prometheus.collect(d, start, end)
            finally:
                proc.terminate()
                proc.wait(10)
                server.shutdown()
        self.assertEqual(r["up_min"], 0.0, "the scrapes that failed")
        self.assertEqual(r["up_max"], 1.0)
        self.assertEqual(r["scrapes"] - r["scrapes_up"], 2, "two scrapes in the 2 s of failures")
        self.assertEqual(r["series"]["checkout_guard_decisions_total"], 1)
        self.assertEqual(r["denied_increase"], 120.0, r["queries"]["denied_increase"])
        self.assertEqual(r["denied_at_end"], 120.0)
        self.assertEqual(r["own"]["limited_503"], 120)
        self.assertEqual(r["diff_pct"]["denied_increase"], 0.0)
        self.assertEqual(list(r["denied_by_reason"]), ["hot_shop"])
        self.assertIn("hot_shop", r["rate_by_reason"])


if __name__ == "__main__":
    unittest.main()
