"""The endpoint scenario's load (issue 42; scripts/loadtest.sh endpoints): checkouts that
create then confirm a payment (intent.php) from ordinary shops and from one hot shop with a
sale on, while one endpoint of the same provider account is flooded (lookup.php): the hot
shop's product page (the items API, "zone A") or a payment's status polled (retrieve).

  OrdinaryBuyer  ORDINARY_USERS (8) x ORDINARY_RATE (1/s): checkouts across 20 shops
  HotBuyer       HOT_BUYERS (8) x HOT_RATE (1/s): checkouts at HOT_SHOP (flash-1)
  Browser        BROWSERS (5) x BROWSE_RATE (1/s): ordinary shops' reads of FLOOD_ENDPOINT
  Flooder        FLOOD_USERS (30) x FLOOD_RATE (4/s): HOT_SHOP's reads of FLOOD_ENDPOINT
                 (~100/s); none in SCENARIO=baseline

Each user waits a random 0.5 to 1.5 times 1/RATE between requests. Environment: SCENARIO
(baseline or flood), DURATION (s), FLOOD_ENDPOINT (items or retrieve) and the knobs above.
Run with `locust --headless -f loadtest/locust_endpoints.py --host URL`.
"""

import os
import random

import gevent
from locust import LoadTestShape, between, task
from locust.contrib.fasthttp import FastHttpUser

SCENARIO = os.environ.get("SCENARIO", "flood")
DURATION = float(os.environ.get("DURATION", "15"))
HOT_SHOP = os.environ.get("HOT_SHOP", "flash-1")
FLOOD_ENDPOINT = os.environ.get("FLOOD_ENDPOINT", "items")
ORDINARY_USERS = int(os.environ.get("ORDINARY_USERS", "8"))
ORDINARY_RATE = float(os.environ.get("ORDINARY_RATE", "1"))
HOT_BUYERS = int(os.environ.get("HOT_BUYERS", "8"))
HOT_RATE = float(os.environ.get("HOT_RATE", "1"))
BROWSERS = int(os.environ.get("BROWSERS", "5"))
BROWSE_RATE = float(os.environ.get("BROWSE_RATE", "1"))
FLOOD_USERS = int(os.environ.get("FLOOD_USERS", "30"))
FLOOD_RATE = float(os.environ.get("FLOOD_RATE", "4"))
if SCENARIO not in ("baseline", "flood"):
    raise SystemExit(f"SCENARIO must be baseline or flood, got '{SCENARIO}'")
if FLOOD_ENDPOINT not in ("items", "retrieve"):
    raise SystemExit(f"FLOOD_ENDPOINT must be items or retrieve, got '{FLOOD_ENDPOINT}'")


def read_path(shop: str) -> str:
    ident = "popular" if FLOOD_ENDPOINT == "items" else "pi_poll%03d" % random.randrange(1000)
    return "/lookup.php?shop=%s&what=%s&id=%s" % (shop, FLOOD_ENDPOINT, ident)


class Paced(FastHttpUser):
    abstract = True
    rate = 1.0

    def on_start(self):
        gevent.sleep(random.random() / self.rate)   # arrivals not in lockstep


class OrdinaryBuyer(Paced):
    rate = ORDINARY_RATE
    wait_time = between(0.5 / ORDINARY_RATE, 1.5 / ORDINARY_RATE)
    fixed_count = ORDINARY_USERS

    @task
    def buy(self):
        shop = "shop-%02d" % random.randrange(20)
        self.client.get("/intent.php?shop=%s&item=item-%d" % (shop, random.randrange(100)), name="ordinary")


class HotBuyer(Paced):
    rate = HOT_RATE
    wait_time = between(0.5 / HOT_RATE, 1.5 / HOT_RATE)
    fixed_count = HOT_BUYERS

    @task
    def buy(self):
        self.client.get("/intent.php?shop=%s&item=popular" % HOT_SHOP, name="hot")


class Browser(Paced):
    rate = BROWSE_RATE
    wait_time = between(0.5 / BROWSE_RATE, 1.5 / BROWSE_RATE)
    fixed_count = BROWSERS

    @task
    def read(self):
        self.client.get(read_path("shop-%02d" % random.randrange(20)), name="browse")


class Flooder(Paced):
    rate = FLOOD_RATE
    wait_time = between(0.5 / FLOOD_RATE, 1.5 / FLOOD_RATE)
    fixed_count = FLOOD_USERS

    @task
    def read(self):
        self.client.get(read_path(HOT_SHOP), name="flood")


class Scenario(LoadTestShape):
    """Everybody from the start (the flood too: it is on before the checkouts are measured);
    the run stops after DURATION."""

    use_common_options = True

    def tick(self):
        if self.get_run_time() >= DURATION:
            return None
        classes = [c for c, n in ((OrdinaryBuyer, ORDINARY_USERS), (HotBuyer, HOT_BUYERS), (Browser, BROWSERS)) if n]
        total = ORDINARY_USERS + HOT_BUYERS + BROWSERS
        if SCENARIO == "flood" and FLOOD_USERS:
            classes.append(Flooder)
            total += FLOOD_USERS
        return (total, 1000, classes)
