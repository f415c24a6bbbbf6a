#!/usr/bin/env bash
# The what-if replay checked against reality (docs/scan.md, "What-if replay"): the load
# test's flood (flash-1 listed hot, ordinary shops buying) run twice on the real stack,
# the limiter off and on, then `checkout-guard replay` on their events:
#   - the off run's events with the on run's limits predict what the on run did (the hot
#     shop's admitted rate, ordinary shops all admitted, no provider 429 with the mock
#     provider's own limit as --provider);
#   - the off run's events without limits predict the 429s the off run really got;
#   - the on run's own events with its own limits reproduce its decisions per shop;
#   - in-flight leases (issue 37): the same flood against a slow provider (every charge
#     ~SLOW_SECONDS, its nginx limit out of the way), run twice, the limiter off and on
#     with CHECKOUT_IN_FLIGHT; the in-flight run's events replayed with its in_flight
#     reproduce its in-flight denials per shop, and the off run's events with that
#     in_flight predict the hot shop's admitted rate and the ordinary shops' denials.
# Writes .run/replay/<mode>/results.json and verdict.md; exits 1 when a check fails.
#
#   scripts/replay-check.sh short   # 12 s per run, 4 runs (CI: ReplayCheckTest ~1 min once built)
#   scripts/replay-check.sh full    # 60 s per run: docs/results/replay/verdict.md
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
mode=$(run_mode replay-check.sh "${1:-}") || exit 2
case "$mode" in
  short) duration=${DURATION:-12} ;;
  full) duration=${DURATION:-60} ;;
esac
begin_run replay "$mode"
cargo build --release --quiet -p checkout-guard
# The provider's limits, as scripts/loadtest.sh sets them (nginx limit_req: PAYMENT_RATE/s,
# burst PAYMENT_BURST).
export ZONEA_RATE=${ZONEA_RATE:-400} PAYMENT_RATE=${PAYMENT_RATE:-50} PAYMENT_BURST=${PAYMENT_BURST:-10}
for limiter in off on; do
  dir="$out/flood-$limiter"; current="$dir"
  port=$(start_checkout "$dir" "$limiter" "flash-1")
  log "flood, limiter $limiter, ${duration}s"
  SCENARIO=flood DURATION=$duration HOT_SHOPS=flash-1 \
    timeout $((duration + 60)) .venv/bin/locust -f loadtest/locustfile.py --headless \
    --host "http://127.0.0.1:$port" --only-summary --loglevel WARNING > "$dir/locust.log" 2>&1 &
  wait || true
  stop_current
done
# In-flight leases: a provider that answers every charge in ~SLOW_SECONDS (loadtest/provider.py's
# --incident over the whole run), its nginx limit_req raised out of the way (no 429: every
# recorded call lasted the slow service time), the limiter off, then on with the example's
# limits and CHECKOUT_IN_FLIGHT (php/examples/checkout/bootstrap.php).
slow=${SLOW_SECONDS:-0.3}
in_flight=${IN_FLIGHT:-global=16,hot_shop=3,lease_seconds=10}
for limiter in off on; do
  dir="$out/slow-$limiter"; current="$dir"
  extra=""
  [ "$limiter" = off ] || extra="CHECKOUT_IN_FLIGHT=$in_flight"
  port=$(PROVIDER_ARGS="--incident 0:86400:$slow" PAYMENT_RATE=2000 PAYMENT_BURST=1000 \
    start_checkout "$dir" "$limiter" "flash-1" "$extra")
  log "flood against a ${slow}s provider, limiter $limiter${extra:+ ($extra)}, ${duration}s"
  SCENARIO=flood DURATION=$duration HOT_SHOPS=flash-1 \
    timeout $((duration + 60)) .venv/bin/locust -f loadtest/locustfile.py --headless \
    --host "http://127.0.0.1:$port" --only-summary --loglevel WARNING > "$dir/locust.log" 2>&1 &
  wait || true
  stop_current
done
.venv/bin/python loadtest/replay_check.py --out "$out" --bin target/release/checkout-guard \
  --payment-rate "$PAYMENT_RATE" --payment-burst "$PAYMENT_BURST" --duration "$duration" \
  --in-flight "$in_flight" --slow-seconds "$slow"
