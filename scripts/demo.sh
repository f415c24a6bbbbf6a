#!/usr/bin/env bash
# The demo command: installs what it needs, builds the extension, starts an embedded
# Valkey of its own on a free loopback port, runs a small flash sale, and stops Valkey.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"

bash scripts/setup.sh
build_extension

run="$CG_ROOT/.run/demo-$$"
trap 'stop_pidfile "$run/valkey.pid"; rm -rf "$run"' EXIT INT TERM
port=$(free_port)
start_valkey "$run" "$port"
php -n -d "extension=$CG_EXT" php/examples/flash_sale.php "redis://127.0.0.1:$port" "${1:-2}"
