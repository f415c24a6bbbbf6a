"""Prints the summary of a model-test run (scripts/model-test.sh) from the JSON that
tests/php/ModelTest.php writes (MODEL_SUMMARY); its last line is "N passed, N failed".

  python loadtest/model_summary.py SUMMARY_JSON
"""

import json
import sys


def summary(s: dict) -> str:
    failed = [str(r["seed"]) for r in s["results"] if not r["ok"]]
    out = [f"seeds run ({len(s['seeds'])}): {' '.join(str(x) for x in s['seeds'])}"]
    if failed:
        out.append(f"failing seeds: {' '.join(failed)}")
    out.append(f"operations checked: {int(s['operations_checked'])} in {s['seconds']:.1f} s")
    out.append(f"{s['passed']} passed, {s['failed']} failed")
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(json.load(open(sys.argv[1]))))
