"""Prints the summary of a model-test run (scripts/model-test.sh) from the JSON that
tests/php/system/ModelTest.php writes (MODEL_SUMMARY, and for the managed service's
sequences the same name with "-managed" before ".json"); its last line is
"N passed, N failed" (over every file given that exists).

  python loadtest/model_summary.py SUMMARY_JSON [MORE_SUMMARY_JSON...]
"""

import json
import os
import sys


def summary(s: dict) -> str:
    failed = [str(r["seed"]) for r in s["results"] if not r["ok"]]
    out = [f"seeds run ({len(s['seeds'])}): {' '.join(str(x) for x in s['seeds'])}"]
    if failed:
        out.append(f"failing seeds: {' '.join(failed)}")
    out.append(f"operations checked: {int(s['operations_checked'])} in {s['seconds']:.1f} s")
    out.append(f"{s['passed']} passed, {s['failed']} failed")
    return "\n".join(out)


def combined(named: list) -> str:
    """[(label, summary dict), ...]: one summary as summary(); several, each under its
    label, then the totals."""
    if len(named) == 1:
        return summary(named[0][1])
    out = []
    for label, s in named:
        out.append(f"{label}:")
        out.extend("  " + line for line in summary(s).splitlines())
    out.append(f"{sum(s['passed'] for _, s in named)} passed, {sum(s['failed'] for _, s in named)} failed")
    return "\n".join(out)


if __name__ == "__main__":
    # The first file must exist; a later one may not (the managed test skipped).
    paths = sys.argv[1:2] + [p for p in sys.argv[2:] if os.path.exists(p)]
    print(combined([(os.path.basename(p).removesuffix(".json"), json.load(open(p))) for p in paths]))
