"""A TCP proxy on loopback that can add latency: the "slow Valkey" fault.

  python latency_proxy.py LISTEN_PORT TARGET_PORT CONTROL_FILE

Forwards every connection to 127.0.0.1:TARGET_PORT. The added delay (ms, each direction,
per chunk) is read from CONTROL_FILE whenever it changes (0 or missing: none), so a fault
script switches it on and off by writing the file. Order within a connection is kept.
"""

import asyncio
import os
import sys

delay = 0.0


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


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
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
    await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))


async def main() -> None:
    listen, target, control = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    asyncio.create_task(watch(control))
    server = await asyncio.start_server(lambda r, w: handle(target, r, w), "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
