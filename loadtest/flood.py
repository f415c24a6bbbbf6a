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

from httpclient import IO_ERRORS, Repeater


async def worker(port, path, deadline, t0, counts, shed):
    r = Repeater(port, path)
    while time.monotonic() < deadline:
        try:
            status, body = await asyncio.wait_for(r.get(), timeout=10)
            counts[int(time.monotonic() - t0)][str(status)] += 1
            if status == 503 and b'"overloaded"' in body:
                shed[0] += 1
        except IO_ERRORS:
            counts[int(time.monotonic() - t0)]["error"] += 1
            r.close()
            await asyncio.sleep(0.01)
    r.close()


async def main() -> None:
    port, path, concurrency, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    t0 = time.monotonic()
    counts: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    shed = [0]
    # One keep-alive connection per worker, each request given 10 s.
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
