"""Reads the valgrind log of scripts/valgrind.sh: every invalid access (all processes), and
the definite leaks of the process valgrind started, split into those allocated from
checkout_guard's code and PHP's own. Prints a summary and the first records; exit 1 when
there is an invalid access or a leak of ours.

  python loadtest/valgrind_report.py VALGRIND_LOG

PHP itself leaves blocks behind at exit with USE_ZEND_ALLOC=0 (compiled files, objects
PHPUnit keeps), so those do not count. Leaks count in the process valgrind started: a
forked child (pcntl_fork in the tests) deliberately forgets its copy of the parent's
telemetry state instead of freeing or flushing it, so its report lists that state as lost
by design.
"""

import re
import sys

INVALID = re.compile(r"Invalid (read|write)|uninitialised|Mismatched free|Invalid free")


def analyse(text: str) -> dict:
    main = re.search(r"^==(\d+)== Command:", text, re.M).group(1)
    by_pid: dict = {}
    for line in text.splitlines():
        m = re.match(r"==(\d+)== ?(.*)", line)
        if m:
            by_pid.setdefault(m.group(1), []).append(m.group(2))

    def records(pid):
        return [r for r in "\n".join(by_pid.get(pid, [])).split("\n\n") if r.strip()]

    return {
        "invalid": [r for pid in by_pid for r in records(pid) if INVALID.search(r)],
        "ours": [r for r in records(main) if "definitely lost" in r and "libcheckout_guard" in r],
        "php_leaks": [r for r in records(main) if "definitely lost" in r and "libcheckout_guard" not in r],
        "children": len(by_pid) - 1,
    }


def main(path: str) -> int:
    with open(path) as f:
        a = analyse(f.read())
    print(f"valgrind: {len(a['invalid'])} invalid accesses (all processes), {len(a['ours'])} definite leaks from checkout_guard, "
          f"{len(a['php_leaks'])} definite leaks from PHP itself (not ours), in the main process; {a['children']} forked children")
    for r in (a["invalid"] + a["ours"])[:5]:
        print(r[:3000])
    return 1 if a["invalid"] or a["ours"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
