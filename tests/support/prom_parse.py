#!/usr/bin/env python3
"""Parses a Prometheus exposition from stdin with prometheus_client's own parsers and prints
its samples as JSON, so that the PHP tests read CheckoutGuard\\Metrics::render() with the
parser a real scraper uses instead of a regular expression of their own.

    prom_parse.py [--openmetrics] < exposition

Without --openmetrics: the text format 0.0.4 (prometheus_client.parser); with it, OpenMetrics
1.0.0 text (prometheus_client.openmetrics.parser: stricter, needs the final "# EOF").
Prints one JSON object: {"families": [{"name", "type", "help"}...], "samples": [{"name",
"labels", "value", "family", "type"}...]}; a value that JSON cannot hold (+Inf, -Inf, NaN) is
its exposition string. Input the parser refuses: its message on stderr, exit status 1.
"""
import json
import math
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as text_families


def value(v: float):
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return v


def main() -> int:
    openmetrics = sys.argv[1:] == ["--openmetrics"]
    if sys.argv[1:] not in ([], ["--openmetrics"]):
        print("usage: prom_parse.py [--openmetrics] < exposition", file=sys.stderr)
        return 2
    text = sys.stdin.buffer.read().decode("utf-8")  # the format is UTF-8: anything else is an error
    parse = openmetrics_families if openmetrics else text_families
    families, samples = [], []
    try:
        # The parsers are generators: an error shows up while iterating, not at the call.
        for f in parse(text):
            families.append({"name": f.name, "type": f.type, "help": f.documentation})
            for s in f.samples:
                samples.append({"name": s.name, "labels": dict(s.labels), "value": value(s.value),
                                "family": f.name, "type": f.type})
    except Exception as e:  # ValueError mostly; whatever the parser raises is a refusal
        print(f"prom_parse: {'OpenMetrics' if openmetrics else 'text 0.0.4'} parser refused the input: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    json.dump({"families": families, "samples": samples}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
