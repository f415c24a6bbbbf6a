#!/usr/bin/env bash
# The PHP matrix: on every PHP below, the extension is built and its PHPUnit suites run
# against that build, each PHP with a Valkey of its own on the host's loopback:
#   8.2  the machine itself (Debian 12's PHP): the build in target/release
#   8.4  Debian 13 (trixie) in a chroot
#   8.5  Debian experimental on a sid base, in a chroot
#   zts  a thread-safe PHP 8.2 on the host, built from Debian's source package
#        (scripts/zts.sh, cached in CG_CACHE/zts), with its embed SAPI: also the threaded
#        suite (tests/php/zts: N request threads in one process, tests/zts/host.c; and
#        FrankenPHP's worker mode emulated, tests/zts/worker.c; Apache's event MPM with
#        the same PHP as its module, scripts/apache.sh)
# The chroots are made on first use and cached with their cargo target directories
# (scripts/chroot.sh: /var/cache/checkout-guard, CG_CACHE overrides): the first run takes
# minutes more, a later run rebuilds incrementally. PHPUnit in a chroot is that Debian's
# (11 in trixie, 13 in sid); the chroots leave out the group python-tooling (the Kubernetes
# manifests checked with the host's .venv: no PHP in it). The Valkey module the integration
# tests load is the host's build (target/release/libcheckout_guard_valkey.so): a Valkey
# module does not depend on PHP.
#
#   scripts/php-matrix.sh [short|full] [VERSION...]
#     short  (the default) the unit and integration suites; scripts/test.sh (CI) runs
#            `CG_MATRIX_NO_INTEGRATION=1 scripts/php-matrix.sh short 8.4 8.5 zts` (below)
#     full   also the system suite's tests of php-fpm + nginx (FpmTest, HttpFpmTest,
#            HealthFpmTest, CallBudgetTest, HostileCallsSystemTest; valgrind is not in the
#            chroots, so its part there is skipped) and the model-based test (ModelTest,
#            its CI seeds), with that PHP's php-fpm and Debian's nginx
#     VERSION...  only these PHPs (default: 8.2 8.4 8.5 zts); the host's own PHP runs on the host
#
# Prints a table (PHP, PHPUnit, build time, passed/failed/skipped and time per suite) and
# exits 1 when anything failed: a chroot that cannot be made (a mirror down) or a build
# that fails is a failure, never a skip. Logs: .run/php-matrix/MODE/phpV/ (build.log,
# SUITE.log, SUITE.xml: PHPUnit's JUnit report) and the table in .run/php-matrix/MODE/table.txt.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$CG_ROOT/scripts/chroot.sh"
source "$CG_ROOT/scripts/zts.sh"
cd "$CG_ROOT"

mode=$(run_mode php-matrix.sh "${1:-}") || exit 2
[ $# -eq 0 ] || shift
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(8.2 8.4 8.5 zts)

# Same PATH as scripts/test.sh: a changed PATH re-runs ext-php-rs's build script.
case ":$PATH:" in *":$HOME/.cargo/bin:"*) ;; *) export PATH="$HOME/.cargo/bin:$PATH" ;; esac

host_php=$(php -r 'echo PHP_MAJOR_VERSION, ".", PHP_MINOR_VERSION;')
out="$CG_ROOT/.run/php-matrix/$mode"
rm -rf "$out"; mkdir -p "$out"

valkeys=()
# shellcheck disable=SC2317  # called by the traps
cleanup() {
  local f
  for f in "${valkeys[@]}"; do stop_pidfile "$f"; done
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

suites=(unit integration)
# CG_MATRIX_NO_INTEGRATION=1 (what scripts/test.sh sets): no integration (nor fpm) suite here
# (the build and the unit suite, and the zts row's threads). CI runs
# it once per PHP against the installed release archive of this same build instead
# (scripts/release-test.sh, in a chroot without Rust or a compiler), not twice.
[ -z "${CG_MATRIX_NO_INTEGRATION:-}" ] || suites=(unit)
[ -n "${CG_MATRIX_NO_INTEGRATION:-}" ] || [ "$mode" != full ] || suites+=(fpm)

# One suite's PHPUnit arguments (after -c phpunit.xml).
suite_args() {
  case "$1" in
    unit|integration) echo "--testsuite $1" ;;
    threads) echo "--testsuite threads" ;;
    fpm) echo "--testsuite system --filter (CallBudget|Fpm|HealthFpm|HostileCallsSystem|HttpFpm|Model)Test::" ;;
  esac
}

# in_php ROOT CMD...: CMD in the repository, on the host (ROOT empty) or in the chroot ROOT;
# at most 20 minutes, so a hung run fails instead of holding CI.
in_php() {
  local root=$1; shift
  if [ -z "$root" ]; then
    timeout --kill-after=10 1200 "$@"
  else
    # shellcheck disable=SC2016  # expanded by the inner bash
    timeout --kill-after=10 1200 bash -c 'source "$1/scripts/lib.sh"; source "$1/scripts/chroot.sh"; shift; cg_chroot_run "$@"' \
      matrix "$CG_ROOT" "$root" env -C "$CG_ROOT" "$@"
  fi
}

# Run in the PHP's environment for the fpm suite: php-fpm + nginx (scripts/stack.sh) of
# that PHP around the PHPUnit command, stopped after it; PHP errors under php-fpm fail it.
# shellcheck disable=SC2016  # expanded by the inner bash
fpm_wrapper='
  run=$1 url=$2; shift 2
  read -r http_port _ <<< "$(bash scripts/stack.sh start "$run" tests/php/fixtures/www "$url/1")" || exit 1
  rc=0
  CHECKOUT_GUARD_TEST_HTTP="http://127.0.0.1:$http_port" CHECKOUT_GUARD_TEST_FPM_EVENTS="$run/events.jsonl" "$@" || rc=$?
  bash scripts/stack.sh stop "$run" || true
  # Less the extension'"'"'s own fail-open notices (scripts/lib.sh, php_errors).
  errors=$( [ -s "$run/php-errors.log" ] && grep -Ev "checkout_guard: (limiter '"'"'.*'"'"' (cannot reach|got no decision from) Valkey|telemetry sink '"'"'.*'"'"' cannot write)" "$run/php-errors.log" )
  if [ -n "$errors" ]; then echo "PHP errors under php-fpm:"; echo "$errors"; rc=1; fi
  exit $rc'

# junit_counts FILE: "passed failed skipped" from PHPUnit's JUnit report (9 to 13), counted
# over its test cases: the suites' own totals read 0 in one PHPUnit 11 run (the 8.4 row's
# integration suite, exit 0 after 87 s).
junit_counts() {
  # shellcheck disable=SC2016  # PHP code
  php -r '
    $x = @simplexml_load_file($argv[1]);
    if ($x === false) { exit(1); }
    $cases = $x->xpath("//testcase");
    if ($cases === false || $cases === []) { exit(1); }
    $failed = $skipped = 0;
    foreach ($cases as $c) {
      if (isset($c->failure) || isset($c->error) || isset($c->warning)) { $failed++; }
      elseif (isset($c->skipped)) { $skipped++; }
    }
    echo count($cases) - $failed - $skipped, " ", $failed, " ", $skipped, "\n";' "$1"
}

rows=()      # table lines
failed=0
row() { rows+=("$(printf '%-12s %-22s %-8s %6s  %-12s %6s %6s %7s %6s  %s' "$@")"); }

for v in "${versions[@]}"; do
  dir="$out/php$v"; mkdir -p "$dir"
  root=""; from="host (Debian $(cut -d. -f1 /etc/debian_version 2>/dev/null || echo '?'))"
  php_bin=php; zts_host=""; zts_worker=""; zts_apache=""
  log "PHP $v"
  if [ "$v" = zts ]; then
    from="host: ZTS, CG_CACHE"
    if ! zts_prefix=$(cg_zts_ensure); then
      row "$v" "$from" "-" "-" "(no ZTS PHP)" - - - - "FAIL: the ZTS PHP could not be made (see above)"; failed=1; continue
    fi
    php_bin=$zts_prefix/bin/php
  elif [ "$v" != "$host_php" ]; then
    case "$v" in 8.4) from="chroot: trixie" ;; 8.5) from="chroot: experimental" ;; *) from="chroot" ;; esac
    if [ "$(id -u)" -ne 0 ]; then
      echo "PHP $v: a chroot needs root" >&2
      row "$v" "$from" "-" "-" "(needs root)" - - - - FAIL; failed=1; continue
    fi
    if ! root=$(cg_chroot_ensure "$v"); then
      row "$v" "$from" "-" "-" "(no chroot)" - - - - "FAIL: chroot could not be made (see above)"; failed=1; continue
    fi
  fi

  # Build: the host's target/release, or the chroot's own target directory.
  t0=$SECONDS
  if [ "$v" = zts ]; then
    # The host's build too: the CLI and the Valkey module the integration tests use.
    # And mod_php for the Apache event MPM tests (made once, ~5 min, then cached).
    { build_extension && cg_zts_build "$dir/ext" && zts_host=$(cg_zts_host) && zts_worker=$(cg_zts_worker) \
        && zts_apache=$(cg_zts_apache); } > "$dir/build.log" 2>&1 && rc=0 || rc=$?
    ext=$dir/ext/libcheckout_guard.so
    [ "$rc" -ne 0 ] || cp -f "$CG_VALKEY_MODULE" "$dir/ext/"
  elif [ -z "$root" ]; then
    build_extension > "$dir/build.log" 2>&1 && rc=0 || rc=$?
    ext=$CG_EXT
  else
    # A copy of the build in .run (the repository is mounted in the chroot at its path):
    # the chroots' target directories are shared by every checkout on this machine.
    cg_chroot_build "$root" "$dir/ext" > "$dir/build.log" 2>&1 && rc=0 || rc=$?
    ext=$dir/ext/libcheckout_guard.so
  fi
  build="$((SECONDS - t0)) s"
  if [ "$rc" -ne 0 ]; then
    tail -20 "$dir/build.log" >&2
    row "$v" "$from" "-" "$build" "(build)" - - - - "FAIL: build failed ($dir/build.log)"; failed=1; continue
  fi
  if [ -n "$root" ]; then
    # The integration tests find the Valkey module beside the extension; the host's serves.
    [ -f "$CG_VALKEY_MODULE" ] || build_extension >> "$dir/build.log" 2>&1
    cp -f "$CG_VALKEY_MODULE" "$dir/ext/"
  fi
  phpunit_v=$(in_php "$root" "$php_bin" /usr/bin/phpunit --version 2>/dev/null | awk '/^PHPUnit/ {print $2; exit}') || true
  php_v=$(in_php "$root" "$php_bin" -r 'echo PHP_VERSION, PHP_ZTS ? " ZTS" : "";' 2>/dev/null) || php_v=$v
  label="$php_v"
  row_suites=("${suites[@]}")
  # The threaded suite; no fpm suite: php-fpm is not built (a ZTS server is threaded).
  [ "$v" != zts ] || { row_suites=(unit); [ -n "${CG_MATRIX_NO_INTEGRATION:-}" ] || row_suites+=(integration); row_suites+=(threads); }

  port=$(free_port)
  start_valkey "$dir/valkey" "$port"
  valkeys+=("$dir/valkey/valkey.pid")
  url="redis://127.0.0.1:$port"

  first=1
  for s in "${row_suites[@]}"; do
    xml="$dir/$s.xml"; logf="$dir/$s.log"
    read -ra args <<< "$(suite_args "$s")"
    [ -z "$root" ] || args+=(--exclude-group python-tooling)
    # PHPUnit 10 and later count PHP's deprecations without showing them: shown in the log.
    [ "${phpunit_v%%.*}" -lt 10 ] 2>/dev/null || args+=(--display-deprecations)
    cmd=("$php_bin" -d "extension=$ext")
    if [ "$s" != unit ]; then
      # shellcheck disable=SC2054  # the commas are in values
      # As scripts/test.sh runs them: this process's telemetry to all three sinks.
      cmd=(env CHECKOUT_GUARD_TEST_URL="$url" CHECKOUT_GUARD_EXT="$ext"
           CHECKOUT_GUARD_TEST_EVENTS="$dir/$s-events.jsonl" VALKEY_SERVER="$(valkey_bin)"
           CHECKOUT_GUARD_ZTS_HOST="$zts_host" CHECKOUT_GUARD_ZTS_WORKER="$zts_worker" CHECKOUT_GUARD_ZTS_APACHE="$zts_apache"
           "${cmd[@]}" -d checkout_guard.events.sinks=jsonl,stream,newrelic
           -d "checkout_guard.events.jsonl_path=$dir/$s-events.jsonl"
           -d "checkout_guard.events.stream_url=$url" -d checkout_guard.events.stream_key=cg-test:events)
    fi
    cmd+=(/usr/bin/phpunit -c tests/php/phpunit.xml --log-junit "$xml" "${args[@]}")
    [ "$s" != fpm ] || cmd=(env CG_EXT="$ext" bash -c "$fpm_wrapper" fpm "$dir/stack" "$url" "${cmd[@]}")
    log "PHP $v: phpunit $s"
    rm -f "$xml"
    t0=$SECONDS
    in_php "$root" "${cmd[@]}" > "$logf" 2>&1 && rc=0 || rc=$?
    took="$((SECONDS - t0)) s"
    if counts=$(junit_counts "$xml" 2>/dev/null); then
      read -r p f k <<< "$counts"
    else
      p=- f=- k=-
    fi
    if [ "$rc" -eq 0 ]; then
      result=ok
      # PHP deprecations do not fail a run (PHPUnit's default) but are worth a look.
      deps=$(sed -n 's/^Tests: .*, Deprecations: \([0-9]*\).*/\1/p' "$logf" | tail -1)
      [ -z "$deps" ] || result="ok, $deps PHP deprecations ($logf)"
    else
      failed=1
      result="FAIL: exit $rc ($logf)"
      [ "$p" != - ] || result="FAIL: exit $rc, no report ($logf)"
      tail -30 "$logf" >&2
    fi
    if [ $first -eq 1 ]; then
      row "$label" "$from" "${phpunit_v:-?}" "$build" "$s" "$p" "$f" "$k" "$took" "$result"
      first=0
    else
      row "" "" "" "" "$s" "$p" "$f" "$k" "$took" "$result"
    fi
  done
  stop_pidfile "$dir/valkey/valkey.pid"
done

{
  echo "PHP matrix ($mode)"
  printf '%-12s %-22s %-8s %6s  %-12s %6s %6s %7s %6s  %s\n' PHP from PHPUnit build suite passed failed skipped time result
  printf '%s\n' "${rows[@]}"
} | tee "$out/table.txt"
exit $failed
