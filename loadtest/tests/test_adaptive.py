"""The adaptive budget's load test: the mock provider's moving payment limit
(loadtest/provider.py) and the report (loadtest/adaptive_report.py) on runs made up here."""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "loadtest")]

import adaptive_report  # noqa: E402
import provider  # noqa: E402


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


class ScheduleTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(provider.parse_schedule("0:27,15:18,30:45"), [(0.0, 27.0), (15.0, 18.0), (30.0, 45.0)])
        self.assertEqual(provider.parse_schedule("0:1.5"), [(0.0, 1.5)])

    def test_bad_schedules_are_named(self):
        for spec, words in (("5:3", "must start at 0"), ("0:3,x:2", "'x:2' is not SECONDS:RATE"),
                            ("0:3,2:0", "'2:0' is not SECONDS:RATE"), ("0:3,2:1,2:4", "'2:4' is not after"),
                            ("0:3,1", "'1' is not SECONDS:RATE")):
            with self.assertRaises(ValueError) as e:
                provider.parse_schedule(spec)
            self.assertIn(words, str(e.exception))
            self.assertIn("--charges-schedule", str(e.exception))

    def test_options_refuse_bad_values(self):
        for argv in (["1", "--retry-after-share", "1.5"], ["1", "--charges-burst", "0"], ["1", "--retry-after", "0"],
                     ["1", "--charges-schedule", "3:1"]):
            with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
                provider.options(argv)


class ChargeLimitTest(unittest.TestCase):
    def test_a_full_bucket_then_the_rate_in_force(self):
        clock = Clock()
        lim = provider.ChargeLimit([(0, 2.0), (10, 1.0)], burst=3, clock=clock)
        self.assertEqual([lim.take()[0] for _ in range(4)], [True, True, True, False])
        clock.t += 1.0   # 2 tokens at 2/s
        self.assertEqual([lim.take()[0] for _ in range(3)], [True, True, False])
        self.assertEqual(lim.take()[1], 2.0)

    def test_refill_follows_each_piece_of_the_schedule(self):
        clock = Clock()
        lim = provider.ChargeLimit([(0, 10.0), (2, 1.0)], burst=100, clock=clock)
        lim.level = 0
        clock.t += 4.0   # 2 s at 10/s, then 2 s at 1/s: 22 tokens, not 4 x 1 nor 4 x 10
        lim._refill(clock.t)
        self.assertAlmostEqual(lim.level, 22.0)
        self.assertEqual(lim.rate_at(clock.t), 1.0)

    def test_a_change_keeps_the_level(self):
        # A change neither fills the bucket nor empties it: only the refill rate changes.
        clock = Clock()
        lim = provider.ChargeLimit([(0, 1.0), (1, 50.0)], burst=100, clock=clock)
        lim.level = 0
        clock.t += 1.0
        lim._refill(clock.t)
        self.assertAlmostEqual(lim.level, 1.0)
        clock.t += 0.1
        lim._refill(clock.t)
        self.assertAlmostEqual(lim.level, 6.0)

    def test_restart_starts_the_clock_with_a_full_bucket(self):
        clock = Clock()
        lim = provider.ChargeLimit([(0, 5.0), (3, 1.0)], burst=2, clock=clock)
        clock.t += 10
        self.assertEqual(lim.rate_at(clock.t), 1.0)
        lim.level = 0
        lim.restart()
        self.assertEqual((lim.level, lim.rate_at(clock.t)), (2, 5.0))


class RecoveryTest(unittest.TestCase):
    def test_first_second_from_which_the_mean_stays_within(self):
        admitted = [18] * 10 + [30, 36, 42, 45, 44, 46, 45, 45]
        # 3 s means from second 10: 36, 41, 43.7, 45, 45, 45.3 -> within 10% of 45 from 11.
        self.assertEqual(adaptive_report.recovery(admitted, 10, 45.0), 1)

    def test_a_dip_later_moves_it(self):
        admitted = [45, 45, 45, 30, 30, 45, 45, 45, 45]
        self.assertEqual(adaptive_report.recovery(admitted, 0, 45.0), 5)

    def test_never_and_too_short(self):
        self.assertIsNone(adaptive_report.recovery([20] * 10, 0, 45.0))
        self.assertIsNone(adaptive_report.recovery([45, 45], 0, 45.0))
        self.assertEqual(adaptive_report.recovery([45] * 5, 0, 45.0), 0)


def write_run(root, name, adaptive, rates, t0=1.8e9, duration=30, phase=10, configured=45.0, ordinary_ok=0.9):
    """A run directory as scripts/loadtest.sh adaptive leaves it: `rates` are the calls a
    second let through to the provider, as (admitted, answered 429) per second."""
    d = os.path.join(root, f"adaptive-{name}")
    os.makedirs(d)
    schedule = f"0:{0.6 * configured:g},{phase}:{0.4 * configured:g},{2 * phase}:{configured:g}"
    for f, data in (("adaptive.json", {"run": name, "adaptive": adaptive, "recover_seconds": 10,
                                       "configured_global_rate": configured, "schedule": schedule,
                                       "phase_seconds": phase, "provider_burst": 20, "retry_after_share": 0,
                                       "retry_after": 1}),
                    ("run.json", {"cpu_busy": 0.5, "duration": duration, "hot_shops": "flash-1", "locust_workers": 0,
                                  "ordinary_users": 20, "hot_users": 40})):
        with open(os.path.join(d, f), "w") as out:
            json.dump(data, out)
    steps = [[float(a), float(r)] for a, r in (x.split(":") for x in schedule.split(","))]
    with open(os.path.join(d, "charges.jsonl"), "w") as f:
        f.write(json.dumps({"t": t0 - 1, "s": 200, "limit": steps[0][1], "ra": None}) + "\n")   # the probe
        f.write(json.dumps({"event": "start", "t": t0, "schedule": steps, "burst": 20}) + "\n")
        for k, (n, n429) in enumerate(rates):
            for i in range(n):
                f.write(json.dumps({"t": t0 + k + i / n, "s": 429 if i < n429 else 200, "limit": 0, "ra": None}) + "\n")
        f.write(json.dumps({"t": t0 + duration - 0.05, "s": 200, "limit": 0, "ra": None}) + "\n")
    with open(os.path.join(d, "access.log"), "w") as f:
        f.write(json.dumps({"t": t0 - 1, "s": 200, "rt": 0.1, "m": "GET", "u": "/checkout.php?shop=probe", "us": "200", "w": ""}) + "\n")
        for i in range(100):
            code = 200 if i < ordinary_ok * 100 else 502
            f.write(json.dumps({"t": t0 + i * 0.25, "s": code, "rt": 0.08, "m": "GET",
                                "u": f"/checkout.php?shop=shop-{i % 20:02d}", "us": str(code), "w": ""}) + "\n")
        f.write(json.dumps({"t": t0 + 1, "s": 200, "rt": 0.08, "m": "GET", "u": "/checkout.php?shop=flash-1", "us": "200", "w": ""}) + "\n")
    with open(os.path.join(d, "events.jsonl"), "w") as f:
        f.write(json.dumps({"eventType": "CheckoutStep", "step": "limited", "reason": "global", "shop.id": "shop-01"}) + "\n")
        f.write(json.dumps({"eventType": "CheckoutStep", "step": "limited", "reason": "global", "shop.id": "probe"}) + "\n")
        if adaptive == "on":
            f.write(json.dumps({"eventType": "RateLimitAdapt", "from": 1.0, "to": 0.7, "why": "429"}) + "\n")
    open(os.path.join(d, "provider.log"), "w").close()
    return d


# 10 s phases at 27, 18 and 45/s (60%, 40%, 100% of 45).
OFF = [(45, 18)] * 10 + [(45, 27)] * 10 + [(45, 0)] * 10
ON = [(40, 13)] * 3 + [(27, 1)] * 7 + [(24, 6)] * 2 + [(18, 1)] * 8 + [(25, 0), (35, 0), (44, 0)] + [(45, 0)] * 7


class ReportTest(unittest.TestCase):
    def report(self, on_setting="on", on=ON, off=OFF):
        root = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(root))
        write_run(root, "off", "off", off)
        write_run(root, "on", on_setting, on, ordinary_ok=0.8)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = adaptive_report.main(root)
        res = adaptive_report.load_json(os.path.join(root, "report.json"))
        for f in ("report.md", "chart.png", "chart.svg"):
            self.assertGreater(os.path.getsize(os.path.join(root, f)), 0, f)
        return rc, res, out.getvalue()

    def test_phases_shares_recovery_and_checks(self):
        rc, res, out = self.report()
        self.assertEqual(rc, 0, out)
        off, on = res["runs"]["off"], res["runs"]["on"]
        self.assertEqual(off["seconds"], 29)   # the last second, cut short, left out
        self.assertEqual([p["limit"] for p in off["phases"]], [27.0, 18.0, 45.0])
        self.assertEqual([p["window_s"] for p in off["phases"]], [[5.0, 10], [15.0, 20], [25.0, 29]])
        self.assertEqual([p["admitted_per_s"] for p in off["phases"]], [45.0, 45.0, 45.0])
        self.assertEqual([p["within"] for p in off["phases"]], [False, False, True])
        self.assertEqual([p["admitted_per_s"] for p in on["phases"]], [27.0, 18.0, 45.0])
        self.assertTrue(all(p["within"] for p in on["phases"]))
        self.assertEqual(off["calls"], 45 * 30 + 1)   # the probe before the start left out
        self.assertAlmostEqual(off["share_429"], (180 + 270) / 1351, places=4)
        self.assertLess(on["share_429"], off["share_429"])
        self.assertEqual(on["recovery_s"], 1)   # 3 s means 34.7, then 41.3 (>= 40.5)
        self.assertEqual(off["recovery_s"], 0)
        self.assertEqual((off["ordinary"]["checkouts"], off["ordinary"]["ok"]), (100, 0.9))
        self.assertEqual(on["ordinary"]["ok"], 0.8)
        self.assertEqual(off["limited_reasons"], {"global": 1})
        self.assertEqual((off["adapt_events"], on["adapt_events"]), (0, 1))
        self.assertTrue(res["adaptive_judged"])
        self.assertTrue(all(c["holds"] for c in res["checks"]), res["checks"])
        self.assertIn("| adaptive-on | 2 | 18/s (40%) | 15-20 | 18.0 | +0.0% | yes |", out)
        self.assertIn("-10.0 pts", out)

    def test_a_budget_that_does_not_follow_fails(self):
        rc, res, out = self.report(on=OFF)
        self.assertEqual(rc, 1)
        failed = [c["check"] for c in res["checks"] if not c["holds"]]
        self.assertEqual(len(failed), 3, failed)   # the 429 share and phases 1 and 2
        self.assertIn("3 check(s) failed.", out)

    def test_adaptive_not_set_judges_only_the_harness(self):
        rc, res, out = self.report(on_setting="off", on=OFF)
        self.assertEqual(rc, 0, out)
        self.assertFalse(res["adaptive_judged"])
        self.assertIn("not judged", out)
        self.assertIn("adaptation's checks not judged", out)

    def test_a_harness_that_shows_nothing_fails_even_unjudged(self):
        # The demand never passes the real limit: the off run shows no problem to adapt to.
        calm = [(15, 0)] * 30
        rc, res, _ = self.report(on_setting="off", on=calm, off=calm)
        self.assertEqual(rc, 1)
        self.assertEqual([c["holds"] for c in res["checks"] if c["judged"]], [False, False])


if __name__ == "__main__":
    unittest.main()
