"""Flash-sale load on the example checkout, for three production patterns of flash sales.

Ordinary shops buy at a steady rate the whole time; the scenario adds hot shops:
  baseline  no hot shop (the ordinary shops' reference numbers)
  flood     one product of one shop flooded from the start
  lottery   a lottery / pre-order opening at a set second: from near zero to a spike
  multi     several shops start popular sales at the same moment

Rates are set by users and their think time: each user waits a random 0.5 to 1.5 times
1/RATE between checkouts (arrivals are not in lockstep), so a user's rate is a little
below RATE (the checkout's own latency adds to the wait); the verdict reports what was
actually offered. Environment: SCENARIO, DURATION (s), HOT_SHOPS (comma list), plus the
scale knobs below. Run with `locust --headless -f loadtest/locustfile.py --host URL`.
"""

import itertools
import os
import random

import gevent
from locust import LoadTestShape, between, task
from locust.contrib.fasthttp import FastHttpUser

SCENARIO = os.environ.get("SCENARIO", "flood")
DURATION = float(os.environ.get("DURATION", "30"))
HOT_SHOPS = [s for s in os.environ.get("HOT_SHOPS", "flash-1").split(",") if s]
ORDINARY_USERS = int(os.environ.get("ORDINARY_USERS", "10"))     # 10 x ~1.4/s = ~14 checkouts/s
ORDINARY_RATE = float(os.environ.get("ORDINARY_RATE", "1.5"))    # per user
HOT_USERS = int(os.environ.get("HOT_USERS", "40"))               # per hot shop
HOT_RATE = float(os.environ.get("HOT_RATE", "3"))                # per user: 40 x ~2.5 = ~100/s
LOTTERY_OPENS = float(os.environ.get("LOTTERY_OPENS", str(DURATION / 3)))
CHANNELS = ["card"] * 6 + ["konbini"] * 3 + ["carrier"]
_hot_cycle = itertools.cycle(HOT_SHOPS)


class OrdinaryBuyer(FastHttpUser):
    """Buyers of the platform's other shops: a steady trickle across 20 shops."""

    wait_time = between(0.5 / ORDINARY_RATE, 1.5 / ORDINARY_RATE)
    fixed_count = ORDINARY_USERS

    def on_start(self):
        # Buyers do not click in lockstep: spread the first request over one pacing period.
        gevent.sleep(random.random() / ORDINARY_RATE)

    @task
    def buy(self):
        shop = "shop-%02d" % random.randrange(20)
        self.client.get(
            "/checkout.php?shop=%s&item=item-%d&channel=%s" % (shop, random.randrange(100), random.choice(CHANNELS)),
            name="ordinary",
        )


class HotBuyer(FastHttpUser):
    """Buyers (and bots) of one popular product: each user sticks to one hot shop."""

    wait_time = between(0.5 / HOT_RATE, 1.5 / HOT_RATE)

    def on_start(self):
        self.shop = next(_hot_cycle)
        gevent.sleep(random.random() / HOT_RATE)

    @task
    def buy(self):
        self.client.get(
            "/checkout.php?shop=%s&item=popular&channel=%s" % (self.shop, random.choice(CHANNELS)),
            name="hot",
        )


class Scenario(LoadTestShape):
    """Users per class over time; the run stops after DURATION."""

    use_common_options = True

    def tick(self):
        t = self.get_run_time()
        if t >= DURATION:
            return None
        hot = HOT_USERS * len(HOT_SHOPS)
        if SCENARIO == "baseline":
            hot = 0
        elif SCENARIO == "lottery" and t < LOTTERY_OPENS:
            hot = 0
        # Everybody arrives at once: a sale opening is a step, not a ramp.
        total = ORDINARY_USERS + hot
        classes = [OrdinaryBuyer] + ([HotBuyer] if hot else [])
        return (total, 1000, classes)
