"""The slow provider's load test: the mock provider's bounded concurrency and incident
(loadtest/provider.py) and the report (loadtest/slow_report.py) on runs made up here."""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest
from unittest import mock

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "loadtest")]

import provider  # noqa: E402
import slow_report  # noqa: E402


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


class ServersTest(unittest.TestCase):
    def test_past_c_in_flight_a_charge_queues_first_come_first_served(self):
        s = provider.Servers(2)
        self.assertEqual([s.admit(0.0, 1.0) for _ in range(5)], [(0.0, 1.0), (0.0, 1.0), (1.0, 2.0), (1.0, 2.0), (2.0, 3.0)])
        self.assertEqual(s.busy(0.5), 2)
        self.assertEqual(s.busy(2.5), 1)
        self.assertEqual(s.busy(3.0), 0)

    def test_a_free_server_serves_at_once(self):
        s = provider.Servers(2)
        s.admit(0.0, 5.0)
        self.assertEqual(s.admit(1.0, 0.04), (1.0, 1.04))   # one of two busy: no wait
        self.assertEqual(s.admit(1.1, 0.5), (1.1, 1.6))     # the second server was free again
        self.assertEqual(s.admit(1.2, 0.5), (1.6, 2.1))     # both busy: waits for the earlier end

    def test_latency_grows_with_the_queue(self):
        # 10 charges of 0.1 s at once on 4 servers: the last waits 0.2 s (two rounds).
        s = provider.Servers(4)
        ends = [s.admit(0.0, 0.1)[1] for _ in range(10)]
        self.assertAlmostEqual(max(ends), 0.3)

    def test_no_bound(self):
        s = provider.Servers(0)
        self.assertEqual([s.admit(0.0, 1.0) for _ in range(100)][-1], (0.0, 1.0))
        self.assertEqual(s.busy(0.5), 0)


class IncidentTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(provider.parse_incident("8:16:1.5"), (8.0, 16.0, 1.5))

    def test_bad_incidents_are_named(self):
        for spec, words in (("8:16", "is not START:END:SECONDS"), ("a:2:1", "is not START:END:SECONDS"),
                            ("8:8:1", "0 <= START < END"), ("1:2:0", "SECONDS above 0"), ("-1:2:1", "0 <= START")):
            with self.assertRaises(ValueError) as e:
                provider.parse_incident(spec)
            self.assertIn(words, str(e.exception))
            self.assertIn("--incident", str(e.exception))

    def test_options_from_the_environment_and_refused_values(self):
        with mock.patch.dict(os.environ, {"PROVIDER_CONCURRENCY": "16", "PROVIDER_INCIDENT": "8:16:1.5"}):
            opts = provider.options(["1"])
        self.assertEqual((opts.concurrency, opts.incident), (16, "8:16:1.5"))
        with mock.patch.dict(os.environ, {"PROVIDER_CONCURRENCY": "16"}):
            self.assertEqual(provider.options(["1", "--concurrency", "3"]).concurrency, 3)   # the option wins
        with mock.patch.dict(os.environ, {}, clear=True):
            opts = provider.options(["1"])
        self.assertEqual((opts.concurrency, opts.incident), (0, ""))
        for argv, env in ((["1", "--concurrency", "-1"], {}), (["1", "--concurrency", "x"], {}),
                          (["1", "--incident", "3:1:1"], {}), (["1"], {"PROVIDER_INCIDENT": "x"})):
            err = io.StringIO()
            with mock.patch.dict(os.environ, env), contextlib.redirect_stderr(err), self.assertRaises(SystemExit):
                provider.options(argv)
            self.assertRegex(err.getvalue(), "concurrency|incident")


class SlowProviderTest(unittest.TestCase):
    def provider(self, *args):
        clock = Clock()
        with mock.patch.dict(os.environ, {}, clear=True):
            p = provider.Provider(provider.options(["1", "--seed", "7", *args]), clock=clock)
        return p, clock

    def test_unset_keeps_the_provider_as_it_was(self):
        p, _ = self.provider()
        self.assertFalse(p.slow)
        self.assertEqual(p.charge()[0], 200)
        self.assertIn("error", p.arm())   # nothing to arm: answered 404

    def test_the_incident_counts_from_the_first_charge(self):
        p, clock = self.provider("--incident", "10:20:2")
        waits = []
        for at in (0, 5, 9.9, 10, 15, 19.9, 20, 30):
            clock.t = 1000.0 + at
            p.charge()
            delay, line = p.serve(clock.t, "s")
            waits.append((line["incident"], delay))
        self.assertEqual([w[0] for w in waits], [False, False, False, True, True, True, False, False])
        for incident, delay in waits:
            if incident:
                self.assertTrue(2 * 0.5 <= delay <= 2 * provider.INCIDENT_CAP, delay)
            else:
                self.assertLessEqual(delay, 1.0)

    def test_arm_starts_the_clock_with_the_next_charge(self):
        p, clock = self.provider("--incident", "1:2:2")
        p.charge()
        p.serve(clock.t, "probe")
        clock.t += 100
        self.assertEqual(p.arm(), {"armed": True})
        clock.t += 50
        p.charge()   # the load's first charge: the clock starts here
        self.assertEqual(p.started, clock.t)
        clock.t += 1.5
        self.assertTrue(p.serve(clock.t, "s")[1]["incident"])

    def test_queueing_on_top_of_the_incident(self):
        p, clock = self.provider("--concurrency", "2", "--incident", "0:60:1")
        lines = [p.serve(clock.t, f"s{i}")[1] for i in range(4)]
        self.assertEqual([x["busy"] for x in lines], [0, 1, 2, 2])
        self.assertEqual([x["wait"] > 0.5 for x in lines], [False, False, True, True])
        self.assertEqual(lines[0]["shop"], "s0")


def write_run(root, name, *, in_flight="", ordinary=None, hot_calls=(), pool_full=(), fail_open=(), t0=1.8e9, duration=24):
    """A run directory as scripts/loadtest.sh slow-provider leaves it. ordinary: [(start s,
    status, ms)]; hot_calls: [(start s, seconds)] payment calls of flash-1; pool_full:
    [(from s, to s)] when every worker of 24 is busy (sampled every 0.2 s); fail_open: [(start
    s, seconds)] payment calls of flash-1 let through by a decision that failed open."""
    d = os.path.join(root, f"slow-{name}")
    os.makedirs(d)
    hot = "" if name == "baseline" else "flash-1"
    with open(os.path.join(d, "slow.json"), "w") as f:
        json.dump({"run": name, "scenario": "flood", "limiter": "on", "in_flight": in_flight, "concurrency": 16,
                   "incident": "8:16:1.5", "fpm_workers": 24}, f)
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump({"cpu_busy": 0.5, "duration": duration, "hot_shops": hot, "ordinary_users": 10, "hot_users": 40}, f)
    with open(os.path.join(d, "calls.jsonl"), "w") as f:
        f.write(json.dumps({"event": "start", "t": t0 - 1, "concurrency": 16, "incident": [8, 16, 1.5]}) + "\n")
        f.write(json.dumps({"t": t0 - 1, "shop": "probe", "wait": 0, "service": 0.04, "busy": 0, "incident": False}) + "\n")
        f.write(json.dumps({"event": "start", "t": t0, "concurrency": 16, "incident": [8, 16, 1.5]}) + "\n")
        f.write(json.dumps({"t": t0 + 9, "shop": "flash-1", "wait": 0.7, "service": 1.5, "busy": 16, "incident": True}) + "\n")
    with open(os.path.join(d, "access.log"), "w") as f:
        f.write(json.dumps({"t": t0 - 0.9, "s": 200, "rt": 0.1, "u": "/checkout.php?shop=probe&channel=card"}) + "\n")
        for start, status, ms in ordinary:
            f.write(json.dumps({"t": t0 + start + ms / 1000, "s": status, "rt": ms / 1000,
                                "u": "/checkout.php?shop=shop-03&item=item-1&channel=card"}) + "\n")
        for start, secs in hot_calls:
            f.write(json.dumps({"t": t0 + start + secs, "s": 200, "rt": secs, "u": "/checkout.php?shop=flash-1&item=popular"}) + "\n")
        f.write(json.dumps({"t": t0 + duration, "s": 499, "rt": 1, "u": "/checkout.php?shop=shop-01"}) + "\n")
    with open(os.path.join(d, "events.jsonl"), "w") as f:
        for start, secs in hot_calls:
            f.write(json.dumps({"eventType": "ExternalApiCall", "timestamp": (t0 + start) * 1000, "api": "payment",
                                "duration.ms": secs * 1000, "shop.id": "flash-1"}) + "\n")
        for start, secs in fail_open:
            f.write(json.dumps({"eventType": "RateLimitDecision", "timestamp": (t0 + start) * 1000, "shop.id": "flash-1",
                                "reason": "unavailable", "allowed": True}) + "\n")
            f.write(json.dumps({"eventType": "ExternalApiCall", "timestamp": (t0 + start) * 1000, "api": "payment",
                                "duration.ms": secs * 1000, "shop.id": "flash-1"}) + "\n")
        f.write(json.dumps({"eventType": "ExternalApiCall", "timestamp": (t0 + 9) * 1000, "api": "payment",
                            "duration.ms": 3000, "shop.id": "shop-03", "error.type": "ConnectException",
                            "http.response.status_code": 0}) + "\n")
        f.write(json.dumps({"eventType": "ExternalApiCall", "timestamp": (t0 + 1) * 1000, "api": "payment",   # not a timeout
                            "duration.ms": 5, "shop.id": "shop-03", "error.type": "429", "http.response.status_code": 429}) + "\n")
        f.write(json.dumps({"eventType": "CheckoutStep", "step": "limited", "reason": "in_flight_hot_shop",
                            "shop.id": "flash-1"}) + "\n")
    if in_flight:
        with open(os.path.join(d, "lease-stats.json"), "w") as f:
            json.dump({"stats": {"released": 30, "hold_us": 45_000_000, "leaked": 30}, "live": {"global": 0}}, f)
    with open(os.path.join(d, "provider.log"), "w") as f:
        for s in (200, 429, 499):
            f.write(json.dumps({"t": t0 + 1, "s": s, "rt": 0.01, "u": "/v1/charges"}) + "\n")
    with open(os.path.join(d, "fpm-status.jsonl"), "w") as f:
        for k in range(duration * 5):
            t = k / 5
            full = any(a <= t < b for a, b in pool_full)
            f.write(json.dumps({"t": t0 + t, "active": 24 if full else 5, "idle": 0 if full else 19, "total": 24,
                                "queue": 20 if full else 0}) + "\n")
    return d


def ordinary_load(normal_ms=80, incident_ms=1800, failed_in_incident=0):
    """100 ordinary checkouts, 25 of them started in the incident (8 to 16 s)."""
    rows = [(i * 0.1 if i < 40 else 16 + (i - 40) * 0.2, 200, normal_ms) for i in range(75)]
    rows += [(8 + i * 0.3, 502 if i < failed_in_incident else 200, incident_ms) for i in range(25)]
    return rows


class ReportTest(unittest.TestCase):
    def report(self, inflight_spec="global=16,hot_shop=6", inflight_ms=1800, inflight_hot=None, fail_open=()):
        root = tempfile.mkdtemp()
        self.addCleanup(lambda: shutil.rmtree(root))
        flood = [(8 + i * 0.1, 1.5) for i in range(40)]   # 40 calls of 1.5 s from 8 s: up to 15 at once
        # 6 at once; each next one's timestamp is 0.4 ms before its predecessor's end (a
        # lease released and taken again within a millisecond): not an overlap at the
        # events' resolution (whole milliseconds).
        held = [(8 + (i // 6) * 1.4996 + 0.01 * (i % 6), 1.5) for i in range(30)]
        write_run(root, "baseline", ordinary=ordinary_load())
        write_run(root, "off", ordinary=ordinary_load(incident_ms=4000, failed_in_incident=10), hot_calls=flood,
                  pool_full=[(9, 17)])
        write_run(root, "buckets", ordinary=ordinary_load(incident_ms=4500), hot_calls=flood, pool_full=[(9, 17)])
        write_run(root, "inflight", in_flight=inflight_spec, ordinary=ordinary_load(incident_ms=inflight_ms),
                  hot_calls=held if inflight_hot is None else inflight_hot, fail_open=fail_open)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = slow_report.main(root)
        res = slow_report.load_json(os.path.join(root, "report.json"))
        for f in ("report.md", "chart.png", "chart.svg"):
            self.assertGreater(os.path.getsize(os.path.join(root, f)), 0, f)
        return rc, res, out.getvalue()

    def test_runs_figures_and_checks(self):
        rc, res, out = self.report()
        self.assertEqual(rc, 0, out)
        runs = res["runs"]
        base, buckets, inflight = runs["baseline"], runs["buckets"], runs["inflight"]
        self.assertEqual(base["ordinary"]["checkouts"], 100)   # the probe and the run's cut 499 left out
        self.assertEqual(base["ordinary"]["ok"], 1.0)
        self.assertEqual((base["ordinary"]["p50_ms"], base["ordinary"]["p95_ms"]), (80, 1800))
        self.assertEqual(base["ordinary_incident"]["checkouts"], 25)
        self.assertEqual(runs["off"]["ordinary"]["ok"], 0.9)
        self.assertEqual(buckets["hot"]["max_in_flight"], 15)
        self.assertEqual(buckets["hot"]["admitted"], 40)
        self.assertEqual(buckets["hot"]["admitted_per_s_incident"], 5.0)
        self.assertEqual(inflight["hot"]["max_in_flight"], 6)
        self.assertEqual(buckets["fpm"]["full_s_incident"], 7.0)   # 9 to 16 s, sampled every 0.2 s
        self.assertEqual(buckets["fpm"]["max_queue"], 20)
        self.assertEqual(inflight["fpm"]["full_s"], 0)
        self.assertEqual((buckets["provider"]["429"], buckets["provider"]["499"], buckets["timeouts"]), (1, 1, 1))
        self.assertEqual(buckets["provider"]["max_wait_s"], 0.7)
        self.assertEqual(inflight["limited_reasons"], {"in_flight_hot_shop": 1})
        self.assertEqual(inflight["limited_reasons_ordinary"], {})
        self.assertIn("- slow-inflight: in_flight_hot_shop: 1 (of them ordinary shops': none)", out)
        self.assertTrue(res["in_flight_judged"])
        self.assertTrue(all(c["holds"] for c in res["checks"]), res["checks"])
        self.assertIn("| slow-buckets | buckets | 100 | 100.0% |", out)
        self.assertIn("admitted at most 4.0/s then", out)   # Little's law: 6 / 1.5 s
        self.assertIn("30 released, of them 30 at the request's end (RSHUTDOWN: not released by the client), "
                      "held 1.500 s on average; 0 expired; still live: global 0.", out)

    def test_in_flight_that_does_not_hold_fails(self):
        flood = [(8 + i * 0.1, 1.5) for i in range(40)]
        rc, res, out = self.report(inflight_ms=4500, inflight_hot=flood)
        self.assertEqual(rc, 1)
        failed = [c["check"] for c in res["checks"] if not c["holds"]]
        # p95 over the run and in the incident (2.5x), the hot shop's share (15 at once > 6)
        # fail; success holds, and so does global (15 of the hot shop + 1 ordinary = 16).
        self.assertEqual(len(failed), 3, failed)
        self.assertEqual([c["holds"] for c in res["checks"] if c["judged"]][3:], [True, False, False, False, True])
        self.assertIn("3 check(s) failed.", out)

    def test_in_flight_not_set_judges_only_the_harness(self):
        rc, res, out = self.report(inflight_spec="", inflight_ms=4500)
        self.assertEqual(rc, 0, out)
        self.assertFalse(res["in_flight_judged"])
        self.assertIn("the in-flight checks not judged", out)


    def test_a_call_let_through_failing_open_is_not_judged(self):
        rc, res, out = self.report(fail_open=[(9.0, 1.0)])
        self.assertEqual(rc, 0, out)
        inflight = res["runs"]["inflight"]
        self.assertEqual((inflight["fail_open"], inflight["fail_open_unmatched"]), (1, 0))
        self.assertEqual((inflight["hot"]["max_in_flight"], inflight["hot"]["max_in_flight_with_fail_open"]), (6, 7))
        self.assertIn("at most 6 at once, 6 allowed; 7 with the 1 call(s) let through failing open", out)


class OverlapTest(unittest.TestCase):
    def test_most_open_at_once(self):
        peak, bins = slow_report.max_overlap([(0, 1), (0.5, 1.5), (1, 2), (3, 3.2)], 0, 4, 1)
        self.assertEqual(peak, 2)
        self.assertEqual(bins, [2, 2, 1, 1])   # (0,1) ends when (1,2) starts: not counted together

    def test_a_long_interval_spans_bins_without_edges(self):
        self.assertEqual(slow_report.max_overlap([(0.2, 3.5)], 0, 4, 1), (1, [1, 1, 1, 1]))
        self.assertEqual(slow_report.max_overlap([], 0, 2, 1), (0, [0, 0]))


if __name__ == "__main__":
    unittest.main()
