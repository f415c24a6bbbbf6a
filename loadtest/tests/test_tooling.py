"""The computations that moved out of shell scripts (medians, reports, summaries, the
valgrind log's reading), the HTTP client, and the charts."""

import asyncio
import io
import json
import os
import socket
import sys
import tempfile
import unittest
import unittest.mock

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "loadtest"), os.path.join(ROOT, "bench")]

import charts  # noqa: E402
import free_ports  # noqa: E402
import httpclient  # noqa: E402
import model_summary  # noqa: E402
import scan_compare  # noqa: E402
import steady  # noqa: E402
import telemetry_report  # noqa: E402
import valgrind_report  # noqa: E402
import verdict  # noqa: E402


class TelemetryReportTest(unittest.TestCase):
    def test_median_of_five_runs_is_the_middle_one(self):
        lines = [json.dumps({"ns_per_call": v}) for v in (900, 100, 500, 300, 700)] + [""]
        self.assertEqual(telemetry_report.median(lines), 500)
        flushes = [json.dumps({"median_ns_per_flush": v}) for v in (3e6, 1e6, 2e6)]
        self.assertEqual(telemetry_report.median(flushes), 2e6)

    def test_report_subtracts_the_direct_call(self):
        text = telemetry_report.report(1000, 3000, 1500, 5000, 21000, 2e6, 4e6, 6e6, 2900, 1400, host="h")
        self.assertIn("(median of 5 runs, h)", text)
        self.assertRegex(text, r"jsonl sink, batches of 1,000: overhead\s+2\.00 us")
        self.assertIn("measure() vs hand-written buffered: 0.50x", text)
        self.assertRegex(text, r"stream\s+4\.00 ms  \(4\.00 us/event\)")
        # metrics on against off, per call: the jsonl sink's 3.0 vs 2.9 us.
        self.assertRegex(text, r"jsonl sink\s+on\s+3\.000 us  off\s+2\.900 us  = 1\.034x \(\+0\.100 us\)")
        self.assertRegex(text, r"telemetry off \(counting only\)\s+on\s+1\.500 us  off\s+1\.400 us  = 1\.071x")


class ModelSummaryTest(unittest.TestCase):
    def test_summary_ends_with_passed_and_failed(self):
        s = {"seeds": [1, 2, 3], "results": [{"seed": 1, "ok": True}, {"seed": 2, "ok": False}, {"seed": 3, "ok": False}],
             "operations_checked": 1234, "seconds": 12.345, "passed": 1, "failed": 2}
        self.assertEqual(model_summary.summary(s).splitlines(), [
            "seeds run (3): 1 2 3", "failing seeds: 2 3", "operations checked: 1234 in 12.3 s", "1 passed, 2 failed"])

    def test_several_summaries_are_labelled_and_totalled(self):
        a = {"seeds": [1], "results": [{"seed": 1, "ok": True}], "operations_checked": 10, "seconds": 1.0, "passed": 1, "failed": 0}
        b = {"seeds": [69, 2066], "results": [{"seed": 69, "ok": True}, {"seed": 2066, "ok": False}],
             "operations_checked": 100, "seconds": 15.04, "passed": 1, "failed": 1}
        self.assertEqual(model_summary.combined([("summary", a)]), model_summary.summary(a))
        self.assertEqual(model_summary.combined([("summary", a), ("summary-managed", b)]).splitlines(), [
            "summary:", "  seeds run (1): 1", "  operations checked: 10 in 1.0 s", "  1 passed, 0 failed",
            "summary-managed:", "  seeds run (2): 69 2066", "  failing seeds: 2066", "  operations checked: 100 in 15.0 s",
            "  1 passed, 1 failed", "2 passed, 1 failed"])


class ValgrindReportTest(unittest.TestCase):
    LOG = """==100== Memcheck, a memory error detector
==100== Command: php phpunit
==100==
==100== 16 bytes in 1 blocks are definitely lost in loss record 1 of 2
==100==    at 0x1: malloc
==100==    by 0x2: zend_compile (php)
==100==
==100== 32 bytes in 1 blocks are definitely lost in loss record 2 of 2
==100==    at 0x1: malloc
==100==    by 0x3: checkout_guard::telemetry (libcheckout_guard.so)
==100==
==200== Invalid read of size 8
==200==    at 0x4: something
==200==
==200== 8 bytes definitely lost
==200==    by 0x5: (libcheckout_guard.so)
"""

    def test_leaks_count_in_the_main_process_invalid_accesses_everywhere(self):
        a = valgrind_report.analyse(self.LOG)
        self.assertEqual((len(a["invalid"]), len(a["ours"]), len(a["php_leaks"]), a["children"]), (1, 1, 1, 1))

    def test_exit_status(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log") as f:
            f.write(self.LOG.replace("Invalid read", "Valid read").replace("libcheckout_guard", "libphp"))
            f.flush()
            with unittest.mock.patch("sys.stdout", io.StringIO()):
                self.assertEqual(valgrind_report.main(f.name), 0)


class ScanCompareTest(unittest.TestCase):
    def test_table(self):
        text = scan_compare.table(2_000_000, 460_000_000, 7, {"checkout-guard 1 thread(s)": (0.5, 20480)})
        self.assertIn("2,000,000 events (0.46 GB), 7 windows", text)
        self.assertRegex(text, r"checkout-guard 1 thread\(s\)\s+0\.50\s+4\.00\s+20 MB")


class SmallHelpersTest(unittest.TestCase):
    def test_free_ports_differ(self):
        ports = free_ports.free_ports(5)
        self.assertEqual(len(set(ports)), 5)

    def test_steady_classifies_answers(self):
        self.assertEqual(steady.classify(200, b"{}"), "paid")
        self.assertEqual(steady.classify(503, b'{"error":"limiter unavailable"}'), "unavailable")
        self.assertEqual(steady.classify(503, b'{"error":"overloaded","retry_after":1}'), "shed")
        self.assertEqual(steady.classify(503, b'{"error":"busy"}'), "limited")
        self.assertEqual(steady.classify(502, b""), "provider")
        self.assertEqual(steady.classify(500, b""), "error_500")

    def test_verdict_percentile_and_bound(self):
        self.assertEqual(verdict.pct(list(range(1, 101)), 95), 95)
        self.assertEqual(verdict.bound((6, 25.0), 2.0), 56.0)


class HttpClientTest(unittest.TestCase):
    def test_fetch_keep_alive_and_errors(self):
        async def scenario():
            seen = []

            async def handle(reader, writer):
                connections.append(writer)
                while True:
                    try:
                        head = await reader.readuntil(b"\r\n\r\n")
                    except (asyncio.IncompleteReadError, asyncio.CancelledError, ConnectionError):
                        break
                    seen.append(head.split(b"\r\n")[0])
                    body = b'{"ok": 1}'
                    writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                    await writer.drain()
                    if b"Connection: close" in head or b"connection: close" in head.lower():
                        break
                writer.close()

            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            async with server:
                async with httpclient.session(connections=1) as s:
                    answers = [await httpclient.fetch(s, httpclient.local(port, "/a?x=1")) for _ in range(3)]
                status = await httpclient.get_json_async(httpclient.local(port, "/fpm-status?json&full"), timeout=2)
                r = httpclient.Repeater(port, "/flood?shop=f")
                repeated = [await r.get() for _ in range(3)]
                r.close()
            return seen, answers, status, repeated, connections

        connections = []
        seen, answers, status, repeated, connections = asyncio.run(scenario())
        self.assertEqual(answers, [(503, b'{"ok": 1}')] * 3)
        self.assertEqual(seen[:3], [b"GET /a?x=1 HTTP/1.1"] * 3)
        self.assertEqual(seen[3], b"GET /fpm-status?json&full HTTP/1.1")
        self.assertEqual(status, {"ok": 1})
        self.assertEqual(repeated, [(503, b'{"ok": 1}')] * 3)
        self.assertEqual(seen[4:], [b"GET /flood?shop=f HTTP/1.1"] * 3)
        # aiohttp's keep-alive session, its one-off get_json, the repeater's one connection
        self.assertEqual(len(connections), 3)

    def test_the_repeater_reconnects_when_the_server_closes(self):
        async def scenario():
            async def handle(reader, writer):
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
                await writer.drain()
                writer.close()

            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            async with server:
                r = httpclient.Repeater(port, "/")
                out = [await r.get() for _ in range(2)]
                server.close()
                await server.wait_closed()
                try:
                    await r.get()
                except httpclient.IO_ERRORS as e:
                    out.append(httpclient.error_name(e))
            return out

        self.assertEqual(asyncio.run(scenario()), [(200, b"abcde"), (200, b"abcde"), "ConnectionRefusedError"])

    def test_a_refused_connection_is_named_as_the_socket_layer_names_it(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()

        async def scenario():
            async with httpclient.session(keep_alive=False, connect_timeout=1) as c:
                try:
                    await httpclient.fetch(c, httpclient.local(port, "/"))
                except httpclient.IO_ERRORS as e:
                    return httpclient.error_name(e)

        self.assertEqual(asyncio.run(scenario()), "ConnectionRefusedError")


class ChartsTest(unittest.TestCase):
    def test_per_second_panels_writes_an_svg_with_its_labels(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "chart-flood.svg")
            charts.per_second_panels(path, [("flood: limiter off", {"a (200)": [1, 2, 3]}),
                                            ("flood: limiter on", {"a (200)": [3, 2, 1], "b (503)": [0, 5]})],
                                     [("a (200)", "#1b7837"), ("b (503)", "#f1a340")])
            svg = open(path).read()
        for text in ("<svg", "flood: limiter off", "flood: limiter on", "a (200)", "b (503)"):
            self.assertIn(text, svg)

    def test_health_timeline(self):
        res = {"phases": [["baseline", 0, 1], ["flood", 1, 2], ["recovery", 2, 3], ["dead", 3, 4]],
               "flow_limit": 8, "concurrency": 4, "scale": 0.05,
               "flood": {"per_second": [{"t": 0, "200": 3, "503": 10}]},
               "probes": [{"probe": "liveness-tcp-nginx", "kind": "liveness", "results": [[0.1, True, "connected", 0]],
                           "restart_times": [3.5], "transitions": []},
                          {"probe": "readiness-http-nginx", "kind": "readiness", "results": [[0.2, False, "503", 0]],
                           "restart_times": [], "transitions": [[0.0, True], [1.5, False]]}]}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "timeline.svg")
            charts.health_timeline(path, res)
            svg = open(path).read()
        for text in ("Health checks under a flood (flow limit 8", "liveness-tcp-nginx", "readiness-http-nginx", "recovery"):
            self.assertIn(text, svg)


if __name__ == "__main__":
    unittest.main()


class ModuleCostTest(unittest.TestCase):
    """bench/module_cost.py, the command docs/module.md and docs/performance.md give: every
    case it runs by default builds its call and Valkey takes it (a call in no form, or the
    script's call in another form than its key count says, is an error reply that fails
    the run), for the module and the script alike."""

    CASES = ("global", "hot", "auto_hot", "adapt_global", "adapt_hot", "lease_global", "lease_hot", "release")

    def test_every_case_runs_by_default(self):
        import subprocess

        module = os.path.join(ROOT, "target/release/libcheckout_guard_valkey.so")
        cli = os.path.join(ROOT, "target/release/checkout-guard")
        if not (os.path.exists(module) and os.path.exists(cli)):
            self.skipTest("cargo build --release first (the module and the CLI)")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "cost.json")
            run = subprocess.run(
                [sys.executable, os.path.join(ROOT, "bench/module_cost.py"), "--calls", "20", "--rounds", "1", "--pipeline", "5", "--json", out],
                capture_output=True,
                text=True,
                timeout=300,
            )
            self.assertEqual(run.returncode, 0, run.stdout[-2000:] + run.stderr[-2000:])
            with open(out) as f:
                best = json.load(f)["best_us"]
        for kind in ("module", "script"):
            for case in self.CASES:
                self.assertGreater(best.get(f"{kind}_{case}", 0), 0, f"{kind}_{case} measured")
