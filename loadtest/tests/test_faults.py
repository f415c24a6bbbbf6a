"""The fault matrix's TLS checks: the proxy's count of TLS and plain connections, and the
report failing a TLS run whose connections were not TLS end to end."""

import io
import json
import os
import sys
import tempfile
import unittest
import unittest.mock

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "loadtest")]

import faults_report  # noqa: E402
import latency_proxy  # noqa: E402

ROW = {"fault": "Valkey stopped, then started (empty)", "policy": "deny", "checkouts": {"limited": 40},
       "acquire_p99_ms": 1.0, "acquire_max_ms": 2.0, "decisions_by_policy": 200, "php_errors": 0,
       "php_error_lines": [], "crashes": 0, "workers_killed": 0, "workers_recycled": 1, "recovery_s": 0.1,
       "connections_after": 9, "engines_during": {}, "engine_after": "lua"}


def tls_run(**changes) -> dict:
    tls = {"server": "redis-server 7.0.15", "server_port": "0", "server_tls_port": "7000",
           "proxy_connections": {"tls": 100, "plain": 0}, "probe_health_tls": "on, verified against cafile /x/ca.pem",
           "left_out": []}
    tls.update(changes)
    return {"policy": "deny", "module": False, "workers": 8, "fault_s": 2, "recovery_window_s": 3,
            "url": "rediss://127.0.0.1:7001", "valkey_port": 7000, "tls": tls, "rows": [ROW]}


class ProxyCountTest(unittest.TestCase):
    def test_first_bytes_count_as_tls_or_plain(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "stats.json")
            with unittest.mock.patch.object(latency_proxy, "stats_file", path), \
                    unittest.mock.patch.object(latency_proxy, "stats", {"tls": 0, "plain": 0}):
                latency_proxy.count(b"\x16\x03\x01\x02\x00")  # a TLS ClientHello record
                latency_proxy.count(b"\x16\x03\x03")
                latency_proxy.count(b"*1\r\n$4\r\nPING\r\n")  # RESP in clear
            self.assertEqual(json.load(open(path)), {"tls": 2, "plain": 1})


class FaultsReportTlsTest(unittest.TestCase):
    def report(self, run: dict):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "tls-deny"))
            json.dump(run, open(os.path.join(d, "tls-deny", "faults.json"), "w"))
            out = io.StringIO()
            with unittest.mock.patch.object(sys, "argv", ["faults_report.py", d]), \
                    unittest.mock.patch.object(sys, "stdout", out), self.assertRaises(SystemExit) as e:
                faults_report.main()
            return e.exception.code, out.getvalue()

    def test_a_tls_run_end_to_end_holds(self):
        code, text = self.report(tls_run())
        self.assertEqual(code, 0, text)
        self.assertIn("| deny, TLS |", text)
        self.assertIn("100 connections through the proxy began with a TLS handshake, 0 with anything else", text)
        self.assertIn("Faults left out over TLS: none", text)

    def test_a_plain_connection_a_plain_port_or_no_tls_in_health_fails(self):
        for changes in ({"proxy_connections": {"tls": 100, "plain": 1}}, {"proxy_connections": {"tls": 0, "plain": 0}},
                        {"server_port": "6379"}, {"probe_health_tls": None}):
            code, text = self.report(tls_run(**changes))
            self.assertEqual(code, 1, changes)
            self.assertIn("tls-deny: not TLS end to end", text)


if __name__ == "__main__":
    unittest.main()
