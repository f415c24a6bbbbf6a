"""A TCP proxy on loopback that can add latency: the "slow Valkey" fault.

  python latency_proxy.py LISTEN_PORT TARGET_PORT CONTROL_FILE [STATS_FILE]

Forwards every connection to 127.0.0.1:TARGET_PORT. The added delay (ms, each direction,
per chunk) is read from CONTROL_FILE whenever it changes (0 or missing: none), so a fault
script switches it on and off by writing the file. Order within a connection is kept.
With STATS_FILE, the proxy keeps there (JSON, rewritten as it changes) how many client
connections began with a TLS handshake record (first byte 0x16: a ClientHello) and how many
with anything else ("plain": RESP begins with '*'): the TLS fault run's proof that the bytes
it forwarded were TLS. The bytes are forwarded as they are, never read further.
"""

import asyncio
import json
import os
import sys

delay = 0.0
stats = {"tls": 0, "plain": 0}
stats_file = ""


def count(first: bytes) -> None:
    """Counts a client connection by its first byte (see the docstring) into STATS_FILE."""
    if not stats_file:
        return
    stats["tls" if first[:1] == b"\x16" else "plain"] += 1
    tmp = stats_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump(stats, f)
    os.replace(tmp, stats_file)


async def watch(path: str) -> None:
    global delay
    last = None
    while True:
        try:
            mtime = os.stat(path).st_mtime_ns
            if mtime != last:
                last = mtime
                delay = float(open(path).read().strip() or 0) / 1000
        except (OSError, ValueError):
            delay = 0.0
        await asyncio.sleep(0.05)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, from_client: bool = False) -> None:
    first = from_client
    try:
        while data := await reader.read(65536):
            if first:
                count(data)
                first = False
            if delay:
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def handle(target: int, client_r, client_w) -> None:
    try:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
    except OSError:
        client_w.close()
        return
    await asyncio.gather(pipe(client_r, server_w, from_client=True), pipe(server_r, client_w))


async def main() -> None:
    global stats_file
    listen, target, control = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    stats_file = sys.argv[4] if len(sys.argv) > 4 else ""
    asyncio.create_task(watch(control))
    server = await asyncio.start_server(lambda r, w: handle(target, r, w), "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
