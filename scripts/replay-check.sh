#!/usr/bin/env bash
# The what-if replay checked against reality (docs/scan.md, "What-if replay"): the load
# test's flood (flash-1 listed hot, ordinary shops buying) run twice on the real stack,
# the limiter off and on, then `checkout-guard replay` on their events:
#   - the off run's events with the on run's limits predict what the on run did (the hot
#     shop's admitted rate, ordinary shops all admitted, no provider 429 with the mock
#     provider's own limit as --provider);
#   - the off run's events without limits predict the 429s the off run really got;
#   - the on run's own events with its own limits reproduce its decisions per shop.
# Writes .run/replay/<mode>/results.json and verdict.md; exits 1 when a check fails.
#
#   scripts/replay-check.sh short   # 12 s per run (CI, ~1 min)
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
.venv/bin/python loadtest/replay_check.py --out "$out" --bin target/release/checkout-guard \
  --payment-rate "$PAYMENT_RATE" --payment-burst "$PAYMENT_BURST" --duration "$duration"
