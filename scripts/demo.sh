#!/usr/bin/env bash
# The demo command: installs what it needs and builds the extension, then
#   1. a small flash sale on the command line against a Valkey it starts itself: a hot shop
#      flooding while other shops buy, per shop what was allowed and why (about 10 s);
#   2. the load test's short version: the example checkout behind nginx and php-fpm, a mock
#      provider answering 429 past its rate, Locust driving the three flash-sale patterns
#      with the limiter on and off, and the verdict table with where the charts are
#      (about 2 minutes).
# Everything runs on loopback and is stopped at the end, on failure and on Ctrl-C.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"

bash scripts/setup.sh
build_extension

run="$CG_ROOT/.run/demo-$$"
trap 'stop_pidfile "$run/valkey.pid"; rm -rf "$run"' EXIT
trap 'exit 130' INT TERM
port=$(free_port)
start_valkey "$run" "$port"
php -n -d "extension=$CG_EXT" php/examples/flash_sale.php "redis://127.0.0.1:$port" "${CLI_SECONDS:-2}"
stop_pidfile "$run/valkey.pid"

bash scripts/loadtest.sh short
