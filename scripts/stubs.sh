#!/usr/bin/env bash
# Regenerates the PHP stubs of the extension from the built extension's Reflection
# (scripts/stubs.php, run with the extension loaded), or with --check fails when the
# committed stubs differ from what the build generates. One file, written twice:
#   stubs/checkout_guard.stubs.php   with the extension (the root's Composer package)
#   php/stubs/checkout_guard.php     shipped with the PHP library (php/composer.json)
# The extension is $CG_EXT (scripts/lib.sh: target/release/libcheckout_guard.so), built
# first unless CG_SKIP_BUILD=1 and it exists. --check also loads the stubs in a PHP
# without the extension: they must declare exactly the extension's classes.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
export PATH="$HOME/.cargo/bin:$PATH"
targets=(stubs/checkout_guard.stubs.php php/stubs/checkout_guard.php)
build_extension
generated=$(mktemp)
trap 'rm -f "$generated"' EXIT
php -n -d "extension=$CG_EXT" scripts/stubs.php src > "$generated"
php -n -l "$generated" >/dev/null
if [ "${1:-}" = --check ]; then
  status=0
  for t in "${targets[@]}"; do
    if ! diff -u "$t" "$generated"; then
      echo "$t is stale: run scripts/stubs.sh" >&2
      status=1
    fi
  done
  # The stubs without the extension declare what the extension declares, nothing more.
  ours=$(php -n -d "extension=$CG_EXT" -r '$n = (new ReflectionExtension("checkout_guard"))->getClassNames(); sort($n); echo implode(",", $n);')
  theirs=$(php -n -r 'require $argv[1]; $n = array_values(array_filter(array_merge(get_declared_classes(), get_declared_interfaces()), fn($c) => str_starts_with($c, "CheckoutGuard\\"))); sort($n); echo implode(",", $n);' "$generated")
  if [ "$ours" != "$theirs" ]; then
    echo "the stubs declare [$theirs], the extension [$ours]" >&2
    status=1
  fi
  [ "$status" = 0 ] && echo "stubs are fresh"
  exit "$status"
fi
mkdir -p php/stubs
for t in "${targets[@]}"; do
  cp "$generated" "$t"
  echo "wrote $t"
done
