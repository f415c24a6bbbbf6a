"""The replay check's readers (loadtest/replay_check.py): the in-flight run's env spec as
replay's --limits words, and the in-flight denials counted per shop from a run's events."""

import json
import os
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "loadtest")]

import replay_check  # noqa: E402


class InFlightSpecTest(unittest.TestCase):
    def test_checkout_in_flight_becomes_the_replays_words(self):
        self.assertEqual(replay_check.in_flight_limits("global=16,hot_shop=3,lease_seconds=10"),
                         "in_flight=16/-/3 lease_seconds=10")
        self.assertEqual(replay_check.in_flight_limits("global=8,hot_lane=4,hot_shop=2"), "in_flight=8/4/2")


class MeasuredTest(unittest.TestCase):
    def test_in_flight_denials_are_counted_apart_from_the_buckets(self):
        lines = [
            {"eventType": "ExternalApiCall", "api": "payment", "shop.id": "a", "timestamp": 1000,
             "duration.ms": 300.0, "http.response.status_code": 200},
            {"eventType": "ExternalApiCall", "api": "payment", "shop.id": "a", "timestamp": 1100,
             "duration.ms": 100.0, "http.response.status_code": 200},
            {"eventType": "RateLimitDecision", "shop.id": "a", "timestamp": 1200, "allowed": False,
             "reason": "in_flight_hot_shop"},
            {"eventType": "RateLimitDecision", "shop.id": "a", "timestamp": 1300, "allowed": False,
             "reason": "hot_shop"},
            {"eventType": "RateLimitDecision", "shop.id": "b", "timestamp": 2000, "allowed": False,
             "reason": "in_flight_global"},
        ]
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "events.jsonl"
            p.write_text("\n".join(json.dumps(e) for e in lines) + "\nnot json\n")
            m = replay_check.measured(p)
        self.assertEqual(m["admitted"], {"a": 2})
        self.assertEqual(m["denied"], {"a": 2, "b": 1})
        self.assertEqual(m["in_flight_denied"], {"a": 1, "b": 1})
        self.assertEqual(m["mean_call_ms"], 200.0)
        self.assertEqual(m["span_s"], 1.0)


if __name__ == "__main__":
    unittest.main()
