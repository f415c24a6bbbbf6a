"""A stand-in for the payment provider's two APIs, behind nginx limit_req (which answers
429 past the provider's rate, as real payment providers do). Behaves like the real thing otherwise:
every answer takes tens of milliseconds, with a long-ish tail.

  GET  /items/{id}     zone A, the information API: item data
  POST /v1/charges     the payment API

and the endpoint API (scripts/loadtest.sh endpoints), behind a global limit and one per
endpoint (deploy/config/local/nginx-provider.conf.tmpl):

  POST /v1/payment_intents              create a payment: {"id": "pi_...", "status":
                                        "requires_confirmation"}
  POST /v1/payment_intents/{id}/confirm confirm it: {"id": ..., "status": "succeeded"}
  GET  /v1/payment_intents/{id}         retrieve it (polling): {"id": ..., "status": ...}
  GET  /v1/items/{id}                   the account's item API ("zone A"): item data

(create and confirm take a charge's time, retrieve and items an item's; the provider keeps
no state: any id is found)

Usage: python provider.py PORT [options]   (listens on 127.0.0.1 only)

With --charges-schedule the provider enforces a payment limit of its own, one that moves
during the run (scripts/loadtest.sh adaptive): a token bucket for /v1/charges whose rate
follows the schedule, answering 429 past it (fast, as real providers do).

  --charges-schedule S:R,...  from S seconds after the schedule's start, R charges a
                              second (e.g. 0:27,15:18,30:45); the schedule's clock starts
                              with the first charge after POST /_schedule/arm (before
                              it, the first rate holds)
  --charges-burst N           the bucket's capacity (default 20); a change of rate keeps
                              its level (tokens neither added nor taken by a change)
  --retry-after-share F       the share of 429s that carry a Retry-After header (0 to 1,
                              default 0: none), drawn at random
  --retry-after SECONDS       that header's value (default 1)
  --log PATH                  one JSON line per charge, {"t": epoch seconds, "s": status,
                              "limit": the rate in force, "ra": Retry-After sent or null},
                              and {"event": "start", "t": ..., "schedule": [[S, R], ...],
                              "burst": N} where the schedule's clock starts
  --seed N                    seed of the random draws (latency, Retry-After)

A slow provider (scripts/loadtest.sh slow-provider), as real ones get slow: the payment API
serves at most C charges at once, first come first served (past C in flight a charge waits
for one to finish: queueing), and for a phase of the run its service time rises from
~40 ms to seconds (its incident). Both apply to charges it accepts; its 429s (its own
limit above, nginx's limit_req in front) stay fast, and the item API is not affected.

  --concurrency C             at most C charges served at once (default: env
                              PROVIDER_CONCURRENCY, else 0: no bound, every charge served
                              at once)
  --incident START:END:SECONDS  from START to END seconds on the run's clock, a charge's
                              service time is lognormal around SECONDS (sigma 0.2, at most
                              1.5x SECONDS) instead of ~40 ms (default: env
                              PROVIDER_INCIDENT, else none)
  --calls-log PATH            one JSON line per charge served, when its answer is sent:
                              {"t": arrival (epoch s), "shop": X-Shop-Id, "wait": seconds
                              queued for a free slot, "service": seconds served, "busy":
                              charges in service at its arrival, "incident": bool}; and
                              {"event": "start", "t": ..., "concurrency": C, "incident":
                              [START, END, SECONDS] or null} where the run's clock starts

The run's clock (the schedule's and the incident's) starts with the first charge, or with
the first charge after POST /_schedule/arm.

  POST /_schedule/arm         (on this port, not behind nginx) the next charge starts the
                              run's clock, the schedule's with a full bucket: the load's
                              first charge, not a probe's before it; answers {"armed": true}
                              (404 when neither a schedule nor an incident is set)
"""

import argparse
import asyncio
import heapq
import json
import os
import random
import sys
import time

# Latency: lognormal, median ~25 ms (items) / ~40 ms (charges), p99 around 2.5x the median;
# a throttled charge is answered fast (~5 ms): the provider refuses before doing any work.
LATENCY = {"items": (0.025, 0.35), "charges": (0.040, 0.35), "throttled": (0.005, 0.35)}
REASONS = {200: b"OK", 404: b"Not Found", 429: b"Too Many Requests"}
# The incident's service time: lognormal around its median, narrower than the normal
# tail, and at most 1.5x the median: without queueing it stays under the checkout's
# 3 s timeout for a median up to 2 s, so a timeout is the queue's doing.
INCIDENT_SIGMA, INCIDENT_CAP = 0.2, 1.5


def parse_incident(spec: str) -> tuple:
    """'8:16:1.5' -> (8.0, 16.0, 1.5): from 8 s to 16 s on the run's clock, service times
    around 1.5 s."""
    parts = spec.split(":")
    try:
        start, end, seconds = (float(x) for x in parts)
    except ValueError:
        raise ValueError(f"--incident: '{spec}' is not START:END:SECONDS") from None
    if start < 0 or end <= start or seconds <= 0:
        raise ValueError(f"--incident: '{spec}' needs 0 <= START < END and SECONDS above 0")
    return start, end, seconds


class Servers:
    """The provider's bounded concurrency: C servers, first come first served. A charge
    arriving at `now` with `service` seconds of work starts when a server is free (at once
    while fewer than C are busy) and ends `service` later; a charge whose client gave up
    keeps its server (the provider does not know). C = 0: no bound."""

    def __init__(self, concurrency: int):
        self.concurrency = concurrency
        self.free_at = [0.0] * concurrency   # a heap: when each server is next free

    def admit(self, now: float, service: float) -> tuple:
        """(start, end) of a charge arriving at `now`."""
        if not self.concurrency:
            return now, now + service
        start = max(now, heapq.heappop(self.free_at))
        heapq.heappush(self.free_at, start + service)
        return start, start + service

    def busy(self, now: float) -> int:
        """Servers at work at `now` (a charge admitted later may be queued behind them)."""
        return sum(1 for t in self.free_at if t > now)


def parse_schedule(spec: str) -> list:
    """'0:27,15:18,30:45' -> [(0.0, 27.0), (15.0, 18.0), (30.0, 45.0)]; the first step
    must be at 0, the steps in order, every rate above 0."""
    steps = []
    for part in spec.split(","):
        at, sep, rate = part.strip().partition(":")
        try:
            step = (float(at), float(rate))
        except ValueError:
            step = None
        if not sep or step is None or step[1] <= 0 or step[0] < 0:
            raise ValueError(f"--charges-schedule: '{part}' is not SECONDS:RATE (a rate above 0)")
        if steps and step[0] <= steps[-1][0]:
            raise ValueError(f"--charges-schedule: '{part}' is not after the step before it")
        steps.append(step)
    if not steps or steps[0][0] != 0:
        raise ValueError(f"--charges-schedule: '{spec}' must start at 0 seconds")
    return steps


class ChargeLimit:
    """The provider's own payment limit: a token bucket whose rate follows a schedule."""

    def __init__(self, schedule: list, burst: float, clock=time.time):
        self.schedule, self.burst, self.clock = schedule, burst, clock
        self.start = clock()
        self.level, self.last = burst, self.start

    def restart(self) -> float:
        self.start = self.last = self.clock()
        self.level = self.burst
        return self.start

    def rate_at(self, t: float) -> float:
        rate = self.schedule[0][1]
        for at, r in self.schedule:
            if t - self.start >= at:
                rate = r
        return rate

    def _refill(self, now: float) -> None:
        # The rate is piecewise constant: each piece between last and now adds its own tokens.
        t = self.last
        while t < now:
            edge = next((self.start + at for at, _ in self.schedule if self.start + at > t), float("inf"))
            upto = min(edge, now)
            self.level = min(self.burst, self.level + (upto - t) * self.rate_at(t))
            t = upto
        self.last = max(self.last, now)

    def take(self) -> tuple:
        """(admitted, rate in force, now)."""
        now = self.clock()
        self._refill(now)
        if self.level >= 1:
            self.level -= 1
            return True, self.rate_at(now), now
        return False, self.rate_at(now), now


class Provider:
    def __init__(self, opts, clock=time.time):
        self.limit = ChargeLimit(parse_schedule(opts.charges_schedule), opts.charges_burst) if opts.charges_schedule else None
        self.retry_share, self.retry_after = opts.retry_after_share, opts.retry_after
        self.log = open(opts.log, "a", buffering=1) if opts.log else None
        self.rng = random.Random(opts.seed)
        self.armed = self.armed_limit = False
        self.clock = clock
        self.incident = parse_incident(opts.incident) if opts.incident else None
        self.servers = Servers(opts.concurrency)
        self.calls_log = open(opts.calls_log, "a", buffering=1) if opts.calls_log else None
        self.started = None   # the run's clock (epoch s): the incident's phase counts from it

    @property
    def slow(self) -> bool:
        """Whether charges go through the slow provider (bounded concurrency, incident)."""
        return bool(self.incident or self.servers.concurrency)

    def start_clock(self, now: float) -> None:
        self.started = now
        if self.calls_log:
            self.calls_log.write(json.dumps({"event": "start", "t": round(now, 4), "concurrency": self.servers.concurrency,
                                             "incident": list(self.incident) if self.incident else None}) + "\n")

    def in_incident(self, now: float) -> bool:
        if not self.incident or self.started is None:
            return False
        return self.incident[0] <= now - self.started < self.incident[1]

    def service_time(self, now: float) -> float:
        """A charge's work at `now`: ~40 ms (as without a slow provider), or the incident's."""
        if self.in_incident(now):
            median = self.incident[2]
            return min(self.rng.lognormvariate(0, INCIDENT_SIGMA) * median, INCIDENT_CAP * median)
        median, sigma = LATENCY["charges"]
        return min(self.rng.lognormvariate(0, sigma) * median, 1.0)

    def serve(self, now: float, shop: str) -> tuple:
        """(seconds until the answer, the call-log line) of an accepted charge arriving at
        `now`: queued for a server, then served."""
        if self.started is None:
            self.start_clock(now)
        busy = self.servers.busy(now)
        incident = self.in_incident(now)
        service = self.service_time(now)
        start, end = self.servers.admit(now, service)
        line = {"t": round(now, 4), "shop": shop, "wait": round(start - now, 4), "service": round(service, 4),
                "busy": busy, "incident": incident}
        return end - now, line

    def charge(self) -> tuple:
        """(status, body, extra headers) of one POST /v1/charges."""
        if self.armed:
            self.armed = False
            if self.slow:
                self.start_clock(self.clock())
        if self.limit is None:
            return 200, {"id": "ch_%016x" % self.rng.getrandbits(64), "status": "succeeded"}, {}
        if self.armed_limit:
            self.armed_limit = False
            start = self.limit.restart()
            if self.log:
                self.log.write(json.dumps({"event": "start", "t": round(start, 4), "schedule": self.limit.schedule,
                                           "burst": self.limit.burst}) + "\n")
        ok, rate, now = self.limit.take()
        ra = None
        if ok:
            status, body, headers = 200, {"id": "ch_%016x" % self.rng.getrandbits(64), "status": "succeeded"}, {}
        else:
            status, headers = 429, {}
            body = {"error": {"type": "rate_limit_error", "message": "Too many requests"}}
            if self.retry_share > 0 and self.rng.random() < self.retry_share:
                ra = self.retry_after
                headers["Retry-After"] = "%g" % ra
        if self.log:
            self.log.write(json.dumps({"t": round(now, 4), "s": status, "limit": rate, "ra": ra}) + "\n")
        return status, body, headers

    def endpoint_api(self, method: str, path: str) -> tuple:
        """(latency kind, body) of a call to the endpoint API; {"error": ...} when the path
        or method is none of its four."""
        parts = path.strip("/").split("/")
        if method == "POST" and parts == ["v1", "payment_intents"]:
            return "charges", {"id": "pi_%016x" % self.rng.getrandbits(64), "status": "requires_confirmation"}
        if method == "POST" and len(parts) == 4 and parts[:2] == ["v1", "payment_intents"] and parts[3] == "confirm" and parts[2]:
            return "charges", {"id": parts[2], "status": "succeeded"}
        if method == "GET" and len(parts) == 3 and parts[:2] == ["v1", "payment_intents"] and parts[2]:
            return "items", {"id": parts[2], "status": "succeeded"}
        if method == "GET" and len(parts) == 3 and parts[:2] == ["v1", "items"] and parts[2]:
            return "items", {"id": parts[2], "price": 1200, "stock": 10}
        return "items", {"error": "not found"}

    def arm(self) -> dict:
        if self.limit is None and not self.incident:
            return {"error": "no --charges-schedule and no --incident"}
        self.armed = True
        self.armed_limit = self.limit is not None
        return {"armed": True}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = 0
                keep_alive = True
                shop = ""
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    name = name.strip().lower()
                    if name == "content-length":
                        length = int(value.strip() or 0)
                    elif name == "connection" and value.strip().lower() == "close":
                        keep_alive = False
                    elif name == "x-shop-id":
                        shop = value.strip()
                if length:
                    await reader.readexactly(length)
                path = path.split("?", 1)[0]
                headers = {}
                if method == "GET" and path.startswith("/items/"):
                    kind, body = "items", {"id": path[len("/items/"):], "price": 1200, "stock": 10}
                    status = 200
                elif method == "POST" and path == "/v1/charges":
                    status, body, headers = self.charge()
                    kind = "charges" if status == 200 else "throttled"
                elif path.startswith("/v1/payment_intents") or path.startswith("/v1/items/"):
                    kind, body = self.endpoint_api(method, path)
                    status = 404 if "error" in body else 200
                elif method == "POST" and path == "/_schedule/arm":
                    kind, body = None, self.arm()
                    status = 200 if "armed" in body else 404
                else:
                    kind, body, status = "items", {"error": "not found"}, 404
                call = None
                if kind == "charges" and self.slow:
                    delay, call = self.serve(self.clock(), shop)
                    await asyncio.sleep(delay)
                elif kind:
                    median, sigma = LATENCY[kind]
                    await asyncio.sleep(min(self.rng.lognormvariate(0, sigma) * median, 1.0))
                payload = json.dumps(body).encode()
                extra = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in headers.items())
                writer.write(
                    b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s%s\r\n"
                    % (status, REASONS.get(status, b"Error"), len(payload), extra,
                       b"" if keep_alive else b"Connection: close\r\n")
                    + payload
                )
                if call is not None and self.calls_log:
                    self.calls_log.write(json.dumps(call) + "\n")
                await writer.drain()
                if not keep_alive:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()


def options(argv: list):
    p = argparse.ArgumentParser(prog="provider.py", description="the mock payment provider (loopback only)")
    p.add_argument("port", type=int)
    p.add_argument("--charges-schedule", default="")
    p.add_argument("--charges-burst", type=float, default=20)
    p.add_argument("--retry-after-share", type=float, default=0.0)
    p.add_argument("--retry-after", type=float, default=1.0)
    p.add_argument("--log", default="")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--concurrency", default=os.environ.get("PROVIDER_CONCURRENCY") or "0")
    p.add_argument("--incident", default=os.environ.get("PROVIDER_INCIDENT") or "")
    p.add_argument("--calls-log", default="")
    opts = p.parse_args(argv)
    try:
        opts.concurrency = int(opts.concurrency)
    except ValueError:
        p.error(f"--concurrency (or PROVIDER_CONCURRENCY): '{opts.concurrency}' is not a whole number")
    if opts.concurrency < 0:
        p.error(f"--concurrency (or PROVIDER_CONCURRENCY): {opts.concurrency} is below 0")
    if opts.incident:
        try:
            parse_incident(opts.incident)
        except ValueError as e:
            p.error(f"{e} (--incident or PROVIDER_INCIDENT)")
    if opts.charges_schedule:
        try:
            parse_schedule(opts.charges_schedule)
        except ValueError as e:
            p.error(str(e))
    if opts.charges_burst < 1:
        p.error(f"--charges-burst: {opts.charges_burst:g} is below 1")
    if not 0 <= opts.retry_after_share <= 1:
        p.error(f"--retry-after-share: {opts.retry_after_share:g} is not between 0 and 1")
    if opts.retry_after <= 0:
        p.error(f"--retry-after: {opts.retry_after:g} is not above 0")
    return opts


async def main(opts) -> None:
    provider = Provider(opts)
    server = await asyncio.start_server(provider.handle, "127.0.0.1", opts.port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(options(sys.argv[1:])))
