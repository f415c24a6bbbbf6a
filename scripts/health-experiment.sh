#!/usr/bin/env bash
# Health checks under overload (docs/health.md): the example checkout with inbound
# flow control (nginx limit_conn = php-fpm pool size) is flooded past its threshold while a
# kubelet-like prober (loadtest/health_experiment.py) probes it with the probes of
# deploy/k8s/checkout.yaml, plus HTTP liveness through the application for comparison;
# then php-fpm is stopped for real. Prints the table and the expectations; writes
# results.json, verdict.md and timeline.svg to .run/health/<mode>/. Exits 1 if an
# expectation does not hold.
#
#   scripts/health-experiment.sh short   # ~22 s: periods x0.05, flood 8 s (CI; the default)
#   scripts/health-experiment.sh full    # ~65 s: periods x0.1, flood 30 s (documented run)
#
# Loopback only; every process is bounded in time and stopped at the end, on failure and
# on Ctrl-C.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"

mode=$(run_mode health-experiment.sh "${1:-}") || exit 2
case "$mode" in
  full) timing=(--scale 0.1 --baseline 10 --flood 30 --recovery 15 --dead 8 --concurrency 64) ;;
  short) timing=(--scale 0.05 --baseline 3 --flood 8 --recovery 6 --dead 4 --concurrency 48) ;;
esac

begin_run health "$mode"
dir="$out/stack"
current="$dir"

workers=${FPM_WORKERS:-8}
export ZONEA_RATE=${ZONEA_RATE:-400} FLOW_LIMIT=${FLOW_LIMIT:-$workers}
FPM_WORKERS=$workers start_checkout "$dir" on "flash" > /dev/null
log "health experiment ($mode): $workers php-fpm workers, flow limit $FLOW_LIMIT in flight"
# In the background, so that Ctrl-C runs the trap at once.
timeout 300 .venv/bin/python loadtest/health_experiment.py --run-dir "$dir" \
  --manifest deploy/k8s/checkout.yaml --out "$out" --flow-limit "$FLOW_LIMIT" "${timing[@]}" &
status=0
wait $! || status=$?
exit $status
