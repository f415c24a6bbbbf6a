#!/usr/bin/env bash
# The model-based test of the limiter (tests/php/system/ModelTest.php): random
# sequences of acquires from three forked workers on two databases, hot marks, auto_hot,
# CLI set/hot/unhot, reset(), FLUSHALL and a Valkey restart (on about half the seeds the
# adaptive option, feedback() with and without Retry-After, sleeps and the budget's
# recovery), every decision checked against
# the reference model (tests/php/support/LimiterModel.php); then the same kind of
# sequences against a managed service (ManagedServer: TLS, the `checkout` ACL user,
# engine lua, database 0, SCAN + UNLINK for FLUSHALL): seeds 69 and 2066, 60 operations.
#
#   scripts/model-test.sh short            # seeds 1, 2, 3 and one random seed (as in CI)
#   scripts/model-test.sh full [SECONDS]   # random seeds for SECONDS (default 600, at most 86400)
#                                          # (the managed service: its two seeds only)
#
# Extra knobs go to the test through the environment: MODEL_SEEDS=5,17 (replay seeds),
# MODEL_LENGTH, MODEL_SHRINK_SECONDS, MODEL_WAIT_AFTER_SET=0, MODEL_OUTSIDE_MARK_WAIT=0
# (strict: no pause after a CLI set or before a mark made outside the workers),
# MODEL_LOCAL_DENIALS=0,
# MODEL_IGNORE=field,... (see ModelTest.php). CG_SKIP_BUILD=1 uses the built extension.
# Results in .run/model-test/<mode>/ (phpunit.log, summary.json, summary-managed.json); the
# last line printed is "N passed, N failed" (sequences, both tests).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
mode=$(run_mode model-test.sh "${1:-}") || exit 2
seconds=${2:-600}
case "$mode" in
  short) unset MODEL_SECONDS; limit=600 ;;
  full)
    [[ "$seconds" =~ ^[0-9]+$ ]] && [ "$seconds" -ge 1 ] && [ "$seconds" -le 86400 ] \
      || { echo "SECONDS must be a whole number from 1 to 86400, got $seconds" >&2; exit 2; }
    export MODEL_SECONDS=$seconds
    # The sequences, then up to three failures shrunk (MODEL_SHRINK_SECONDS each), then margin.
    limit=$((seconds + 3 * ${MODEL_SHRINK_SECONDS:-60} + 300)) ;;
esac
out="$CG_ROOT/.run/model-test/$mode"
rm -rf "$out"; mkdir -p "$out"
export MODEL_SUMMARY="$out/summary.json"
log "model test ($mode${MODEL_SECONDS:+, $MODEL_SECONDS s}): results in $out"
status=0
CG_SKIP_BUILD=${CG_SKIP_BUILD:-} PHP_ONLY=1 timeout "$limit" bash scripts/test.sh --testsuite system --filter ModelTest \
  > >(tee "$out/phpunit.log") 2>&1 || status=$?
wait
if [ ! -s "$MODEL_SUMMARY" ]; then
  echo "no summary written (exit $status): see $out/phpunit.log" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
.venv/bin/python loadtest/model_summary.py "$MODEL_SUMMARY" "${MODEL_SUMMARY%.json}-managed.json"
[ "$status" -eq 0 ] || exit "$status"
