"""The one HTTP client of the load-test tooling: the steady buyers (steady.py), the
kubelet-like prober and the php-fpm status sampler (health_experiment.py), the fault
matrix's look for a busy worker (faults.py) on aiohttp; the flood (flood.py) on `Repeater`.

Loopback only: every URL is built by `local(port, path)`.

    async with session(connections=64) as s:        # keep-alive, at most 64 connections
        status, body = await fetch(s, local(port, "/checkout.php?shop=a"))

    get_json(local(ops_port, "/fpm-status?json"), timeout=2)   # from synchronous code

    r = Repeater(port, "/checkout.php?shop=flash")  # the same GET again and again
    status, body = await r.get()

Why the flood has its own: it exists to send as many requests as one process can, and
aiohttp's per-request work caps it at about 11,500 requests/s on the 2-core machine, where
writing a fixed request and parsing the answers with httptools (llhttp, Node.js's parser)
does about 39,000 (scripts/health-experiment.sh's stack, 48 connections). At the lower
rate a probe finds a free php-fpm slot during the flood several times more often, and the
health experiment's readiness verdict stops being stable.
"""

import asyncio
import json

import aiohttp
import httptools

# What a request can fail with short of an HTTP answer: refused or reset connections,
# timeouts, malformed answers.
IO_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError, httptools.HttpParserError)


def local(port: int, path: str) -> str:
    return f"http://127.0.0.1:{port}{path}"


def session(*, connections: int = 0, keep_alive: bool = True, connect_timeout: float | None = None,
            read_timeout: float | None = None, total_timeout: float | None = None) -> aiohttp.ClientSession:
    """A client session. connections: at most that many at once (0: no limit). keep_alive
    False: one connection per request, closed after it (Connection: close). Timeouts in
    seconds: to connect, for each read, for the whole request (None: none)."""
    connector = aiohttp.TCPConnector(limit=connections, force_close=not keep_alive)
    timeout = aiohttp.ClientTimeout(total=total_timeout, sock_connect=connect_timeout, sock_read=read_timeout)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)


async def fetch(s: aiohttp.ClientSession, url: str, *, headers: dict | None = None,
                read_body: bool = True) -> tuple[int, bytes]:
    """GET url: (status, body). read_body False: only the status line and headers are
    waited for (the body is dropped with the connection)."""
    async with s.get(url, headers=headers, allow_redirects=False) as r:
        return r.status, (await r.read() if read_body else b"")


def error_name(e: BaseException) -> str:
    """What went wrong, named as the socket layer names it (ConnectionRefusedError, ...)."""
    if isinstance(e, asyncio.TimeoutError):
        return "timeout"
    if isinstance(e, aiohttp.ClientConnectorError) and e.os_error is not None:
        return type(e.os_error).__name__
    return type(e).__name__


async def get_json_async(url: str, timeout: float) -> dict:
    async with session(keep_alive=False, total_timeout=timeout) as s:
        status, body = await fetch(s, url)
    return json.loads(body)


def get_json(url: str, timeout: float) -> dict:
    """GET url from synchronous code and decode its JSON body (raises IO_ERRORS)."""
    return asyncio.run(get_json_async(url, timeout))


class _Answers(asyncio.Protocol):
    """One connection's answers, parsed by httptools as they arrive; each resolves `waiter`
    with (status, body, keep_alive)."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport = None
        self.waiter: asyncio.Future | None = None
        self.body: list = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(e)
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self._fail(exc or ConnectionResetError("connection closed before the answer"))

    def on_message_begin(self) -> None:
        self.body = []

    def on_body(self, chunk: bytes) -> None:
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.parser.get_status_code(), b"".join(self.body), self.parser.should_keep_alive()))

    def _fail(self, exc: BaseException) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)


class Repeater:
    """One keep-alive connection to 127.0.0.1:port sending `GET path` again and again (a new
    connection when the server closed it). get() raises IO_ERRORS; after one, close()."""

    def __init__(self, port: int, path: str) -> None:
        self.port = port
        self.request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        self.conn: _Answers | None = None

    async def get(self) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        if self.conn is None or self.conn.transport.is_closing():
            _, self.conn = await loop.create_connection(_Answers, "127.0.0.1", self.port)
        self.conn.waiter = loop.create_future()
        self.conn.transport.write(self.request)
        status, body, keep_alive = await self.conn.waiter
        if not keep_alive:
            self.close()
        return status, body

    def close(self) -> None:
        if self.conn is not None:
            self.conn.transport.close()
            self.conn = None
