"""A stand-in for the payment provider's two APIs, behind nginx limit_req (which answers
429 past the provider's rate, as real payment providers do). Behaves like the real thing otherwise:
every answer takes tens of milliseconds, with a long-ish tail.

  GET  /items/{id}     zone A, the information API: item data
  POST /v1/charges     the payment API

Usage: python provider.py PORT   (listens on 127.0.0.1 only)
"""

import asyncio
import json
import random
import sys

# Latency: lognormal, median ~25 ms (items) / ~40 ms (charges), p99 around 2.5x the median.
LATENCY = {"items": (0.025, 0.35), "charges": (0.040, 0.35)}


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            keep_alive = True
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value.strip() or 0)
                elif name == "connection" and value.strip().lower() == "close":
                    keep_alive = False
            if length:
                await reader.readexactly(length)
            path = path.split("?", 1)[0]
            if method == "GET" and path.startswith("/items/"):
                kind, body = "items", {"id": path[len("/items/"):], "price": 1200, "stock": 10}
                status = 200
            elif method == "POST" and path == "/v1/charges":
                kind, body = "charges", {"id": "ch_%016x" % random.getrandbits(64), "status": "succeeded"}
                status = 200
            else:
                kind, body, status = "items", {"error": "not found"}, 404
            median, sigma = LATENCY[kind]
            await asyncio.sleep(min(random.lognormvariate(0, sigma) * median, 1.0))
            payload = json.dumps(body).encode()
            writer.write(
                b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
                % (status, b"OK" if status == 200 else b"Not Found", len(payload),
                   b"" if keep_alive else b"Connection: close\r\n")
                + payload
            )
            await writer.drain()
            if not keep_alive:
                break
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
