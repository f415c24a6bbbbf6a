"""The endpoint scenario's pieces (issue 42; scripts/loadtest.sh endpoints): the mock
provider's endpoint API (loadtest/provider.py), the provider's nginx limits
(deploy/config/render.py), and the report (loadtest/endpoints_report.py) on runs made up
here."""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "loadtest"), os.path.join(ROOT, "deploy", "config")]

import endpoints_report as report  # noqa: E402
import provider  # noqa: E402
import render  # noqa: E402


class EndpointApiTest(unittest.TestCase):
    def setUp(self):
        self.p = provider.Provider(provider.options(["1", "--seed", "1"]))

    def test_create_confirm_retrieve_and_items(self):
        kind, body = self.p.endpoint_api("POST", "/v1/payment_intents")
        self.assertEqual((kind, body["status"]), ("charges", "requires_confirmation"))
        self.assertTrue(body["id"].startswith("pi_"))
        self.assertEqual(self.p.endpoint_api("POST", "/v1/payment_intents/pi_1/confirm"),
                         ("charges", {"id": "pi_1", "status": "succeeded"}))
        self.assertEqual(self.p.endpoint_api("GET", "/v1/payment_intents/pi_1"), ("items", {"id": "pi_1", "status": "succeeded"}))
        self.assertEqual(self.p.endpoint_api("GET", "/v1/items/popular")[1]["id"], "popular")

    def test_a_wrong_method_or_path_is_not_found(self):
        for method, path in (("GET", "/v1/payment_intents"), ("GET", "/v1/payment_intents/pi_1/confirm"),
                             ("POST", "/v1/items/x"), ("GET", "/v1/items/"), ("POST", "/v1/payment_intents/pi_1/cancel")):
            self.assertIn("error", self.p.endpoint_api(method, path)[1], f"{method} {path}")


class ProviderLimitsTest(unittest.TestCase):
    def test_every_endpoint_passes_the_global_zone_and_its_own(self):
        conf = render.local_files("/run", "/www", "redis://h", "/ext.so", 1, 2, 3, 4, "5", "6", env={})["nginx.conf"]
        self.assertIn("zone=ep_global:1m rate=50r/s;", conf)
        for zone in ("create", "confirm", "retrieve", "items"):
            self.assertIn(f"zone=ep_{zone}:1m rate=25r/s;", conf)
            self.assertRegex(conf, rf"limit_req zone=ep_global burst=25 nodelay;\s+limit_req zone=ep_{zone} burst=5 nodelay;")
        # the other scenarios' paths are as they were: one zone each
        self.assertIn("location /items/ { limit_req zone=zonea burst=100 nodelay; proxy_pass http://provider; }", conf)
        self.assertIn("location /v1/charges { limit_req zone=payment burst=10 nodelay; proxy_pass http://provider; }", conf)

    def test_rates_per_second_or_per_minute_and_bad_ones_named(self):
        env = {"PROVIDER_GLOBAL_RATE": "1r/m", "PROVIDER_ENDPOINT_RATE": "7", "PROVIDER_ENDPOINT_BURST": "4"}
        conf = render.local_files("/run", "/www", "redis://h", "/ext.so", 1, 2, 3, 4, "5", "6", env=env)["nginx.conf"]
        self.assertIn("zone=ep_global:1m rate=1r/m;", conf)
        self.assertIn("zone=ep_items:1m rate=7r/s;", conf)
        self.assertIn("limit_req zone=ep_items burst=4 nodelay;", conf)
        for bad in ("0", "2.5", "10r/h", "fast", "-1"):
            with self.assertRaises(ValueError) as e:
                render.nginx_rate(bad)
            self.assertIn(f"'{bad}'", str(e.exception))


def log_line(t, status, uri):
    return json.dumps({"t": t, "s": status, "u": uri})


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.out)

    def run_dir(self, name, paid, tried, hot_paid, hot_tried, items_429=0, left=0):
        """A made-up run: ordinary and hot checkouts (paid of tried), a payment left created
        `left` times (ordinary), and items calls refused by the provider."""
        d = os.path.join(self.out, name)
        os.makedirs(d)
        access, prov = [], []
        for cls, shop, ok, n in (("ordinary", "shop-01", paid, tried), ("hot", "flash-1", hot_paid, hot_tried)):
            for i in range(n):
                access.append(log_line(100 + i * 0.1, 200 if i < ok else 503, f"/intent.php?shop={shop}&item=x"))
                if i < ok:
                    prov.append(log_line(100 + i * 0.1, 200, f"/v1/payment_intents?shop={shop}"))
                    prov.append(log_line(100 + i * 0.1, 200, f"/v1/payment_intents/pi_{i}/confirm?shop={shop}"))
        for i in range(left):
            prov.append(log_line(101, 200, "/v1/payment_intents?shop=shop-02"))
        for i in range(items_429):
            prov.append(log_line(101, 429, "/v1/items/popular?shop=flash-1"))
            access.append(log_line(101, 502, "/lookup.php?shop=flash-1&what=items&id=popular"))
        open(os.path.join(d, "access.log"), "w").write("\n".join(access) + "\n")
        open(os.path.join(d, "provider.log"), "w").write("\n".join(prov) + "\n")
        json.dump({"duration": 5, "flood_endpoint": "items"}, open(os.path.join(d, "run.json"), "w"))

    def main(self):
        with contextlib.redirect_stdout(io.StringIO()):
            rc = report.main(self.out)
        return rc, json.load(open(os.path.join(self.out, "report.json")))

    def test_the_expected_outcome_holds(self):
        self.run_dir("baseline", 40, 40, 40, 40)
        self.run_dir("global", 5, 40, 4, 40, items_429=30, left=7)
        self.run_dir("endpoints", 30, 40, 28, 40)
        self.run_dir("priorities", 40, 40, 40, 40)
        rc, res = self.main()
        self.assertEqual(rc, 0, res["checks"])
        g = res["runs"]["global"]
        self.assertEqual(g["provider"]["items"], {"calls": 30, "ok": 0, "429": 30})
        self.assertEqual(g["checkouts"]["ordinary"]["left_created"], 7)
        self.assertEqual(g["checkouts"]["hot"]["success"], 0.1)
        self.assertTrue(os.path.exists(os.path.join(self.out, "chart.svg")))
        self.assertTrue(os.path.exists(os.path.join(self.out, "chart.png")))

    def test_a_provider_429_with_endpoints_fails(self):
        self.run_dir("baseline", 40, 40, 40, 40)
        self.run_dir("endpoints", 40, 40, 40, 40, items_429=1)
        rc, res = self.main()
        self.assertEqual(rc, 1)
        self.assertIn(["endpoints: no provider 429s", False, 1], res["checks"])

    def test_priorities_below_baseline_fails(self):
        self.run_dir("baseline", 40, 40, 40, 40)
        self.run_dir("priorities", 40, 40, 38, 40)   # hot 95% against 100%
        rc, res = self.main()
        self.assertEqual(rc, 1)
        failed = [c[0] for c in res["checks"] if not c[1]]
        self.assertEqual(failed, ["priorities: hot checkouts completed at baseline (within 2 points)"])

    def test_a_global_run_without_the_failure_fails(self):
        self.run_dir("baseline", 40, 40, 40, 40)
        self.run_dir("global", 40, 40, 40, 40)
        self.assertEqual(self.main()[0], 1)

    def test_the_endpoint_of_a_uri(self):
        self.assertEqual([report.endpoint_of(u) for u in (
            "/v1/payment_intents?shop=a", "/v1/payment_intents/pi_1/confirm?shop=a", "/v1/payment_intents/pi_1",
            "/v1/items/x", "/items/x", "/v1/charges", "/other")],
            ["create", "confirm", "retrieve", "items", "zoneA", "charges", "other"])


if __name__ == "__main__":
    unittest.main()
