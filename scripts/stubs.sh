#!/usr/bin/env bash
# Regenerates stubs/checkout_guard.stubs.php from the built extension (cargo php stubs),
# or with --check fails when the committed stubs differ from what the build generates.
# The exception classes are registered by hand and cannot be seen by the generator: their
# stubs live in stubs/exceptions.stubs.php, checked against the loaded classes instead.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
# ext-php-rs exports the module description that cargo-php reads in debug builds only.
cargo build --quiet
generated=$(mktemp)
trap 'rm -f "$generated"' EXIT
cargo php stubs --stdout target/debug/libcheckout_guard.so > "$generated"
if [ "${1:-}" = --check ]; then
  if ! diff -u stubs/checkout_guard.stubs.php "$generated"; then
    echo "stubs/checkout_guard.stubs.php is stale: run scripts/stubs.sh" >&2
    exit 1
  fi
  php -d "extension=$CG_EXT" -r '
    require "stubs/exceptions.stubs.php";
  ' 2>/dev/null && { echo "stubs/exceptions.stubs.php declares classes the extension does not" >&2; exit 1; }
  php -d "extension=$CG_EXT" -r '
    foreach (["ConfigurationException" => "InvalidArgumentException", "UnavailableException" => "RuntimeException"] as $c => $p) {
      $r = new ReflectionClass("CheckoutGuard\\$c");
      if ($r->getParentClass()->getName() !== $p) { fwrite(STDERR, "$c does not extend $p\n"); exit(1); }
    }'
  echo "stubs are fresh"
else
  cp "$generated" stubs/checkout_guard.stubs.php
  echo "wrote stubs/checkout_guard.stubs.php"
fi
