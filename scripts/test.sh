#!/usr/bin/env bash
# The test command: installs what it needs, builds, then runs every check.
#   1. cargo fmt --check, cargo clippy -D warnings
#   2. Rust tests (bucket math, options, script/model equivalence against a real Valkey)
#   3. stubs are fresh (scripts/stubs.sh --check: Reflection vs stubs/); the Python tooling's unit tests
#      (loadtest/tests: reports, config templates vs the Kubernetes manifest)
#   4. PHPUnit against the built extension (tests/php/phpunit.xml), suite by suite,
#      stopping at the first that fails:
#        unit         the extension alone: no Valkey, no servers, no environment (seconds)
#        integration  a real Valkey started here (and Valkeys the tests start themselves)
#        system       php-fpm + nginx, the scripts/*.sh runs, valgrind, experiments (minutes)
#   5. the limiter, telemetry and hostile-input tests again under valgrind; then (full runs
#      only) helgrind over the ZTS threaded host (scripts/helgrind.sh 8 25)
# Arguments go to PHPUnit (to each suite's run). While working on PHP code, PHP_ONLY=1
# skips steps 1-3; --testsuite NAME runs that suite only (and starts Valkey, php-fpm and
# nginx only when it is not unit):
#   PHP_ONLY=1 scripts/test.sh --filter HealthTest
#   PHP_ONLY=1 scripts/test.sh --testsuite unit
#   PHP_ONLY=1 scripts/test.sh --testsuite integration --filter BucketsTest
# The unit suite also runs by hand, nothing else started and no variable set:
#   php -d extension=target/release/libcheckout_guard.so /usr/bin/phpunit -c tests/php/phpunit.xml --testsuite unit
# Last, run without arguments and without PHP_ONLY (as .ci/run does): the install paths,
# short (scripts/install-test.sh: phpize ... make install as docker-php-ext-install and PIE
# run it, and the Debian package under php-fpm + nginx, each in a fresh copy of the PHP 8.4
# chroot), then the PHP matrix, short (scripts/php-matrix.sh): the extension built and the
# unit and integration suites run on PHP 8.2 (here), 8.4 and 8.5 (in chroots made once and
# cached in /var/cache/checkout-guard), and the ZTS PHP (threads, FrankenPHP's worker mode
# emulated, Apache's event MPM); then the prebuilt release archives from those same
# builds (scripts/release-test.sh: scripts/release.sh, each archive installed as PIE does
# into a fresh chroot of its PHP without Rust or a compiler, the unit and integration
# suites there); then the example checkout on Apache's event MPM against php-fpm
# (scripts/bench-apache.sh).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"

bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

if [ -z "${PHP_ONLY:-}" ]; then
  log "cargo fmt --check"
  cargo fmt --all -- --check
  log "cargo clippy"
  cargo clippy --quiet --all-targets -- -D warnings
fi
build_extension
if [ -z "${PHP_ONLY:-}" ]; then
  log "cargo test"
  VALKEY_SERVER="$(valkey_bin)" cargo test --quiet --workspace 2>&1
  log "stubs are fresh"
  bash scripts/stubs.sh --check
  log "python tooling"
  .venv/bin/python -m unittest discover loadtest/tests 2>&1
fi

# The suite(s) named by --testsuite NAME (or --testsuite=NAME); none: all three in turn.
suite=""
prev=""
for arg in "$@"; do
  [ "$prev" != "--testsuite" ] || suite=$arg
  case "$arg" in --testsuite=*) suite=${arg#--testsuite=} ;; esac
  prev=$arg
done

# unit first, before anything is started: it needs nothing, and a broken test fails fast.
if [ -z "$suite" ] || [ "$suite" = unit ]; then
  log "phpunit: unit"
  php -d "extension=$CG_EXT" /usr/bin/phpunit -c tests/php/phpunit.xml --testsuite unit "$@"
fi

if [ "$suite" != unit ]; then
  run="$CG_ROOT/.run/test-$$"
  cleanup() {
    bash scripts/stack.sh stop "$run" || true
    stop_pidfile "$run/valkey/valkey.pid"
    rm -rf "$run"
  }
  trap cleanup EXIT INT TERM
  mkdir -p "$run"
  port=$(free_port)
  start_valkey "$run/valkey" "$port"
  url="redis://127.0.0.1:$port"
  log "php-fpm + nginx"
  read -r http_port _ <<< "$(bash scripts/stack.sh start "$run" tests/php/fixtures/www "$url/1")"

  # This process's telemetry goes to all three sinks, so the tests can compare them.
  phpunit_with_stack() {
    CHECKOUT_GUARD_TEST_URL="$url" \
    CHECKOUT_GUARD_TEST_HTTP="http://127.0.0.1:$http_port" \
    CHECKOUT_GUARD_TEST_EVENTS="$run/phpunit-events.jsonl" \
    CHECKOUT_GUARD_TEST_FPM_EVENTS="$run/events.jsonl" \
    CHECKOUT_GUARD_EXT="$CG_EXT" \
    VALKEY_SERVER="$(valkey_bin)" \
      php -d "extension=$CG_EXT" \
        -d checkout_guard.events.sinks=jsonl,stream,newrelic \
        -d "checkout_guard.events.jsonl_path=$run/phpunit-events.jsonl" \
        -d "checkout_guard.events.stream_url=$url" \
        -d checkout_guard.events.stream_key=cg-test:events \
        /usr/bin/phpunit -c tests/php/phpunit.xml "$@"
  }
  if [ -n "$suite" ]; then
    log "phpunit: $suite"
    phpunit_with_stack "$@"
  else
    for s in integration system; do
      log "phpunit: $s"
      phpunit_with_stack --testsuite "$s" "$@"
    done
  fi

  errors=$(php_errors "$run/php-errors.log")
  if [ -n "$errors" ]; then
    echo "PHP errors under php-fpm:" >&2; echo "$errors" >&2; exit 1
  fi
fi

if [ -z "${PHP_ONLY:-}" ]; then
  log "valgrind"
  bash scripts/valgrind.sh
fi

if [ -z "${PHP_ONLY:-}" ] && [ $# -eq 0 ]; then
  # The race detector on the threaded host (needs the ZTS PHP: made here on a new machine,
  # then cached and reused by the matrix's zts row); fails on an unsuppressed context.
  log "helgrind (ZTS PHP, threaded host)"
  bash scripts/helgrind.sh 8 25
  log "install paths (PHP 8.4 chroot)"
  bash scripts/install-test.sh short
  # 8.2 is this machine's, the suites above: the matrix adds 8.4, 8.5 and ZTS. Their
  # integration suites run once, against the installed archives (release-test.sh) below.
  log "PHP matrix"
  CG_MATRIX_NO_INTEGRATION=1 bash scripts/php-matrix.sh short 8.4 8.5 zts
  log "prebuilt archives, installed without Rust or a compiler"
  bash scripts/release-test.sh short
  # The example checkout on Apache's event MPM (mod_php of the matrix's ZTS PHP) against
  # php-fpm + nginx: requests/s and p95 printed (~15 s).
  log "Apache event MPM against php-fpm (scripts/bench-apache.sh)"
  bash scripts/bench-apache.sh 2000 16
fi
