"""A flood at the checkout: CONCURRENCY keep-alive connections each sending the same request
back to back for SECONDS, then it stops by itself. Loopback only.

  python flood.py PORT PATH CONCURRENCY SECONDS   -> JSON on stdout:
  {"per_second": [{"t": 0, "200": n, "503": n, ...}], "total": {...}, "shed": n}

"shed" counts the 503s that came from the flow control (nginx's {"error":"overloaded"}
body) rather than from the application.
"""

import asyncio
import collections
import json
import sys
import time


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length, chunked, close = None, False, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value:
            chunked = True
        elif name == "connection" and value == "close":
            close = True
    if chunked:
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            body += chunk[:-2]
            if size == 0:
                break
    elif length is not None:
        body = await reader.readexactly(length)
    else:
        body = await reader.read()
        close = True
    return status, body, close


async def worker(port, path, deadline, t0, counts, shed):
    request = f"GET {path} HTTP/1.1\r\nHost: checkout\r\n\r\n".encode()
    reader = writer = None
    while time.monotonic() < deadline:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            status, body, close = await asyncio.wait_for(read_response(reader), timeout=10)
            second = int(time.monotonic() - t0)
            counts[second][str(status)] += 1
            if status == 503 and b'"overloaded"' in body:
                shed[0] += 1
            if close:
                writer.close()
                writer = None
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError):
            counts[int(time.monotonic() - t0)]["error"] += 1
            if writer is not None:
                writer.close()
            writer = None
            await asyncio.sleep(0.01)
    if writer is not None:
        writer.close()


async def main() -> None:
    port, path, concurrency, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    t0 = time.monotonic()
    counts: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    shed = [0]
    await asyncio.gather(*(worker(port, path, t0 + seconds, t0, counts, shed) for _ in range(concurrency)))
    total = collections.Counter()
    for c in counts.values():
        total.update(c)
    print(json.dumps({
        "per_second": [{"t": s, **counts[s]} for s in sorted(counts)],
        "total": dict(total),
        "shed": shed[0],
    }))


if __name__ == "__main__":
    asyncio.run(main())
