"""What the two delivery stand-ins share (loadtest/event_api_standin.py, New Relic's Event
API; loadtest/otlp_receiver.py, an OTLP/HTTP receiver): a bounded HTTP/1.1 server on
loopback, bodies read within a limit and decompressed within another, the fault queue of
POST /_control, and the count of events by their `event_id`.

Faults (POST /_control, a JSON object; the answer is the control state as JSON):

  {"faults": [{"status": 429, "retry_after": 2, "count": 3},   answered 429 + Retry-After
              {"status": 503, "count": 2},                      answered 503
              {"delay_ms": 500, "count": 1},                    answered late (then as usual)
              {"close": true, "count": 1}]}                     read, then the connection
                                                                dropped unanswered and
                                                                nothing stored (a lost request)
     appended to a queue applied in order to the next POSTs to the data paths, each entry
     `count` times (default 1); delay_ms may go with status or close.
  {"down_until": UNIX_SECONDS}     every data POST answered 503 until then (0: up again)
  {"accept_then_close": N}         the next N batches that would be accepted are stored,
                                   then the connection is dropped unanswered (a lost
                                   reply: the client sends them again, duplicates)
  {"clear": true}                  drops the queued faults, down_until, accept_then_close

A data POST meets, in order: down_until, the fault queue, then the endpoint's own checks.
"""

import argparse
import collections
import ipaddress
import json
import signal
import socket
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_CONNECTIONS = 64          # connections served at once; the next ones wait in the backlog
IDLE_SECONDS = 30             # an idle keep-alive connection is closed after this
CONTROL_BODY = 64 * 1024      # the largest /_control body
MAX_QUEUED_FAULTS = 1000
MAX_FAULT_COUNT = 1_000_000
MAX_DELAY_MS = 60_000
MAX_INFLATED = 64 * 1024 * 1024   # the largest decompressed body (a gzip bomb is refused)


class BodyError(Exception):
    """A request the stand-in refuses before looking at its content: (status, message)."""

    def __init__(self, status: int, message: str, close: bool = False):
        super().__init__(message)
        self.status, self.message, self.close = status, message, close


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# The most of a body over the limit read away before its 413 is answered (more: closed
# unread).
MAX_DISCARD = 64 << 20


def read_body(handler, limit: int) -> bytes:
    """The request's body as sent (Content-Length or chunked), at most `limit` bytes:
    past it, BodyError 413 and the connection closed (a declared length read away first,
    up to MAX_DISCARD; a chunked body closed unread)."""
    handler.body_read = True
    te = handler.headers.get("Transfer-Encoding", "").lower()
    if "chunked" in te:
        parts, total = [], 0
        while True:
            line = handler.rfile.readline(1026)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise BodyError(400, "bad chunk size", close=True) from None
            if size == 0:
                while handler.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                    pass   # trailers
                return b"".join(parts)
            total += size
            if total > limit:
                raise BodyError(413, f"body over {limit} bytes", close=True)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline(8)
    length = handler.headers.get("Content-Length")
    if length is None:
        raise BodyError(411, "no Content-Length", close=True)
    try:
        n = int(length)
    except ValueError:
        raise BodyError(400, f"invalid Content-Length '{length}'", close=True) from None
    if n < 0:
        raise BodyError(400, f"invalid Content-Length '{length}'", close=True)
    if n > limit:
        # Read away first (nginx's lingering close, Go's server): closed with the body
        # unread, the connection is reset under a client still sending, and the 413 lost.
        left = n if n <= MAX_DISCARD else 0
        while left > 0 and (chunk := handler.rfile.read(min(left, 1 << 16))):
            left -= len(chunk)
        raise BodyError(413, f"body of {n} bytes, over {limit}", close=True)
    body = handler.rfile.read(n)
    if len(body) != n:
        raise BodyError(400, "body shorter than its Content-Length", close=True)
    return body


def decode(body: bytes, encoding: str, limit: int = MAX_INFLATED) -> bytes:
    """The body decompressed per Content-Encoding: gzip, deflate (zlib, or raw deflate as
    some clients send) or identity; at most `limit` bytes once inflated."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise BodyError(415, f"Content-Encoding '{encoding}' not supported (gzip, deflate, identity)")
    tries = (zlib.MAX_WBITS | 16,) if encoding != "deflate" else (zlib.MAX_WBITS, -zlib.MAX_WBITS)
    for wbits in tries:
        d = zlib.decompressobj(wbits)
        try:
            out = d.decompress(body, limit + 1)
        except zlib.error:
            continue
        if len(out) > limit or d.unconsumed_tail:
            raise BodyError(413, f"body over {limit} bytes once decompressed")
        if not d.eof:
            continue
        return out
    raise BodyError(400, f"body is not valid {encoding} data")


class Faults:
    """The fault queue and the down window of POST /_control (see the module's doc)."""

    def __init__(self, clock=time.time):
        self.clock = clock
        self.lock = threading.Lock()
        self.queue = collections.deque()   # [fault dict, remaining count]
        self.down_until = 0.0
        self.accept_then_close = 0
        self.partial_reject = 0
        self.partial_claim = 0

    @staticmethod
    def check(fault) -> dict:
        if not isinstance(fault, dict):
            raise ValueError("a fault is a JSON object")
        unknown = set(fault) - {"status", "retry_after", "delay_ms", "close", "count"}
        if unknown:
            raise ValueError(f"unknown fault keys: {sorted(unknown)}")
        status, close, delay = fault.get("status"), fault.get("close", False), fault.get("delay_ms", 0)
        if status is not None and (type(status) is not int or not 400 <= status <= 599):
            raise ValueError(f"status {status!r}: a 4xx or 5xx")
        if type(close) is not bool:
            raise ValueError("close: true or false")
        if status is not None and close:
            raise ValueError("a fault answers (status) or drops the connection (close), not both")
        if type(delay) not in (int, float) or not 0 <= delay <= MAX_DELAY_MS:
            raise ValueError(f"delay_ms {delay!r}: 0 to {MAX_DELAY_MS}")
        if status is None and not close and not delay:
            raise ValueError("a fault needs status, close or delay_ms")
        ra = fault.get("retry_after")
        if ra is not None and (status is None or not (type(ra) is int and ra >= 0 or isinstance(ra, str) and ra.isprintable())):
            raise ValueError("retry_after: whole seconds (or an HTTP date string), with a status")
        count = fault.get("count", 1)
        if type(count) is not int or not 1 <= count <= MAX_FAULT_COUNT:
            raise ValueError(f"count {count!r}: 1 to {MAX_FAULT_COUNT}")
        return {"status": status, "retry_after": ra, "delay_ms": delay, "close": close, "count": count}

    def control(self, spec) -> None:
        """Applies one /_control body; ValueError (nothing applied) when any part is wrong."""
        if not isinstance(spec, dict):
            raise ValueError("the body is a JSON object")
        unknown = set(spec) - {"faults", "down_until", "accept_then_close", "partial_reject", "partial_claim", "clear"}
        if unknown:
            raise ValueError(f"unknown keys: {sorted(unknown)}")
        faults = spec.get("faults", [])
        if not isinstance(faults, list):
            raise ValueError("faults: a list")
        faults = [self.check(f) for f in faults]
        down = spec.get("down_until")
        if down is not None and (type(down) not in (int, float) or down < 0):
            raise ValueError("down_until: unix seconds")
        atc = spec.get("accept_then_close")
        if atc is not None and (type(atc) is not int or not 0 <= atc <= MAX_FAULT_COUNT):
            raise ValueError(f"accept_then_close: 0 to {MAX_FAULT_COUNT}")
        partial = spec.get("partial_reject")
        if partial is not None and (type(partial) is not int or not 0 <= partial <= 1_000_000):
            raise ValueError("partial_reject: 0 to 1000000")
        claim = spec.get("partial_claim")
        if claim is not None and (type(claim) is not int or not 0 <= claim <= 1_000_000_000):
            raise ValueError("partial_claim: 0 to 1000000000")
        with self.lock:
            if (0 if spec.get("clear") else len(self.queue)) + len(faults) > MAX_QUEUED_FAULTS:
                raise ValueError(f"at most {MAX_QUEUED_FAULTS} queued faults")
            if spec.get("clear"):
                self.queue.clear()
                self.down_until, self.accept_then_close, self.partial_reject = 0.0, 0, 0
            self.queue.extend([f, f["count"]] for f in faults)
            if down is not None:
                self.down_until = float(down)
            if atc is not None:
                self.accept_then_close = atc
            if partial is not None:
                self.partial_reject = partial
            if claim is not None:
                self.partial_claim = claim

    def next(self):
        """The fault for this data POST, or None: 503 while down, else the queue's head."""
        with self.lock:
            if self.clock() < self.down_until:
                return {"status": 503, "retry_after": None, "delay_ms": 0, "close": False, "down": True}
            if not self.queue:
                return None
            head = self.queue[0]
            head[1] -= 1
            if head[1] <= 0:
                self.queue.popleft()
            return head[0]

    def take_partial_claim(self) -> int:
        """A refusal count the next data POST claims whatever it held (a receiver's bug), once."""
        with self.lock:
            n, self.partial_claim = self.partial_claim, 0
            return n

    def take_partial_reject(self) -> int:
        """The records the next data POST refuses by a partial success (OTLP), once."""
        with self.lock:
            n, self.partial_reject = self.partial_reject, 0
            return n

    def take_accept_then_close(self) -> bool:
        with self.lock:
            if self.accept_then_close > 0:
                self.accept_then_close -= 1
                return True
            return False

    def state(self) -> dict:
        with self.lock:
            return {"queued": [dict(f, count=n) for f, n in self.queue], "down_until": self.down_until,
                    "accept_then_close": self.accept_then_close}


class Ids:
    """Events counted by their `event_id`: a second sighting is a duplicate. At most
    `limit` ids are kept; past that, new ids are counted as untracked (never as duplicates)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.seen = set()
        self.duplicates = self.without_id = self.untracked = 0

    def add(self, eid) -> None:
        if eid is None:
            self.without_id += 1
        elif eid in self.seen:
            self.duplicates += 1
        elif len(self.seen) < self.limit:
            self.seen.add(eid)
        else:
            self.untracked += 1

    def stats(self) -> dict:
        return {"duplicates": self.duplicates, "distinct_ids": len(self.seen), "without_id": self.without_id,
                "ids_untracked": self.untracked}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_SECONDS
    server_version = "checkout-guard-standin"

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format, *args):   # noqa: A002 (the base class's name)
        pass

    def _dispatch(self):
        self.body_read = False
        try:
            self.server.app.dispatch(self)
        except (TimeoutError, ConnectionError):
            self.close_connection = True   # the client went quiet or away mid-request

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _dispatch

    def reply(self, status: int, body: bytes = b"", content_type: str = "application/json", headers=None,
              close: bool = False) -> None:
        if not self.body_read and (self.headers.get("Content-Length", "0") not in ("", "0")
                                   or "chunked" in self.headers.get("Transfer-Encoding", "").lower()):
            close = True   # a body left unread: the connection cannot carry another request
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def reply_json(self, status: int, obj, headers=None, close: bool = False) -> None:
        self.reply(status, json.dumps(obj).encode(), headers=headers, close=close)

    def drop(self) -> None:
        """No answer: the connection is closed (the client sees it close before a reply)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, app, max_connections: int = MAX_CONNECTIONS):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        self.slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, Handler)

    def process_request(self, request, client_address):
        self.slots.acquire()   # at most max_connections threads; the accept loop waits
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class App:
    """The routes both stand-ins have; a stand-in adds its data paths in `route`."""

    def __init__(self, max_ids: int, store_path: str = ""):
        self.lock = threading.Lock()
        self.faults = Faults()
        self.ids = Ids(max_ids)
        self.store = open(store_path, "a", encoding="utf-8") if store_path else None
        self.posts = self.bytes_in = self.closed = self.accepted_unanswered = 0
        self.rejected = collections.Counter()

    def dispatch(self, req) -> None:
        path = req.path.split("?", 1)[0]
        try:
            if path == "/_control":
                if req.command != "POST":
                    return req.reply_json(405, {"error": "POST only"}, headers={"Allow": "POST"})
                try:
                    spec = json.loads(read_body(req, CONTROL_BODY) or b"{}")
                    self.faults.control(spec)
                except (ValueError, UnicodeDecodeError) as e:
                    return req.reply_json(400, {"error": str(e)})
                return req.reply_json(200, self.faults.state())
            if path == "/_stats":
                if req.command not in ("GET", "HEAD"):
                    return req.reply_json(405, {"error": "GET only"}, headers={"Allow": "GET"})
                with self.lock:
                    stats = self.stats()
                return req.reply_json(200, stats)
            self.route(req, path)
        except BodyError as e:
            self.reject(req, e.status, e.message, close=e.close)

    def route(self, req, path: str) -> None:
        raise NotImplementedError

    def reject(self, req, status: int, message: str, headers=None, close: bool = False) -> None:
        req.reply_json(status, {"success": False, "error": message}, headers=headers, close=close)

    def count_rejected(self, status: int) -> None:
        with self.lock:
            self.rejected[str(status)] += 1

    def received(self, body: bytes) -> None:
        with self.lock:
            self.posts += 1
            self.bytes_in += len(body)

    def apply_fault(self, req) -> bool:
        """Whether a fault answered (or dropped) this data POST."""
        fault = self.faults.next()
        if fault is None:
            return False
        if fault["delay_ms"]:
            time.sleep(fault["delay_ms"] / 1000)
        if fault["close"]:
            with self.lock:
                self.closed += 1
            req.drop()
            return True
        if fault["status"] is None:
            return False   # a delay only: answered as usual
        self.count_rejected(fault["status"])
        headers = {} if fault["retry_after"] is None else {"Retry-After": str(fault["retry_after"])}
        why = "down (down_until)" if fault.get("down") else "injected fault"
        self.reject(req, fault["status"], f"{why}: {fault['status']}", headers=headers)
        return True

    def write(self, lines: list) -> None:
        """Appends JSON lines to the store (under the app's lock), flushed."""
        if self.store and not self.store.closed and lines:
            self.store.write("".join(lines))
            self.store.flush()

    def base_stats(self) -> dict:
        return {"posts": self.posts, "bytes_in": self.bytes_in, "rejected": dict(self.rejected),
                "closed": self.closed, "accepted_unanswered": self.accepted_unanswered, **self.ids.stats()}

    def stats(self) -> dict:
        return self.base_stats()


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="0: a free port (default)")
    p.add_argument("--store", default="", help="append what is accepted to FILE, one JSON line each")
    p.add_argument("--max-ids", type=int, default=5_000_000,
                   help="event ids remembered for the duplicate count (default 5,000,000)")
    p.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS)
    p.add_argument("--max-seconds", type=float, default=0, help="exit after this long (default 0: until stopped)")


def check_options(p: argparse.ArgumentParser, opts) -> None:
    if not loopback(opts.host):
        p.error(f"--host {opts.host}: not a loopback address (this stand-in listens on loopback only)")
    if not 0 <= opts.port <= 65535:
        p.error(f"--port {opts.port}: 0 to 65535")
    if opts.max_ids < 0 or opts.max_connections < 1 or opts.max_seconds < 0:
        p.error("--max-ids >= 0, --max-connections >= 1, --max-seconds >= 0")


def serve(app: App, opts) -> None:
    """Listens, prints `listening on http://HOST:PORT` as the first line, serves until
    SIGTERM/SIGINT (or --max-seconds)."""
    host = "127.0.0.1" if opts.host == "localhost" else opts.host
    server = Server((host, opts.port), app, opts.max_connections)
    port = server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"listening on http://{shown}:{port}", flush=True)

    def stop(*_):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if opts.max_seconds:
        timer = threading.Timer(opts.max_seconds, server.shutdown)
        timer.daemon = True
        timer.start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        if app.store:
            with app.lock:
                app.store.close()
    sys.exit(0)
