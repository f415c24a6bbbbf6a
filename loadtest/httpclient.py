"""The one HTTP client of the load-test tooling, on aiohttp: the flood (flood.py), the
steady buyers (steady.py), the kubelet-like prober and the php-fpm status sampler
(health_experiment.py), the fault matrix's look for a busy worker (faults.py).

Loopback only: every URL is built by `local(port, path)`.

    async with session(connections=64) as s:        # keep-alive, at most 64 connections
        status, body = await fetch(s, local(port, "/checkout.php?shop=a"))

    get_json(local(ops_port, "/fpm-status?json"), timeout=2)   # from synchronous code
"""

import asyncio
import json

import aiohttp

# What a request can fail with short of an HTTP answer: refused or reset connections,
# timeouts, malformed answers.
IO_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError)


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
