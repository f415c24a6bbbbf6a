"""An OTLP/HTTP receiver on loopback, for the shipper's tests (`checkout-guard ship --to
otlp`): it decodes with the official protobuf definitions (the opentelemetry-proto
package, pinned in scripts/setup.sh) and keeps what it was sent.

  POST /v1/logs      an ExportLogsServiceRequest
  POST /v1/metrics   an ExportMetricsServiceRequest
    Content-Type     application/x-protobuf, or application/json (protobuf's JSON
                     mapping); another: 415
    Content-Encoding gzip, deflate or none
    undecodable (or a message of another type: fields it does not have) -> 400 with a
    google.rpc.Status; accepted -> 200 with an empty Export*ServiceResponse, or one whose
    partial_success counts the histogram points refused (bucket_counts not one more than
    explicit_bounds, bounds not increasing, counts not adding up to count): those are
    neither stored nor counted as metric points
    --key KEY        (optional) the `api-key` header must equal KEY (New Relic's OTLP
                     endpoint takes its license key there), else 403
    --max-body N     bytes as sent, default 20 MiB (the OpenTelemetry Collector's default
                     max_request_body_size), else 413

With --store FILE, one JSON line per log record:
  {"kind": "log", "time_unix_nano", "observed_time_unix_nano", "severity_number",
   "severity_text", "body", "attributes": {...}, "resource": {...}, "scope": {"name", "version"}}
and per metric data point (histogram; gauge and sum points carry "value" instead):
  {"kind": "metric", "name", "unit", "type": "histogram", "temporality": "delta" |
   "cumulative" | "unspecified", "attributes": {...}, "count", "sum", "min", "max",
   "bucket_counts": [...], "explicit_bounds": [...], "start_time_unix_nano",
   "time_unix_nano", "resource": {...}, "scope": {...}}

  POST /_control   faults (loadtest/standin.py), applied to the next POSTs to /v1/*
  GET  /_stats     posts, accepted_batches, log_records, metric_points, rejected_points,
                   metrics {name: points}, rejected {status: count}, bytes_in, closed,
                   accepted_unanswered, duplicates (log records whose event_id attribute
                   was seen before), distinct_ids, without_id, ids_untracked

Usage: python otlp_receiver.py [--port 0] [--store FILE] [--key KEY]
First stdout line: `listening on http://127.0.0.1:PORT`.
"""

import argparse
import base64
import json
import math
import sys

from google.protobuf import json_format, message, unknown_fields
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

import standin

MAX_BODY = 20 * 1024 * 1024
MAX_METRIC_NAMES = 1000   # names counted in /_stats' metrics; past it, under "(other)"
TEMPORALITY = {0: "unspecified", 1: "delta", 2: "cumulative"}
# google.rpc.Code of an HTTP status (OTLP/HTTP error bodies are google.rpc.Status)
RPC_CODE = {400: 3, 403: 7, 404: 5, 405: 12, 413: 8, 415: 3, 429: 8, 503: 14}


def rpc_status(http_status: int, text: str) -> bytes:
    """A google.rpc.Status {code = 1, message = 2}, encoded by hand (two fields)."""
    code, msg = RPC_CODE.get(http_status, 2), text.encode()[:4096]

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out)
    return b"\x08" + varint(code) + b"\x12" + varint(len(msg)) + msg


def value(v):
    """An AnyValue as JSON: string, bool, int, float, list, dict, bytes as base64."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    out = getattr(v, kind)
    return out if kind != "double_value" or math.isfinite(out) else repr(out)


def attributes(kvs) -> dict:
    return {kv.key: value(kv.value) for kv in kvs}


def foreign(msg) -> bool:
    """Whether `msg` carries fields its type does not have (a message of another type)."""
    return len(unknown_fields.UnknownFieldSet(msg)) > 0


def hashable(v):
    return v if v is None or isinstance(v, (str, int, float, bool)) else json.dumps(v, sort_keys=True)


def histogram_problem(p) -> str:
    bounds, buckets = list(p.explicit_bounds), list(p.bucket_counts)
    if buckets and len(buckets) != len(bounds) + 1:
        return f"{len(buckets)} bucket_counts for {len(bounds)} explicit_bounds (needs one more)"
    if any(not math.isfinite(b) for b in bounds) or any(a >= b for a, b in zip(bounds, bounds[1:])):
        return "explicit_bounds not finite and strictly increasing"
    if buckets and sum(buckets) != p.count:
        return f"bucket_counts add up to {sum(buckets)}, count is {p.count}"
    return ""


class Rejected(Exception):
    pass


def log_lines(req, ids_out: list) -> list:
    """A stored line (a dict) per log record; each record's event_id appended to ids_out."""
    lines = []
    if foreign(req):
        raise Rejected("not an ExportLogsServiceRequest")
    for rl in req.resource_logs:
        resource = attributes(rl.resource.attributes)
        if foreign(rl) or foreign(rl.resource):
            raise Rejected("not an ExportLogsServiceRequest (resource_logs)")
        for sl in rl.scope_logs:
            if foreign(sl):
                raise Rejected("not an ExportLogsServiceRequest (scope_logs)")
            scope = {"name": sl.scope.name, "version": sl.scope.version}
            for r in sl.log_records:
                if foreign(r):
                    raise Rejected("not an ExportLogsServiceRequest (log_records)")
                attrs = attributes(r.attributes)
                ids_out.append(hashable(attrs.get("event_id")))
                lines.append({"kind": "log", "time_unix_nano": r.time_unix_nano,
                              "observed_time_unix_nano": r.observed_time_unix_nano,
                              "severity_number": r.severity_number, "severity_text": r.severity_text,
                              "body": value(r.body), "attributes": attrs, "resource": resource, "scope": scope})
    return lines


def metric_lines(req) -> tuple:
    """(a stored line per data point accepted, the number of points refused, the first reason)."""
    lines, refused, reason = [], 0, ""
    if foreign(req):
        raise Rejected("not an ExportMetricsServiceRequest")
    for rm in req.resource_metrics:
        resource = attributes(rm.resource.attributes)
        if foreign(rm) or foreign(rm.resource):
            raise Rejected("not an ExportMetricsServiceRequest (resource_metrics)")
        for sm in rm.scope_metrics:
            if foreign(sm):
                raise Rejected("not an ExportMetricsServiceRequest (scope_metrics)")
            scope = {"name": sm.scope.name, "version": sm.scope.version}
            for m in sm.metrics:
                if foreign(m):
                    raise Rejected("not an ExportMetricsServiceRequest (metrics)")
                kind = m.WhichOneof("data")
                head = {"kind": "metric", "name": m.name, "unit": m.unit, "type": kind}
                if kind == "histogram":
                    temporality = TEMPORALITY.get(m.histogram.aggregation_temporality, "unspecified")
                    for p in m.histogram.data_points:
                        problem = histogram_problem(p)
                        if problem:
                            refused += 1
                            reason = reason or f"{m.name}: {problem}"
                            continue
                        lines.append({**head, "temporality": temporality, "attributes": attributes(p.attributes),
                                      "count": p.count, "sum": p.sum if p.HasField("sum") else None,
                                      "min": p.min if p.HasField("min") else None,
                                      "max": p.max if p.HasField("max") else None,
                                      "bucket_counts": list(p.bucket_counts), "explicit_bounds": list(p.explicit_bounds),
                                      "start_time_unix_nano": p.start_time_unix_nano, "time_unix_nano": p.time_unix_nano,
                                      "resource": resource, "scope": scope})
                elif kind in ("gauge", "sum"):
                    data = getattr(m, kind)
                    extra = {"temporality": TEMPORALITY.get(data.aggregation_temporality, "unspecified"),
                             "monotonic": data.is_monotonic} if kind == "sum" else {}
                    for p in data.data_points:
                        v = getattr(p, p.WhichOneof("value")) if p.WhichOneof("value") else None
                        lines.append({**head, **extra, "attributes": attributes(p.attributes), "value": v,
                                      "start_time_unix_nano": p.start_time_unix_nano, "time_unix_nano": p.time_unix_nano,
                                      "resource": resource, "scope": scope})
                elif kind in ("exponential_histogram", "summary"):
                    for p in getattr(m, kind).data_points:
                        lines.append({**head, "attributes": attributes(p.attributes), "count": p.count, "sum": p.sum,
                                      "start_time_unix_nano": p.start_time_unix_nano, "time_unix_nano": p.time_unix_nano,
                                      "resource": resource, "scope": scope})
    return lines, refused, reason


class OtlpReceiver(standin.App):
    PATHS = {"/v1/logs": (logs_service_pb2.ExportLogsServiceRequest, logs_service_pb2.ExportLogsServiceResponse),
             "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest,
                             metrics_service_pb2.ExportMetricsServiceResponse)}

    def __init__(self, max_ids: int, store_path: str = "", key: str = "", max_body: int = MAX_BODY):
        super().__init__(max_ids, store_path)
        self.key, self.max_body = key, max_body
        self.accepted_batches = self.log_records = self.metric_points = self.rejected_points = 0
        self.metrics = {}

    def reject(self, req, status: int, message: str, headers=None, close: bool = False) -> None:
        if "json" in req.headers.get("Content-Type", ""):
            body, ctype = json.dumps({"code": RPC_CODE.get(status, 2), "message": message}).encode(), "application/json"
        else:
            body, ctype = rpc_status(status, message), "application/x-protobuf"
        req.reply(status, body, ctype, headers=headers, close=close)

    def route(self, req, path: str) -> None:
        if path not in self.PATHS:
            return self.reject(req, 404, f"no such path: {path[:200]} (/v1/logs, /v1/metrics)")
        if req.command != "POST":
            return self.reject(req, 405, "POST only", headers={"Allow": "POST"})
        try:
            body = standin.read_body(req, self.max_body)
        except standin.BodyError as e:
            self.received(b"")
            self.count_rejected(e.status)
            raise
        self.received(body)
        if self.apply_fault(req):
            return
        if self.key and req.headers.get("api-key") != self.key:
            self.count_rejected(403)
            return self.reject(req, 403, "missing or invalid api-key header")
        ctype = req.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if ctype not in ("application/x-protobuf", "application/json"):
            self.count_rejected(415)
            return self.reject(req, 415, f"Content-Type '{ctype}': application/x-protobuf or application/json")
        request_type, response_type = self.PATHS[path]
        try:
            data = standin.decode(body, req.headers.get("Content-Encoding", ""))
            if ctype == "application/json":
                msg = json_format.Parse(data.decode("utf-8"), request_type())
            else:
                msg = request_type.FromString(data)
            ids = []
            if path == "/v1/logs":
                lines, refused, reason = log_lines(msg, ids), 0, ""
                # {"partial_reject": N}: the last N records refused, the OTLP way (200 with
                # partial_success.rejected_log_records), neither stored nor counted.
                partial = min(self.faults.take_partial_reject(), len(lines))
                if partial:
                    lines, ids = lines[:len(lines) - partial], ids[:len(ids) - partial]
                    refused, reason = partial, "stand-in: partial_reject"
                # {"partial_claim": N}: everything stored, N claimed refused (a receiver that
                # claims more than it was sent).
                claim = self.faults.take_partial_claim()
                if claim:
                    refused, reason = claim, "stand-in: partial_claim"
            else:
                lines, refused, reason = metric_lines(msg)
        except standin.BodyError as e:
            self.count_rejected(e.status)
            return self.reject(req, e.status, e.message)
        except (message.DecodeError, json_format.ParseError, UnicodeDecodeError, Rejected, RecursionError) as e:
            self.count_rejected(400)
            return self.reject(req, 400, f"undecodable: {str(e)[:500]}")
        text = [json.dumps(line, separators=(",", ":")) + "\n" for line in lines] if self.store else []
        unanswered = self.faults.take_accept_then_close()
        with self.lock:
            self.write(text)
            self.accepted_batches += 1
            if path == "/v1/logs":
                self.log_records += len(lines)
                for eid in ids:
                    self.ids.add(eid)
            else:
                self.metric_points += len(lines)
                self.rejected_points += refused
                for line in lines:
                    name = line["name"] if line["name"] in self.metrics or len(self.metrics) < MAX_METRIC_NAMES else "(other)"
                    self.metrics[name] = self.metrics.get(name, 0) + 1
            if unanswered:
                self.accepted_unanswered += 1
        if unanswered:
            return req.drop()
        response = response_type()
        if refused and path == "/v1/logs":
            response.partial_success.rejected_log_records = refused
            response.partial_success.error_message = reason
        elif refused:
            response.partial_success.rejected_data_points = refused
            response.partial_success.error_message = reason
        if ctype == "application/json":
            req.reply(200, json_format.MessageToJson(response).encode(), "application/json")
        else:
            req.reply(200, response.SerializeToString(), "application/x-protobuf")

    def stats(self) -> dict:
        return {**self.base_stats(), "accepted_batches": self.accepted_batches, "log_records": self.log_records,
                "metric_points": self.metric_points, "rejected_points": self.rejected_points, "metrics": dict(self.metrics)}


def options(argv: list):
    p = argparse.ArgumentParser(prog="otlp_receiver.py", description="OTLP/HTTP receiver (loopback only)")
    p.add_argument("--key", default="", help="when set, the api-key header must equal it")
    p.add_argument("--max-body", type=int, default=MAX_BODY, help="bytes as sent (default 20 MiB)")
    standin.add_options(p)
    opts = p.parse_args(argv)
    standin.check_options(p, opts)
    if opts.max_body < 1:
        p.error("--max-body: at least 1")
    return opts


if __name__ == "__main__":
    opts = options(sys.argv[1:])
    standin.serve(OtlpReceiver(opts.max_ids, opts.store, opts.key, opts.max_body), opts)
