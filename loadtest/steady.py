"""Steady checkout traffic for the fault matrix: CONCURRENCY buyers, each buying at RATE
checkouts a second (random gaps) for SECONDS at random ordinary shops, then it stops.
Every answer is classified by its status and body and written as one JSON line
{"t": seconds since start, "class": ..., "ms": latency} to OUT.

  python steady.py PORT CONCURRENCY RATE SECONDS OUT

Classes: paid (200), limited (503 from the limiter's denial), unavailable (503: the limiter
threw UnavailableException), shed (503 from nginx's flow control), provider (502),
error_<status> (anything else, e.g. 500 from a PHP error), io (no answer).
"""

import asyncio
import json
import random
import sys
import time

from httpclient import IO_ERRORS, fetch, local, session


def classify(status: int, body: bytes) -> str:
    if status == 200:
        return "paid"
    if status == 503:
        if b"limiter unavailable" in body:
            return "unavailable"
        if b"overloaded" in body:
            return "shed"
        return "limited"
    if status == 502:
        return "provider"
    return f"error_{status}"


async def buyer(s, port, rate, deadline, t0, out) -> None:
    while time.monotonic() < deadline:
        await asyncio.sleep(random.expovariate(rate))
        shop = f"shop-{random.randrange(1000)}"
        started = time.monotonic()
        try:
            cls = classify(*await fetch(s, local(port, f"/checkout.php?shop={shop}&channel=card")))
        except IO_ERRORS:
            cls = "io"
        out.write(json.dumps({"t": round(started - t0, 3), "class": cls, "ms": round((time.monotonic() - started) * 1000, 1)}) + "\n")


async def main() -> None:
    port, concurrency, rate, seconds, path = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    t0 = time.monotonic()
    # A new connection per checkout (5 s to connect, 10 s for the answer), as a buyer's browser.
    with open(path, "w", buffering=1) as out:
        async with session(keep_alive=False, connect_timeout=5, read_timeout=10) as s:
            await asyncio.gather(*(buyer(s, port, rate, t0 + seconds, t0, out) for _ in range(concurrency)))


if __name__ == "__main__":
    asyncio.run(main())
