"""scripts/bench-telemetry.sh's arithmetic: the median of bench/telemetry.php's runs, and
the report.

  ... | python bench/telemetry_report.py median     # JSON lines from bench/telemetry.php
  python bench/telemetry_report.py report DIRECT MEASURE MEASURE_OFF HAND APPEND FLUSH_JSONL FLUSH_STREAM FLUSH_NEWRELIC \
      MEASURE_NO_METRICS MEASURE_OFF_NO_METRICS
      (nanoseconds: per call for the first five and the last two, per flush of 1,000 events for
      the rest; the last two: measure() again with checkout_guard.metrics=0)
"""

import json
import platform
import statistics
import sys


def median(lines) -> float:
    """The median over JSON lines of ns_per_call (or median_ns_per_flush); of an odd count,
    as the runs are, the middle one."""
    values = []
    for line in lines:
        if line.strip():
            j = json.loads(line)
            values.append(j["ns_per_call"] if "ns_per_call" in j else j["median_ns_per_flush"])
    return statistics.median_low(values)


def report(d: float, m: float, off: float, h: float, a: float, fj: float, fs: float, fn: float,
           m_nom: float, off_nom: float, host: str) -> str:
    out = [f"telemetry overhead per measured call (median of 5 runs, {host})"]
    for label, v in [("calling $call directly", d / 1000),
                     ("Telemetry::measure(), jsonl sink, batches of 1,000: overhead", (m - d) / 1000),
                     ("Telemetry::measure(), telemetry off (counting only): overhead", (off - d) / 1000),
                     ("by hand in PHP, buffered, batches of 1,000: overhead", (h - d) / 1000),
                     ("by hand in PHP, one appended line per call: overhead", (a - d) / 1000)]:
        out.append(f"  {label:<58} {v:8.2f} us")
    out.append(f"  measure() vs hand-written buffered: {(m - d) / max(1, h - d):.2f}x")
    # The shared counters (checkout_guard.metrics, a per-process setting): the histogram's
    # observation is part of every measure(); the same runs with it off.
    out.append("the shared counters' part (checkout_guard.metrics=1 vs 0), per measure() call")
    for label, on, no in (("jsonl sink", m, m_nom), ("telemetry off (counting only)", off, off_nom)):
        out.append(f"  {label:<31} on {on / 1000:8.3f} us  off {no / 1000:8.3f} us  = {on / max(1, no):.3f}x ({(on - no) / 1000:+.3f} us)")
    out.append("one flush of 1,000 events (median of 30)")
    for name, v in (("jsonl", fj), ("stream", fs), ("newrelic", fn)):
        out.append(f"  {name:<10} {v / 1e6:8.2f} ms  ({v / 1e6:.2f} us/event)")
    return "\n".join(out)


def main(argv: list) -> int:
    if argv[:1] == ["median"]:
        v = median(sys.stdin)
        print(int(v) if float(v).is_integer() else v)
        return 0
    if argv[:1] == ["report"] and len(argv) == 11:
        print(report(*(float(x) for x in argv[1:]), host=platform.node()))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
