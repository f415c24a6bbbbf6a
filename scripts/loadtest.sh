#!/usr/bin/env bash
# Flash sales reproduced on this machine: the example checkout (nginx + php-fpm with
# checkout_guard) in front of a mock provider whose rate limits nginx enforces with 429s,
# under Locust, for each scenario with the limiter on and off; then the verdict.
#
#   scripts/loadtest.sh short     # each run 12 s: the demo's version (~2 min in all)
#                                 # (RUNS="flood-on ...": those runs only)
#   scripts/loadtest.sh full      # each run 60 s, Locust distributed: 1 master + 2 workers
#   scripts/loadtest.sh smoke     # no Locust: a handful of checkouts, the 429 and 503 paths
#                                 # and a payment that waits for its token
#   scripts/loadtest.sh wait      # each run 30 s: waiting for tokens (acquire()'s
#                                 # maxWaitSeconds) during a flood, against not waiting
#   scripts/loadtest.sh adaptive [short|full]
#                                 # the provider's real payment limit moves (60%, 40%,
#                                 # 100% of the configured global rate, a third of the run
#                                 # each): the flood with adaptive off, then on; each run
#                                 # 45 s (short, recover_seconds 6) or 180 s (full, 10)
#   scripts/loadtest.sh slow-provider [short|full]
#                                 # a slow provider: buckets alone against in_flight
#   scripts/loadtest.sh endpoints [short|full|smoke]
#                                 # the provider's global and per-endpoint limits (issue
#                                 # 42): one endpoint flooded while checkouts create and
#                                 # confirm; a baseline, then one global bucket, global +
#                                 # endpoints, global + endpoints + priorities; each run
#                                 # 15 s (short) or 60 s (full); smoke: no Locust, a
#                                 # handful of calls against buckets that do not refill
#                                 # (its results in .run/loadtest/endpoints-smoke/)
#
# Every process runs on loopback, is bounded in time, and is stopped at the end, on
# failure and on Ctrl-C. Results (logs, Locust CSVs, verdict, charts) go to
# .run/loadtest/<mode>/. Every run has a Prometheus of its own scraping the checkout's
# /metrics (loadtest/prometheus.py): prometheus.json, prometheus.md and chart-prometheus.svg
# there compare its denial counts with the run's own.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"

mode=$(run_mode loadtest.sh "${1:-}" smoke wait adaptive slow-provider endpoints) || exit 2
case "$mode" in
  short) duration=${DURATION:-12}; workers=0 ;;
  full) duration=${DURATION:-60}; workers=${LOCUST_WORKERS:-2} ;;
  smoke) duration=0; workers=0 ;;
  wait) duration=${DURATION:-30}; workers=${LOCUST_WORKERS:-0} ;;
  adaptive)
    length=$(run_mode "loadtest.sh adaptive" "${2:-}") || exit 2
    workers=${LOCUST_WORKERS:-0}
    if [ "$length" = full ]; then
      duration=${DURATION:-180}; recover=${ADAPTIVE_RECOVER:-10}
    else
      duration=${DURATION:-45}; recover=${ADAPTIVE_RECOVER:-6}
    fi ;;
  slow-provider)
    length=$(run_mode "loadtest.sh slow-provider" "${2:-}") || exit 2
    workers=${LOCUST_WORKERS:-0}
    if [ "$length" = full ]; then duration=${DURATION:-90}; else duration=${DURATION:-24}; fi ;;
  endpoints)
    length=$(run_mode "loadtest.sh endpoints" "${2:-}" smoke) || exit 2
    workers=${LOCUST_WORKERS:-0}
    case "$length" in
      full) duration=${DURATION:-60} ;;
      short) duration=${DURATION:-15} ;;
      smoke) duration=0 ;;
    esac ;;
esac

# The endpoint smoke has a directory of its own: CI's run leaves a full run's results be.
if [ "$mode" = endpoints ] && [ "$length" = smoke ]; then begin_run loadtest endpoints-smoke; else begin_run loadtest "$mode"; fi

# The provider's limits and the limiter's, sized for 2 cores (see docs/loadtest.md).
export ZONEA_RATE=${ZONEA_RATE:-400} PAYMENT_RATE=${PAYMENT_RATE:-50}

cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8, $5+$6}' /proc/stat; }

# MAX_WAIT / HOT_MAX_WAIT: seconds an ordinary / a listed hot shop's payment may wait for
# its token (the checkout's CHECKOUT_MAX_WAIT / CHECKOUT_HOT_MAX_WAIT; default 0, no wait).
# RUN_DIR_NAME: the run's directory under $out (default SCENARIO-LIMITER); RUN_FPM_ENV:
# more KEY=VALUE lines for the checkout's php-fpm pool.
run_one() { # scenario limiter hot_shops
  local scenario=$1 limiter=$2 hot=$3 dir="$out/${RUN_DIR_NAME:-$1-$2}" port ops
  local max_wait=${MAX_WAIT:-0} hot_max_wait=${HOT_MAX_WAIT:-0}
  current="$dir"
  port=$(start_checkout "$dir" "$limiter" "$hot" "CHECKOUT_MAX_WAIT=$max_wait
CHECKOUT_HOT_MAX_WAIT=$hot_max_wait
${RUN_FPM_ENV:-}")
  [ "$mode" != adaptive ] && [ "$mode" != slow-provider ] || adaptive_arm "$dir" "$port"
  # A real Prometheus scrapes the checkout's /metrics through the run (issue 40).
  start_prometheus "$dir" || log "the run goes on without a scrape of /metrics (an extension without Metrics?)"
  log "run ${RUN_DIR_NAME:-$scenario}, limiter $limiter, ${duration}s (wait: ordinary ${max_wait}s, hot ${hot_max_wait}s)${RUN_FPM_ENV:+; ${RUN_FPM_ENV//$'\n'/, }}"
  # php-fpm's pool (busy workers, listen queue) sampled through the run.
  ops=$(sed -n 's/^ops=//p' "$dir/ports")
  timeout $((duration + 10)) .venv/bin/python loadtest/fpm_status.py "$ops" "$((duration + 2))" "$dir/fpm-status.jsonl" &
  read -r t0 idle0 < <(cpu_ticks)
  load_start=$(date +%s.%N)
  local locust=(.venv/bin/locust -f loadtest/locustfile.py --headless --host "http://127.0.0.1:$port"
    --csv "$dir/locust" --only-summary --loglevel WARNING)
  export SCENARIO=$scenario DURATION=$duration HOT_SHOPS=$hot
  if [ "$workers" -gt 0 ]; then
    local mport; mport=$(free_port)
    for i in $(seq 1 "$workers"); do
      timeout $((duration + 60)) "${locust[@]}" --worker --master-port "$mport" > "$dir/locust-worker-$i.log" 2>&1 &
    done
    timeout $((duration + 60)) "${locust[@]}" --master --master-bind-host 127.0.0.1 --master-bind-port "$mport" \
      --expect-workers "$workers" > "$dir/locust.log" 2>&1 &
  else
    timeout $((duration + 60)) "${locust[@]}" > "$dir/locust.log" 2>&1 &
  fi
  # Waiting on background jobs lets Ctrl-C run the trap at once (it kills them).
  wait || true
  load_end=$(date +%s.%N)
  # What Prometheus scraped, against the run's own count of the limiter's 503s.
  .venv/bin/python loadtest/prometheus.py collect "$dir" "$load_start" "$load_end" >&2 \
    || log "Prometheus' results could not be read (see $dir/prometheus/)"
  # The limiter's lease counters (issue 37) before the stack stops.
  [ "$mode" != slow-provider ] || [ "$limiter" != on ] || .venv/bin/python loadtest/slow_report.py --lease-stats "$dir" \
    || log "the lease counters could not be read from the run's Valkey"
  read -r t1 idle1 < <(cpu_ticks)
  echo "{\"cpu_busy\": $(awk -v a="$t0" -v b="$t1" -v i="$idle0" -v j="$idle1" 'BEGIN{printf "%.3f", 1-(j-i)/(b-a)}'), \"duration\": $duration, \"hot_shops\": \"$hot\", \"locust_workers\": $workers, \"max_wait\": $(printf '%g' "$max_wait"), \"hot_max_wait\": $(printf '%g' "$hot_max_wait"), \"fpm_workers\": ${FPM_WORKERS:-24}, \"flow_limit\": ${FLOW_LIMIT:-0}, \"ordinary_users\": ${ORDINARY_USERS:-10}, \"hot_users\": ${HOT_USERS:-40}}" > "$dir/run.json"
  stop_current
}

hot1="flash-1"; hot3="flash-1,flash-2,flash-3"

# Every run's Prometheus results together: $out/prometheus.json, .md, chart-prometheus.svg/png.
prometheus_summary() {
  .venv/bin/python loadtest/prometheus.py summary "$out" > "$out/prometheus.txt" \
    || log "no Prometheus summary (see $out/prometheus.txt)"
}

# adaptive_arm DIR PORT: before the load of an adaptive or slow-provider run, one checkout
# must get an answer of the checkout's own (paid, or the provider's or the limiter's
# refusal): a 500 is the limiter's construction failing, e.g. an extension that does not
# know the `adaptive` or `in_flight` option yet. Then the provider's schedule (its moving
# limit, its incident) is armed: its clock starts with the next charge, the load's first.
adaptive_arm() {
  local dir=$1 port=$2 code app
  code=$(curl -s -o "$dir/probe.json" -w '%{http_code}' "http://127.0.0.1:$port/checkout.php?shop=probe&channel=card" || true)
  case "$code" in
    200|502|503) ;;
    *)
      log "FAILED: the checkout answered $code before the load (CHECKOUT_ADAPTIVE=${CHECKOUT_ADAPTIVE_RUN:-off}): $(head -c 300 "$dir/probe.json" || true)"
      [ ! -s "$dir/php-errors.log" ] || log "php: $(grep -m1 'PHP ' "$dir/php-errors.log" | sed 's/^\[[^]]*\] //')"
      [ "${CHECKOUT_ADAPTIVE_RUN:-off}" != on ] || log "does this extension know the limiter option 'adaptive' (issue 27)? ADAPTIVE= runs both without it"
      [ -z "${CHECKOUT_IN_FLIGHT_RUN:-}" ] || log "does this extension know the limiter option 'in_flight' (issue 37)? IN_FLIGHT= runs without it"
      exit 1 ;;
  esac
  app=$(sed -n 's/^provider_app=//p' "$dir/ports")
  curl -sf -X POST "http://127.0.0.1:$app/_schedule/arm" > /dev/null \
    || { log "FAILED: the provider's schedule could not be armed (port $app)"; exit 1; }
}

if [ "$mode" = smoke ]; then
  # Limiter on with a global bucket of 3 (no refill to speak of): 3 checkouts pass end to
  # end, the 4th is answered 503 by the limiter. Then limiter off against a provider that
  # allows 1 payment a second (burst 10): of 20 quick payments, the first 11 pass and most
  # of the rest get the provider's 429 (one or two may find a token refilled meanwhile).
  dir="$out/smoke-on"; current="$dir"
  port=$(start_checkout "$dir" on "" "CG_GLOBAL_CAPACITY=3
CG_GLOBAL_RATE=0.001
CG_LANE_CAPACITY=3
CG_LANE_RATE=0.001
CG_SHOP_CAPACITY=3
CG_SHOP_RATE=0.001")
  codes=""
  for i in 1 2 3 4; do
    codes+="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/checkout.php?shop=s$i&channel=card") "
  done
  retry_after=$(curl -s -D - -o /dev/null "http://127.0.0.1:$port/checkout.php?shop=s5&channel=card" | tr -d '\r' | awk -F': ' 'tolower($1)=="retry-after"{print $2}')
  events_on=$(wc -l < "$dir/events.jsonl")
  stop_current
  dir="$out/smoke-off"; current="$dir"
  port=$(PAYMENT_RATE=1 start_checkout "$dir" off "")
  off=""
  for i in $(seq 1 20); do
    off+="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/checkout.php?shop=s$i&channel=konbini") "
  done
  provider_429=$(grep -c '"s":429' "$dir/provider.log" || true)
  stop_current
  # Waiting: a global bucket of 1 refilled every 500 ms; ordinary shops may wait 1 s for a
  # token, the listed hot shop not at all. s1 pays at once, s2 waits for the next token
  # (X-Limiter-Waited), the hot shop finds the bucket spent and gets its 503 without
  # waiting, s3 waits again.
  dir="$out/smoke-wait"; current="$dir"
  port=$(start_checkout "$dir" on "hot" "CG_GLOBAL_CAPACITY=1
CG_GLOBAL_RATE=2
CG_LANE_CAPACITY=1
CG_LANE_RATE=2
CG_SHOP_CAPACITY=1
CG_SHOP_RATE=2
CHECKOUT_MAX_WAIT=1
CHECKOUT_HOT_MAX_WAIT=0")
  wait_codes=""; waited=""
  for shop in s1 s2 hot s3; do
    read -r code w < <(curl -s -D - -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$port/checkout.php?shop=$shop&channel=card" \
      | tr -d '\r' | awk -F': ' 'tolower($1)=="x-limiter-waited"{w=$2} /^[0-9][0-9][0-9]$/{c=$0} END{print c, (w=="" ? "-" : w)}')
    wait_codes+="$code "; waited+="$w "
  done
  waited_events=$(grep -c '"limiter.waited"' "$dir/events.jsonl" || true)
  stop_current
  printf '{"limiter_on": "%s", "retry_after": "%s", "events_on": %d, "limiter_off": "%s", "provider_429": %d, "wait": "%s", "waited": "%s", "waited_events": %d}\n' \
    "${codes% }" "$retry_after" "$events_on" "${off% }" "$provider_429" "${wait_codes% }" "${waited% }" "$waited_events"
  exit 0
fi

if [ "$mode" = wait ]; then
  # Waiting for tokens during a flood (docs/loadtest.md, "Waiting for tokens"): the flood
  # with the ordinary shops at a busier hour (ORDINARY_USERS 16, ~21 checkouts/s), so that
  # their demand and the hot shop's cap (25/s) together pass the global bucket's 45/s and
  # ordinary checkouts meet an empty global bucket. The same traffic five times:
  #   flood-nowait       nobody waits (the twin every other run is compared with)
  #   flood-wait         ordinary shops wait up to WAIT_SHORT (0.2 s), the hot shop not
  #   flood-wait-long    ordinary shops wait up to WAIT_LONG (2 s), the hot shop not
  #   flood-starve       everybody waits up to WAIT_LONG: the hot shop's buyers too
  #   flood-starve-shed  the same behind nginx's flow control at the pool's size (FLOW_LIMIT,
  #                      as deploy/k8s runs it): a starved pool answers 503 "overloaded"
  export ORDINARY_USERS=${ORDINARY_USERS:-16}
  short_wait=${WAIT_SHORT:-0.2} long_wait=${WAIT_LONG:-2}
  MAX_WAIT=0 HOT_MAX_WAIT=0 run_one flood-nowait on "$hot1"
  MAX_WAIT=$short_wait HOT_MAX_WAIT=0 run_one flood-wait on "$hot1"
  MAX_WAIT=$long_wait HOT_MAX_WAIT=0 run_one flood-wait-long on "$hot1"
  MAX_WAIT=$long_wait HOT_MAX_WAIT=$long_wait run_one flood-starve on "$hot1"
  FLOW_LIMIT=${FPM_WORKERS:-24} MAX_WAIT=$long_wait HOT_MAX_WAIT=$long_wait run_one flood-starve-shed on "$hot1"
  prometheus_summary
  .venv/bin/python loadtest/verdict.py "$out" | tee "$out/verdict.txt"
  exit "${PIPESTATUS[0]}"
fi

if [ "$mode" = adaptive ]; then
  # The adaptive budget (issue 27; docs/loadtest.md, "Adaptive budget"): the provider's
  # real payment limit is the provider's own token bucket (loadtest/provider.py
  # --charges-schedule, burst PROVIDER_BURST, default 20; 429 past it), at 60% of the
  # limiter's configured global rate (CG_GLOBAL_RATE, 45/s) for the first third of the
  # run, 40% for the second and 100% for the last; nginx's limit_req for payments is set
  # out of the way. The flood (40 users at flash-1) with the ordinary shops at a busier
  # hour (ORDINARY_USERS 20, ~28 checkouts/s): the demand the limiter lets through (the hot
  # shop's cap, 25/s, and the ordinary shops) passes the configured rate, so the admitted
  # rate can show the budget climbing back to it. Two runs, the same traffic:
  #   adaptive-off  the limiter as configured (no `adaptive` option)
  #   adaptive-on   CHECKOUT_ADAPTIVE=ADAPTIVE (default on), recover_seconds ADAPTIVE_RECOVER
  #                 (10 s short, 20 s full); ADAPTIVE= (empty) leaves it off in both runs,
  #                 which checks the harness on an extension without the feature
  # RETRY_AFTER_SHARE (default 0): the share of the provider's 429s with a Retry-After of
  # RETRY_AFTER seconds (default 1). Then loadtest/adaptive_report.py: report.md,
  # report.json, chart.png/svg in .run/loadtest/adaptive/.
  export ORDINARY_USERS=${ORDINARY_USERS:-20} PAYMENT_RATE=1000 PAYMENT_BURST=1000
  global=${CG_GLOBAL_RATE:-45}
  schedule=$(awk -v g="$global" -v d="$duration" 'BEGIN { printf "0:%g,%g:%g,%g:%g", 0.6 * g, d / 3, 0.4 * g, 2 * d / 3, g }')
  on_setting=${ADAPTIVE-on}
  for run in off on; do
    setting=off
    [ "$run" = off ] || setting=${on_setting:-off}
    dir="$out/adaptive-$run"; mkdir -p "$dir"
    printf '{"run": "%s", "adaptive": "%s", "recover_seconds": %g, "configured_global_rate": %g, "schedule": "%s", "phase_seconds": %g, "provider_burst": %g, "retry_after_share": %g, "retry_after": %g}\n' \
      "$run" "$setting" "$recover" "$global" "$schedule" "$(awk -v d="$duration" 'BEGIN { print d / 3 }')" \
      "${PROVIDER_BURST:-20}" "${RETRY_AFTER_SHARE:-0}" "${RETRY_AFTER:-1}" > "$dir/adaptive.json"
    rfe="CHECKOUT_ADAPTIVE=$setting"
    [ "$setting" = off ] || rfe+=$'\n'"CHECKOUT_ADAPTIVE_RECOVER=$recover"
    CHECKOUT_ADAPTIVE_RUN=$setting RUN_DIR_NAME="adaptive-$run" RUN_FPM_ENV=$rfe \
    PROVIDER_ARGS="--charges-schedule $schedule --charges-burst ${PROVIDER_BURST:-20} --retry-after-share ${RETRY_AFTER_SHARE:-0} --retry-after ${RETRY_AFTER:-1} --log $dir/charges.jsonl" \
      run_one flood on "$hot1"
  done
  prometheus_summary
  .venv/bin/python loadtest/adaptive_report.py "$out"
  exit $?
fi

if [ "$mode" = slow-provider ]; then
  # A slow provider (issue 37; docs/loadtest.md, "Slow provider: in-flight leases"): the
  # mock provider serves PROVIDER_CONCURRENCY (16) charges at once, first come first served
  # (past them a charge waits: queueing), and from 1/3 to 2/3 of the run its service time
  # is ~INCIDENT_SECONDS (1.5 s) instead of ~40 ms (loadtest/provider.py --incident; the
  # clock starts with the load's first charge). php-fpm: a fixed pool of FPM_WORKERS (24).
  # The same flood as `flood` (40 users at flash-1) and the ordinary shops (10 users):
  #   slow-baseline  no flood, the buckets: the ordinary shops' reference (incident included)
  #   slow-off       the flood, no limiter
  #   slow-buckets   the flood, the buckets alone (hot shop 25/s)
  #   slow-inflight  the flood, buckets + in_flight (CHECKOUT_IN_FLIGHT=IN_FLIGHT, default
  #                  global=16,hot_shop=6: the provider's 16 at once, and the hot shop at
  #                  most 6 of the pool's 24 workers; sized by Little's law in the docs).
  #                  IN_FLIGHT= (empty) runs it without the option: a check of the harness
  #                  on an extension without the feature (the report then does not judge it)
  # Then loadtest/slow_report.py: report.md, report.json, chart.png/svg in
  # .run/loadtest/slow-provider/.
  export FPM_WORKERS=${FPM_WORKERS:-24}
  concurrency=${PROVIDER_CONCURRENCY:-16} incident_s=${INCIDENT_SECONDS:-1.5}
  in_flight=${IN_FLIGHT-global=16,hot_shop=6}
  incident=$(awk -v d="$duration" -v s="$incident_s" 'BEGIN { printf "%g:%g:%g", d / 3, 2 * d / 3, s }')
  for run in baseline off buckets inflight; do
    dir="$out/slow-$run"; mkdir -p "$dir"
    scenario=flood limiter=on hot=$hot1 spec=""
    case "$run" in
      baseline) scenario=baseline hot="" ;;
      off) limiter=off ;;
      inflight) spec=$in_flight ;;
    esac
    printf '{"run": "%s", "scenario": "%s", "limiter": "%s", "in_flight": "%s", "concurrency": %d, "incident": "%s", "fpm_workers": %d}\n' \
      "$run" "$scenario" "$limiter" "$spec" "$concurrency" "$incident" "$FPM_WORKERS" > "$dir/slow.json"
    CHECKOUT_IN_FLIGHT_RUN=$spec RUN_DIR_NAME="slow-$run" RUN_FPM_ENV="CHECKOUT_IN_FLIGHT=${spec:-off}" \
    PROVIDER_ARGS="--concurrency $concurrency --incident $incident --calls-log $dir/calls.jsonl" \
      run_one "$scenario" "$limiter" "$hot"
  done
  prometheus_summary
  .venv/bin/python loadtest/slow_report.py "$out"
  exit $?
fi

# ep_check DIR FORM CODES: a 500 among a run's answers is the page failing (the endpoint
# limiter's construction or its acquire()): said with PHP's error, and the run stops.
ep_check() {
  local dir=$1 form=$2 codes=$3
  [[ " $codes " == *" 500 "* ]] || return 0
  log "FAILED: the checkout answered 500 with CHECKOUT_EP_LIMITS=$form (answers: $codes)"
  [ ! -s "$dir/php-errors.log" ] || log "php: $(grep -m1 'PHP ' "$dir/php-errors.log" | sed 's/^\[[^]]*\] //')"
  [ "$form" = global ] || log "does this extension know the limiter options 'endpoints' and 'priorities' and acquire()'s endpoint: and priority: (issue 42)?"
  exit 1
}

if [ "$mode" = endpoints ] && [ "$length" = smoke ]; then
  # The endpoint API (issue 42; docs/loadtest.md, "Endpoints and priorities") in a handful
  # of calls, against buckets that do not refill (1 a minute at the provider's nginx, 0.001/s
  # in the limiter), so every answer is known in advance. The provider: 5 calls per
  # endpoint (burst 4), 31 in all. The limiter: global 10, each endpoint 5. Per form
  # (CHECKOUT_EP_LIMITS), 8 reads of the item API from flash-1 (the flood), then 4
  # checkouts (create, confirm) of s1..s4:
  #   global      8 reads pass the limiter, the provider refuses the last 3 (429: 502s);
  #               2 tokens left: s1 paid, s2..s4 refused at create
  #   endpoints   5 reads pass (the item endpoint's 5), 3 get the limiter's 503: no 429;
  #               5 global tokens left: s1, s2 paid, s3 created but not confirmed, s4 refused
  #   priorities  reads are background (keep 50% of each bucket): 2 pass; create is normal
  #               (keeps 20%), confirm critical: s1..s3 paid, s4 refused at create, every
  #               created payment confirmed
  for form in global endpoints priorities; do
    dir="$out/$form"; current="$dir"
    port=$(PROVIDER_GLOBAL_RATE=1r/m PROVIDER_GLOBAL_BURST=30 PROVIDER_ENDPOINT_RATE=1r/m PROVIDER_ENDPOINT_BURST=4 \
      start_checkout "$dir" on "" "CHECKOUT_EP_LIMITS=$form
CG_EP_GLOBAL_CAPACITY=10
CG_EP_GLOBAL_RATE=0.001
CG_EP_CAPACITY=5
CG_EP_RATE=0.001")
    reads=""
    for i in $(seq 1 8); do
      reads+="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/lookup.php?shop=flash-1&what=items&id=popular") "
    done
    codes=""; stages=""
    for shop in s1 s2 s3 s4; do
      read -r code stage < <(curl -s -D - -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$port/intent.php?shop=$shop&item=item-1" \
        | tr -d '\r' | awk -F': ' 'tolower($1)=="x-checkout-stage"{g=$2} /^[0-9][0-9][0-9]$/{c=$0} END{print c, (g=="" ? "-" : g)}')
      codes+="$code "; stages+="$stage "
    done
    stop_current
    ep_check "$dir" "$form" "$reads $codes"
    printf '{"reads": "%s", "checkouts": "%s", "stages": "%s"}\n' "${reads% }" "${codes% }" "${stages% }" > "$dir/smoke.json"
  done
  .venv/bin/python loadtest/endpoints_report.py smoke "$out"
  exit $?
fi

if [ "$mode" = endpoints ]; then
  # The provider's global and per-endpoint limits under a flood of one endpoint (issue 42;
  # docs/loadtest.md, "Endpoints and priorities"). The provider (nginx limit_req): 50/s
  # (burst 25) over the account, 25/s (burst 5) per endpoint (PROVIDER_GLOBAL_RATE,
  # PROVIDER_ENDPOINT_RATE, ..._BURST). The limiter just inside (bootstrap.php's
  # endpoint_limiter()): global 45/s (20), each endpoint 22/s (5). Load
  # (loadtest/locust_endpoints.py): ordinary shops' and flash-1's checkouts (intent.php:
  # create then confirm, ~7/s each), ordinary shops' reads (~4.5/s) and, but in the
  # baseline, flash-1's flood of reads (~100/s) of FLOOD_ENDPOINT (items, or retrieve:
  # a payment's status polled). Four runs, the same checkouts:
  #   baseline    no flood, one global bucket
  #   global      the flood, one global bucket (every call draws from it)
  #   endpoints   the flood, global + a bucket per endpoint
  #   priorities  the flood, global + endpoints + priorities (confirm critical, create
  #               normal, retrieve and items background)
  # Then loadtest/endpoints_report.py: report.md, report.json, chart.png/svg.
  for v in PROVIDER_GLOBAL_RATE PROVIDER_ENDPOINT_RATE; do
    [ -z "${!v:-}" ] || [[ ${!v} =~ ^[1-9][0-9]*(r/[sm])?$ ]] || { log "$v must be N (a second), Nr/s or Nr/m, got '${!v}'"; exit 2; }
  done
  for v in PROVIDER_GLOBAL_BURST PROVIDER_ENDPOINT_BURST; do
    [ -z "${!v:-}" ] || [[ ${!v} =~ ^[0-9]+$ ]] || { log "$v must be a whole number, got '${!v}'"; exit 2; }
  done
  flood_endpoint=${FLOOD_ENDPOINT:-items}
  case "$flood_endpoint" in items|retrieve) ;; *) log "FLOOD_ENDPOINT must be items or retrieve, got '$flood_endpoint'"; exit 2 ;; esac
  export FLOOD_ENDPOINT=$flood_endpoint
  read_path="/lookup.php?shop=probe&what=$flood_endpoint&id=probe"
  for run in ${EP_RUNS:-baseline global endpoints priorities}; do
    case "$run" in
      baseline) form=global scenario=baseline ;;
      global|endpoints|priorities) form=$run scenario=flood ;;
      *) log "EP_RUNS: '$run' is none of baseline, global, endpoints, priorities"; exit 2 ;;
    esac
    dir="$out/$run"; current="$dir"
    port=$(start_checkout "$dir" on "" "CHECKOUT_EP_LIMITS=$form")
    [ -n "$port" ] || { log "FAILED: the stack of run $run did not start (see $dir)"; exit 1; }
    # One read before the load: a 500 is the page failing (an extension without issue 42).
    ep_check "$dir" "$form" "$(curl -s -o "$dir/probe.json" -w '%{http_code}' "http://127.0.0.1:$port$read_path" || true)"
    printf '{"run": "%s", "form": "%s", "scenario": "%s", "duration": %d, "flood_endpoint": "%s", "provider_global": "%s/s burst %s", "provider_endpoint": "%s/s burst %s"}\n' \
      "$run" "$form" "$scenario" "$duration" "$flood_endpoint" "${PROVIDER_GLOBAL_RATE:-50}" "${PROVIDER_GLOBAL_BURST:-25}" \
      "${PROVIDER_ENDPOINT_RATE:-25}" "${PROVIDER_ENDPOINT_BURST:-5}" > "$dir/run.json"
    log "run $run (CHECKOUT_EP_LIMITS=$form, $scenario, flood of $flood_endpoint), ${duration}s"
    : > "$dir/access.log"   # the probe's line out: the report counts the load's requests
    SCENARIO=$scenario DURATION=$duration timeout $((duration + 60)) .venv/bin/locust -f loadtest/locust_endpoints.py --headless \
      --host "http://127.0.0.1:$port" --csv "$dir/locust" --only-summary --loglevel WARNING > "$dir/locust.log" 2>&1 &
    wait || true
    stop_current
  done
  .venv/bin/python loadtest/endpoints_report.py "$out"
  exit $?
fi

# RUNS: only these runs (SCENARIO-LIMITER words, e.g. "baseline-off flood-on"; the verdict
# needs a baseline: without one there is none, e.g. the Prometheus system test's "flood-on");
# unset, all eight.
wanted() { [ -z "${RUNS:-}" ] || [[ " $RUNS " == *" $1-$2 "* ]]; }
for limiter in off on; do
  ! wanted baseline "$limiter" || run_one baseline "$limiter" ""
  ! wanted flood "$limiter" || run_one flood "$limiter" "$hot1"
  ! wanted lottery "$limiter" || run_one lottery "$limiter" "$hot1"
  ! wanted multi "$limiter" || HOT_USERS=${HOT_USERS:-17} run_one multi "$limiter" "$hot3"
done
prometheus_summary
if [ -n "${RUNS:-}" ] && [[ " $RUNS " != *" baseline-"* ]]; then
  log "no baseline among RUNS ($RUNS): no verdict (Prometheus' results: $out/prometheus.md)"
  exit 0
fi
.venv/bin/python loadtest/verdict.py "$out" | tee "$out/verdict.txt"
