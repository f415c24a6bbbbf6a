#!/usr/bin/env bash
# auto_hot on the load-test stack (docs/operations.md): the example checkout
# with the limiter on, `auto_hot` on and NO shop declared hot; ordinary buyers from the
# start, then a flood at flash-1 (Locust's lottery scenario: the sale opens a third of the
# way in). Reports when and why flash-1 became hot (its RateLimitHot event), what it was
# admitted before and after, and how the ordinary shops fared; exits 1 if the flood was not
# capped within a few seconds or ordinary shops suffered.
#
#   scripts/auto-hot-demo.sh short   # 15 s (CI)
#   scripts/auto-hot-demo.sh full    # 60 s: docs/results/auto-hot/verdict.md
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
mode=$(run_mode auto-hot-demo.sh "${1:-}") || exit 2
case "$mode" in
  short) duration=15 ;;
  full) duration=60 ;;
esac
begin_run auto-hot "$mode"
export ZONEA_RATE=${ZONEA_RATE:-400} PAYMENT_RATE=${PAYMENT_RATE:-50}
dir="$out/run"; current="$dir"
port=$(start_checkout "$dir" on "" "CHECKOUT_AUTO_HOT=on")
log "auto_hot: ${duration}s, flood at flash-1 from $((duration / 3))s, no shop declared hot"
echo "{\"duration\": $duration, \"hot_shops\": \"flash-1\", \"declared_hot\": \"\"}" > "$dir/run.json"
SCENARIO=lottery DURATION=$duration HOT_SHOPS=flash-1 \
  timeout $((duration + 60)) .venv/bin/locust -f loadtest/locustfile.py --headless \
  --host "http://127.0.0.1:$port" --only-summary --loglevel WARNING > "$dir/locust.log" 2>&1 &
wait || true
stop_current
.venv/bin/python loadtest/auto_hot_report.py "$dir" "$out"
