"""deploy/config is the one source of the nginx, php-fpm and checkout_guard configuration:
the Kubernetes ConfigMaps hold exactly the templates rendered with the Kubernetes values,
and the local stack's files are the same templates with the local ones."""

import os
import sys
import tempfile
import unittest

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "deploy", "config"))
import render  # noqa: E402


class ConfigTest(unittest.TestCase):
    def test_the_k8s_configmaps_are_the_rendered_templates(self):
        docs = [d for d in yaml.safe_load_all(open(render.MANIFEST)) if d and d["kind"] == "ConfigMap"]
        data = {name: content for d in docs for name, content in d["data"].items()}
        for name, content in render.k8s_files().items():
            self.assertEqual(data.get(name), content,
                             f"deploy/k8s/checkout.yaml's {name} is not deploy/config's template rendered: "
                             "run python3 deploy/config/render.py k8s --write")

    def test_write_k8s_is_a_no_op_on_the_committed_manifest(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(open(render.MANIFEST).read())
        try:
            self.assertFalse(render.write_k8s(f.name))
        finally:
            os.unlink(f.name)

    def test_local_and_k8s_differ_only_in_their_values(self):
        env = {"FPM_WORKERS": "8", "FPM_MAX_REQUESTS": "10000", "FLOW_LIMIT": "8",
               "FPM_ENV": "CHECKOUT_LIMITER=on\nURL=redis://x?a=b\nEMPTY=\n"}
        local = render.local_files("/run", "/www", "redis://127.0.0.1:7", "/ext.so", 9000, 8080, 9001, 8081,
                                   "5000", "5001", env=env)
        pool = local["php-fpm.conf"]
        self.assertIn("[global]\npid = /run/php-fpm.pid\n", pool)
        self.assertIn("[checkout]\nlisten = 127.0.0.1:9000\npm = static\npm.max_children = 8\npm.max_requests = 10000\n", pool)
        self.assertIn('env[CHECKOUT_LIMITER] = "on"\nenv[URL] = "redis://x?a=b"\ncatch_workers_output = yes\n', pool)
        self.assertNotIn("EMPTY", pool)
        nginx = local["nginx.conf"]
        k8s = render.k8s_files()["default.conf"]
        for line in k8s.splitlines():
            if "listen" in line or "include" in line or "root" in line:
                continue
            self.assertIn(line, nginx)
        self.assertIn("    limit_conn inflight 8;\n", nginx)
        self.assertIn("listen 127.0.0.1:5001;", nginx)
        self.assertIn("limit_req_zone $server_name zone=zonea:1m rate=200r/s;", nginx)
        ini = local["conf.d/20-checkout_guard.ini"]
        self.assertIn("checkout_guard.url=redis://127.0.0.1:7\n", ini)
        self.assertIn("checkout_guard.events.jsonl_path=/run/events.jsonl\n", ini)

    def test_checkout_ini_lines_go_into_the_local_ini_only(self):
        env = {"CHECKOUT_INI": "checkout_guard.tls.cafile=/run/tls/ca.pem\ncheckout_guard.tls.peer_name=localhost"}
        ini = render.local_files("/run", "/www", "rediss://127.0.0.1:7", "/ext.so", 1, 2, 3, 4, env=env)["conf.d/20-checkout_guard.ini"]
        self.assertIn("checkout_guard.url=rediss://127.0.0.1:7\n", ini)
        self.assertIn("checkout_guard.events.jsonl_path=/run/events.jsonl\n"
                      "checkout_guard.tls.cafile=/run/tls/ca.pem\ncheckout_guard.tls.peer_name=localhost\n", ini)
        self.assertNotIn("tls", render.local_files("/run", "/www", "redis://h", "/ext.so", 1, 2, 3, 4, env={})["conf.d/20-checkout_guard.ini"])
        self.assertNotIn("tls", render.k8s_files()["30-checkout_guard.ini"])

    def test_no_flow_control_and_no_provider_leave_no_line_behind(self):
        local = render.local_files("/run", "/www", "redis://h", "/ext.so", 1, 2, 3, 4, env={})
        self.assertNotIn("limit_conn inflight", local["nginx.conf"])
        self.assertNotIn("limit_req", local["nginx.conf"])
        self.assertIn("pm.max_children = 4\npm.max_requests = 0\n", local["php-fpm.conf"])
        self.assertNotIn("{{", "".join(local.values()))

    def test_a_placeholder_without_a_value_is_an_error(self):
        with self.assertRaises(KeyError):
            render.render("a {{x}} b {{y}}\n", x=1)
        with self.assertRaises(KeyError):
            render.render("a {{x}}\n", x=1, z=2)
        self.assertEqual(render.render("  {{block}}\nend\n", block="one\ntwo"), "  one\n  two\nend\n")
        self.assertEqual(render.render("a\n  {{block}}\nend\n", block=""), "a\nend\n")


if __name__ == "__main__":
    unittest.main()
