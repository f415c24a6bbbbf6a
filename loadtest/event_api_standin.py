"""A stand-in for New Relic's Event API (custom events), on loopback, for the shipper's
tests (`checkout-guard ship --to newrelic`). It checks what the real API documents
("Data requirements and limits for custom event data"; "Introduction to the Event API")
and refuses a batch that breaks a rule, whole, with the rule named:

  POST /v1/accounts/<digits>/events   (404 elsewhere, 405 for another method)
    key      header Api-Key, X-Insert-Key or X-License-Key equal to --key, else 403
    size     the body as sent (compressed) at most 1,000,000 bytes ("1MB (10^6 bytes)
             maximum per POST"), else 413
    encoding Content-Encoding gzip, deflate or none; bad compressed data 400, another 415
    JSON     UTF-8 JSON: an array of objects, or one object, else 400; per event:
             eventType a string of at most 255 characters of [A-Za-z0-9_:]; at most 254
             attributes; attribute names at most 255 characters; values string, integer
             or float, the documented types (booleans, null, arrays, objects: 400); strings at most 4096
             characters (Event API) - else 400 naming the rule, the event and attribute
    accepted 200 {"success": true, "uuid": "..."}; with --store, each event one JSON line

The real API is asynchronous: past the key and size checks it answers 200 and drops bad
events later, reporting them as NrIntegrationError events. This stand-in answers 400
instead, so a shipper that sends what the real API would drop fails a test, visibly.

  POST /_control   faults (loadtest/standin.py: status with Retry-After, delay, close,
                   down_until, accept_then_close), applied to the next event POSTs
  GET  /_stats     posts, accepted_batches, events, rejected {status: count}, bytes_in,
                   closed, accepted_unanswered, duplicates (events whose event_id
                   attribute was seen before), distinct_ids, without_id, ids_untracked

Usage: python event_api_standin.py --key KEY [--port 0] [--store FILE]
First stdout line: `listening on http://127.0.0.1:PORT`.
"""

import argparse
import json
import math
import re
import sys
import uuid

import standin

EVENTS_PATH = re.compile(r"/v1/accounts/[0-9]+/events")
KEY_HEADERS = ("Api-Key", "X-Insert-Key", "X-License-Key")
MAX_PAYLOAD = 1_000_000        # bytes per POST, as sent (compressed)
READ_LIMIT = 16 * 1024 * 1024  # read (and refuse with 413) bodies up to this; past it, closed unread
MAX_NAME = 255                 # eventType and attribute names, characters
# Attributes per event: every key of the event object counts, eventType and timestamp
# included (the documentation's "maximum total attributes per event: 254" names no
# exception, so a shipper that stays within 254 keys is safe either way).
MAX_ATTRIBUTES = 254
MAX_STRING = 4096              # string values, characters (Event API; agents: 255)
EVENT_TYPE = re.compile(r"[A-Za-z0-9_:]+")


class Invalid(Exception):
    def __init__(self, rule: str, message: str, index=None):
        super().__init__(message)
        self.rule, self.message, self.index = rule, message, index


def _constant(name):
    raise Invalid("json", f"{name} is not JSON")


def parse(data: bytes) -> list:
    """The events of a decoded body (a list of dicts), or Invalid naming the rule."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid("utf8", f"the payload is not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        doc = json.loads(text, parse_constant=_constant)
    except (ValueError, RecursionError) as e:
        raise Invalid("json", f"the payload is not JSON ({e})") from None
    events = [doc] if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise Invalid("shape", "the payload is an array of event objects, or one object")
    check(events)
    return events


def check(events: list) -> None:
    """Invalid for the first event that breaks a rule (see the module's doc)."""
    for i, ev in enumerate(events):
        if type(ev) is not dict:
            raise Invalid("shape", f"event {i} is not an object", i)
        et = ev.get("eventType")
        if type(et) is not str:
            raise Invalid("eventType", f"event {i} has no string eventType", i)
        if len(et) > MAX_NAME:
            raise Invalid("eventType_length", f"event {i}: eventType of {len(et)} characters (at most {MAX_NAME})", i)
        if not EVENT_TYPE.fullmatch(et):
            raise Invalid("eventType_chars", f"event {i}: eventType {et[:60]!r} has characters outside [A-Za-z0-9_:]", i)
        if len(ev) > MAX_ATTRIBUTES:
            raise Invalid("attribute_count", f"event {i}: {len(ev)} attributes (at most {MAX_ATTRIBUTES})", i)
        for name, value in ev.items():
            if len(name) > MAX_NAME:
                raise Invalid("attribute_name_length",
                              f"event {i}: attribute name of {len(name)} characters (at most {MAX_NAME})", i)
            t = type(value)
            if t is str:
                if len(value) > MAX_STRING:
                    raise Invalid("string_value_length",
                                  f"event {i}: attribute {name!r} is {len(value)} characters (at most {MAX_STRING})", i)
            elif t is float:
                if not math.isfinite(value):
                    raise Invalid("attribute_value_type", f"event {i}: attribute {name!r} is not a finite number", i)
            elif t is not int:
                kind = ("a boolean" if t is bool else "null" if value is None
                        else "an array" if t is list else "an object")
                raise Invalid("attribute_value_type",
                              f"event {i}: attribute {name!r} is {kind} (string, integer or float only: New Relic's documented types)", i)


class EventApi(standin.App):
    def __init__(self, key: str, max_ids: int, store_path: str = ""):
        super().__init__(max_ids, store_path)
        self.key = key
        self.accepted_batches = self.events = 0
        self.encoder = json.JSONEncoder(separators=(",", ":"))

    def route(self, req, path: str) -> None:
        if not EVENTS_PATH.fullmatch(path):
            return self.reject(req, 404, f"no such path: {path[:200]}")
        if req.command != "POST":
            return self.reject(req, 405, "POST only", headers={"Allow": "POST"})
        try:
            body = standin.read_body(req, READ_LIMIT)
        except standin.BodyError as e:
            self.received(b"")
            self.count_rejected(e.status)
            raise
        self.received(body)
        if self.apply_fault(req):
            return
        if not any(req.headers.get(h) == self.key for h in KEY_HEADERS):
            self.count_rejected(403)
            return self.reject(req, 403, "missing or invalid API key (Api-Key, X-Insert-Key or X-License-Key)")
        if len(body) > MAX_PAYLOAD:
            self.count_rejected(413)
            return self.reject(req, 413, f"payload of {len(body)} bytes as sent, over {MAX_PAYLOAD} (1MB, 10^6 bytes)")
        try:
            events = parse(standin.decode(body, req.headers.get("Content-Encoding", "")))
        except standin.BodyError as e:
            self.count_rejected(e.status)
            return self.reject(req, e.status, e.message)
        except Invalid as e:
            self.count_rejected(400)
            return req.reply_json(400, {"success": False, "error": e.message, "rule": e.rule, "event": e.index})
        lines = [self.encoder.encode(ev) + "\n" for ev in events] if self.store else []
        unanswered = self.faults.take_accept_then_close()
        with self.lock:
            self.write(lines)
            self.accepted_batches += 1
            self.events += len(events)
            for ev in events:
                self.ids.add(ev.get("event_id"))
            if unanswered:
                self.accepted_unanswered += 1
        if unanswered:
            return req.drop()
        req.reply_json(200, {"success": True, "uuid": str(uuid.uuid4())})

    def stats(self) -> dict:
        return {**self.base_stats(), "accepted_batches": self.accepted_batches, "events": self.events}


def options(argv: list):
    p = argparse.ArgumentParser(prog="event_api_standin.py", description="New Relic Event API stand-in (loopback only)")
    p.add_argument("--key", required=True, help="the accepted insert/license key")
    standin.add_options(p)
    opts = p.parse_args(argv)
    standin.check_options(p, opts)
    if not opts.key:
        p.error("--key: not empty")
    return opts


if __name__ == "__main__":
    opts = options(sys.argv[1:])
    standin.serve(EventApi(opts.key, opts.max_ids, opts.store), opts)
