"""The verdict's section on waiting for tokens (loadtest/wait_report.py), the access-log
fields it reads (verdict.analyse) and the php-fpm status sampler's lines."""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "loadtest")]

import fpm_status  # noqa: E402
import verdict  # noqa: E402
import wait_report  # noqa: E402


def sample(active, total=24, queue=0):
    return {"t": 0, "active": active, "idle": total - active, "total": total, "queue": queue,
            "max_active": active, "max_queue": queue, "max_children_reached": 0}


def run(ord_ok=90, ord_503=10, ord_wait=0.0, hot_ok=25, hot_503=75, hot_wait=0.0, busy=6, pay_429=0,
        max_wait=0.0, hot_max_wait=0.0, duration=10, ord_ms=80.0, shed=0):
    """An analysed run (verdict.analyse's shape) with the given counts; ordinary shops'
    checkouts each take ord_ms, and those paid waited ord_wait; hot ones hot_wait."""
    reqs = []
    for i in range(ord_ok):
        reqs.append((i * 0.1, 200, ord_ms, "shop-%02d" % (i % 20), ord_wait, "200"))
    for i in range(ord_503):
        reqs.append((i * 0.1, 503, 5.0, "shop-01", 0.0, "" if i < shed else "503"))
    for i in range(hot_ok):
        reqs.append((i * 0.1, 200, 70.0, "flash-1", hot_wait, "200"))
    for i in range(hot_503):
        reqs.append((i * 0.1, 503, 5.0, "flash-1", 0.0, "503"))
    return {
        "hot": {"flash-1"},
        "meta": {"duration": duration, "max_wait": max_wait, "hot_max_wait": hot_max_wait, "cpu_busy": 0.5,
                 "ordinary_users": 16, "hot_users": 40, "hot_shops": "flash-1", "fpm_workers": 24},
        "reqs": reqs,
        "payment_429": pay_429,
        "hot_rates": {"flash-1": (hot_ok, duration, hot_ok / duration)},
        "cut": 0,
        "fpm": [sample(busy) for _ in range(10)],
    }


class WaitsAndPoolTest(unittest.TestCase):
    def test_waits_count_only_checkouts_that_waited(self):
        w = wait_report.waits([0.0, 0.0, 0.1, 0.2, 0.3, 0.4])
        self.assertEqual(w["n"], 4)
        self.assertAlmostEqual(w["mean"], 0.25)
        self.assertEqual((w["p50"], w["p95"], w["max"]), (0.2, 0.4, 0.4))
        self.assertEqual(wait_report.waits([0.0])["n"], 0)

    def test_pool_full_share_and_queue(self):
        p = wait_report.pool([sample(24, queue=5), sample(24, queue=19), sample(12), sample(6)])
        self.assertEqual(p["size"], 24)
        self.assertEqual(p["full_share"], 0.5)
        self.assertEqual((p["busy_max"], p["queue_max"]), (24, 19))
        self.assertEqual(p["busy_mean"], 16.5)
        self.assertEqual(wait_report.pool([])["samples"], 0)

    def test_asleep_is_littles_law(self):
        # 100 ordinary checkouts waited 0.2 s each in 10 s: 10/s x 0.2 s = 2 workers asleep.
        s = wait_report.stats(run(ord_ok=100, ord_wait=0.2, duration=10))
        self.assertAlmostEqual(s["asleep"], 2.0)
        self.assertEqual((s["waited_ord"], s["waited_hot"]), (100, 0))

    def test_sheds_are_the_503s_nginx_answered_itself(self):
        s = wait_report.stats(run(ord_503=10, shed=4))
        self.assertEqual((s["ord_503"], s["ord_shed"]), (10, 4))


class SectionTest(unittest.TestCase):
    def runs(self, **over):
        runs = {
            "flood-nowait": run(ord_ok=90, ord_503=10),
            "flood-wait": run(ord_ok=100, ord_503=0, ord_wait=0.02, max_wait=0.2, ord_ms=95.0),
            "flood-starve": run(ord_ok=60, ord_503=0, ord_wait=0.8, hot_wait=0.8, busy=24, max_wait=2,
                                hot_max_wait=2, ord_ms=450.0),
        }
        runs.update(over)
        return runs

    def test_a_short_wait_that_avoids_503s_and_a_long_one_that_starves_pass(self):
        lines, failures = wait_report.section(self.runs())
        self.assertEqual(failures, [])
        text = "\n".join(lines)
        self.assertIn("flood-wait vs flood-nowait: ordinary 503s 10 -> 0 (10 avoided, 100%)", text)
        self.assertIn("ordinary p50 80 -> 95 ms", text)
        self.assertRegex(text, r"flood-starve\s+2/2s")
        self.assertRegex(text, r"flood-starve\s+60/25\s+800ms\s+800ms\s+800ms")

    def test_a_payment_429_in_any_run_fails(self):
        _, failures = wait_report.section(self.runs(**{"flood-wait": run(ord_503=0, ord_wait=0.02, pay_429=1)}))
        self.assertEqual(len(failures), 1)
        self.assertIn("flood-wait: 1 payment 429s", failures[0])

    def test_a_twin_without_ordinary_503s_fails(self):
        _, failures = wait_report.section(self.runs(**{"flood-nowait": run(ord_503=0)}))
        self.assertTrue(any("nothing for waiting to avoid" in f for f in failures), failures)

    def test_a_short_wait_that_avoids_nothing_or_fills_the_pool_fails(self):
        _, failures = wait_report.section(self.runs(**{"flood-wait": run(ord_503=10, busy=24)}))
        self.assertEqual(len(failures), 2, failures)
        self.assertIn("waiting avoided no ordinary 503s", failures[0])
        self.assertIn("the short wait starved the pool", failures[1])

    def test_a_long_wait_that_does_not_starve_fails(self):
        _, failures = wait_report.section(self.runs(**{"flood-starve": run(ord_503=0, busy=12)}))
        self.assertEqual(len(failures), 1)
        self.assertIn("did not starve the pool", failures[0])

    def test_no_waiting_runs_no_section(self):
        self.assertEqual(wait_report.section({}), ([], []))


class VerdictReadsTheWaitTest(unittest.TestCase):
    def write_run(self, root, name, access, fpm, meta):
        d = os.path.join(root, name)
        os.makedirs(d)
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump(meta, f)
        with open(os.path.join(d, "access.log"), "w") as f:
            f.writelines(json.dumps(a) + "\n" for a in access)
        with open(os.path.join(d, "fpm-status.jsonl"), "w") as f:
            f.writelines(json.dumps(s) + "\n" for s in fpm)
        open(os.path.join(d, "provider.log"), "w").close()
        return d

    def test_analyse_reads_waited_upstream_status_and_cut_requests(self):
        with tempfile.TemporaryDirectory() as root:
            d = self.write_run(root, "flood-wait-on", [
                {"t": 1.0, "s": 200, "rt": 0.1, "m": "GET", "u": "/checkout.php?shop=s1", "us": "200", "w": "0.1500"},
                {"t": 1.1, "s": 503, "rt": 0.0, "m": "GET", "u": "/checkout.php?shop=s2", "us": "", "w": ""},
                {"t": 1.2, "s": 499, "rt": 0.3, "m": "GET", "u": "/checkout.php?shop=s3", "us": "", "w": ""},
                # A log from before "us" and "w" were written.
                {"t": 1.3, "s": 200, "rt": 0.1, "m": "GET", "u": "/checkout.php?shop=s4"},
            ], [sample(3)], {"cpu_busy": 0.2, "duration": 5, "hot_shops": "", "locust_workers": 0})
            r = verdict.analyse(d)
        self.assertEqual([q[4:] for q in r["reqs"]], [(0.15, "200"), (0.0, ""), (0.0, "-")])
        self.assertEqual(r["cut"], 1)
        self.assertEqual(r["fpm"][0]["active"], 3)

    def test_a_wait_only_results_dir_needs_no_baseline(self):
        with tempfile.TemporaryDirectory() as root:
            for name, code, w in (("flood-nowait-on", 503, ""), ("flood-wait-on", 200, "0.0500")):
                self.write_run(root, name, [
                    {"t": 1.0, "s": code, "rt": 0.1, "m": "GET", "u": "/checkout.php?shop=s1", "us": str(code), "w": w},
                ], [sample(4)], {"cpu_busy": 0.2, "duration": 5, "hot_shops": "flash-1", "locust_workers": 0,
                                 "max_wait": 0.2 if w else 0, "hot_max_wait": 0})
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = verdict.main(root)
        self.assertEqual(rc, 0, out.getvalue())
        self.assertIn("flood-wait vs flood-nowait: ordinary 503s 1 -> 0 (1 avoided, 100%)", out.getvalue())
        self.assertNotIn("baseline", out.getvalue())

    def test_an_empty_results_dir_is_a_usage_error(self):
        with tempfile.TemporaryDirectory() as root, contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(verdict.main(root), 2)


class FpmStatusTest(unittest.TestCase):
    def test_a_sample_names_php_fpms_fields(self):
        status = {"pool": "checkout", "listen queue": 3, "max listen queue": 9, "idle processes": 4,
                  "active processes": 20, "total processes": 24, "max active processes": 24,
                  "max children reached": 1}
        self.assertEqual(fpm_status.sample(status, 12.3456), {
            "t": 12.346, "active": 20, "idle": 4, "total": 24, "queue": 3, "max_active": 24,
            "max_queue": 9, "max_children_reached": 1})


if __name__ == "__main__":
    unittest.main()
