"""What recover_seconds does to the adaptive load test, without a load test: the CUBIC share of
crates/model/src/adaptive.rs (same formulas, one decrease per second) against a provider token
bucket whose rate follows the scenario's schedule (60%, 40%, 100% of the configured rate), a
demand that always exceeds the configured rate, every 429 reported at once. A design aid for
choosing the scenario's recover_seconds (docs/loadtest.md, "Adaptive budget"); the load test
itself measures the real thing.

  python loadtest/adaptive_sim.py RECOVER_SECONDS [PHASE_SECONDS] [DECREASE]
"""

import math
import sys


def simulate(recover: float, phase: float, decrease: float = 0.7, rate: float = 45.0,
             burst: float = 20.0, floor: int = 100, step: float = 0.001) -> list[float]:
    """Per phase, the admitted rate's deviation from the provider's limit (from 5 s after the
    change to the phase's end), as a fraction."""
    real = [0.6, 0.4, 1.0]
    t0, k, wmax, stored = 0.0, 0.0, 1000.0, False

    def share(now: float) -> int:
        x = (max(now - t0, 0.0) - k) / recover
        return max(floor, min(1000, math.floor(wmax + (1000 - floor) * x ** 3)))

    seconds = int(3 * phase) + 1
    admitted = [0] * seconds
    now, credit, tokens = 0.0, 0.0, burst
    while now < 3 * phase:
        p = share(now) if stored else 1000
        credit += rate * p / 1000 * step
        tokens = min(burst, tokens + real[min(2, int(now // phase))] * rate * step)
        while credit >= 1:
            credit -= 1
            admitted[int(now)] += 1
            if tokens >= 1:
                tokens -= 1
            elif not stored or now - t0 >= 1.0:
                s0 = max(floor, math.floor(p * decrease))
                k = recover * ((p - s0) / (1000 - floor)) ** (1 / 3)
                t0, wmax, stored = now, p, True
        now += step
    out = []
    for i, r in enumerate(real):
        window = admitted[int(i * phase + 5):int((i + 1) * phase)]
        out.append(sum(window) / len(window) / (r * rate) - 1)
    return out


if __name__ == "__main__":
    recover = float(sys.argv[1])
    phase = float(sys.argv[2]) if len(sys.argv) > 2 else 15.0
    decrease = float(sys.argv[3]) if len(sys.argv) > 3 else 0.7
    for i, d in enumerate(simulate(recover, phase, decrease)):
        print(f"phase {i + 1}: admitted {d * 100:+.1f}% against the provider's limit")
