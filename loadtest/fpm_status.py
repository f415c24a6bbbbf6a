"""php-fpm's pool over a load run: samples the status page (nginx's /fpm-status on the ops
port, answered by php-fpm's own status pool even when every worker is busy) every
INTERVAL seconds for SECONDS, then stops by itself. Loopback only.

  python fpm_status.py OPS_PORT SECONDS OUT [INTERVAL]   (default interval 0.2 s)

One JSON line per sample in OUT: {"t": unix seconds, "active": busy workers, "idle": n,
"total": pool size, "queue": connections waiting in the listen backlog, "max_active",
"max_queue", "max_children_reached"} (the max_* since php-fpm started). A sample that
fails (e.g. at start-up) is skipped.
"""

import json
import sys
import time
import urllib.request

FIELDS = {
    "active": "active processes",
    "idle": "idle processes",
    "total": "total processes",
    "queue": "listen queue",
    "max_active": "max active processes",
    "max_queue": "max listen queue",
    "max_children_reached": "max children reached",
}


def sample(status: dict, t: float) -> dict:
    """One line from php-fpm's JSON status."""
    return {"t": round(t, 3), **{k: int(status.get(v, 0)) for k, v in FIELDS.items()}}


def main() -> None:
    port, seconds, path = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    interval = float(sys.argv[4]) if len(sys.argv) > 4 else 0.2
    url = f"http://127.0.0.1:{port}/fpm-status?json"
    deadline = time.monotonic() + seconds
    with open(path, "w", buffering=1) as out:
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    out.write(json.dumps(sample(json.load(r), time.time())) + "\n")
            except (OSError, ValueError):
                pass
            time.sleep(max(0.0, interval - (time.monotonic() - started)))


if __name__ == "__main__":
    main()
