#!/usr/bin/env bash
# Run by scripts/release-test.sh inside a fresh chroot copy without Rust or a compiler
# (CG_CHROOT_NO_RUST=1, compilers purged): installs a prebuilt archive as PIE does
# (scripts/install-prebuilt.sh) and runs PHPUnit against the installed extension, loaded
# by its ini alone (no -d extension=).
#   tests/install/prebuilt-inside.sh DIST ARCHIVE PHP VALKEY_PORT OUT SUITE...
# DIST holds the archives and SHA256SUMS; OUT (under the repository) gets the logs and
# JUnit reports. Prints "ok"/"FAIL" lines; exits 1 on the first failure.
set -euo pipefail
dist=$1 archive=$2 php=$3 vport=$4 out=$5
shift 5
cd "$(dirname "$0")/../.."
ok() { echo "      ok   $*"; }
fail() { echo "      FAIL $*"; exit 1; }

# 1. Nothing here can build: no Rust, no C compiler, on the PATH or off it.
for tool in cargo rustc rustup cc c++ gcc g++ clang; do
  if command -v "$tool" >/dev/null 2>&1; then fail "$tool is here ($(command -v "$tool"))"; fi
done
for d in "$HOME/.cargo/bin" "$HOME/.rustup"; do
  [ -z "$(ls -A "$d" 2>/dev/null)" ] || fail "$d is not empty"
done
ok "no cargo, rustc, rustup, cc, c++, gcc, g++ or clang (PATH=$PATH)"

# 2. An archive whose .so cannot load (cut short) is refused before anything is installed.
# shellcheck disable=SC2016  # PHP code
ext_dir=$("$php" -r 'echo ini_get("extension_dir");')
mkdir -p "$out/bad/x"
tar -xzf "$dist/$archive" -C "$out/bad/x"
head -c 4096 "$out/bad/x/checkout_guard.so" > "$out/bad/x/cut.so" && mv -f "$out/bad/x/cut.so" "$out/bad/x/checkout_guard.so"
tar -czf "$out/bad/$archive" -C "$out/bad/x" checkout_guard.so
if CG_SKIP_SHA256=1 bash scripts/install-prebuilt.sh "$out/bad/$archive" "$php" > "$out/bad.log" 2>&1; then
  fail "a cut-short archive was installed"
fi
grep -q "does not load" "$out/bad.log" || { cat "$out/bad.log"; fail "the refusal does not say the .so does not load"; }
[ ! -e "$ext_dir/checkout_guard.so" ] || fail "a refused archive left $ext_dir/checkout_guard.so"
compgen -G "/etc/php/*/*/conf.d/*checkout_guard.ini" >/dev/null && fail "a refused archive left an ini"
ok "a cut-short archive refused, nothing installed: $(tail -1 "$out/bad.log" | cut -c1-100)"

# 3. Installed as PIE installs a pre-packaged binary.
bash scripts/install-prebuilt.sh "$dist/$archive" "$php" > "$out/install.log" 2>&1 \
  || { cat "$out/install.log"; fail "scripts/install-prebuilt.sh $archive"; }
sed 's/^/           /' "$out/install.log"
[ -f "$ext_dir/checkout_guard.so" ] || fail "no $ext_dir/checkout_guard.so"
ini=$("$php" --ini | grep -o '/[^ ,]*/20-checkout_guard\.ini' | head -1 || true)
[ -n "$ini" ] || { "$php" --ini; fail "no 20-checkout_guard.ini among the PHP's scanned ini files"; }
grep -qx 'extension=checkout_guard' "$ini" || fail "$ini does not say extension=checkout_guard"
"$php" -m | grep -x checkout_guard >/dev/null || fail "php -m does not list checkout_guard"
# shellcheck disable=SC2016  # PHP code
loaded=$("$php" -r '$f = (new ReflectionExtension("checkout_guard"))->getName(); echo $f, " ", phpversion("checkout_guard");')
ok "php -m lists checkout_guard ($loaded) from $ext_dir/checkout_guard.so, enabled by $ini"

# 4. The CLI and the Valkey module from their archives.
mkdir -p "$out/bin"
# This release's: the version of the extension archive under test (dist/ may hold others).
version=${archive#php_checkout_guard-}; version=${version%%_php*}
tar -xzf "$dist/checkout-guard-$version-x86_64-linux-glibc.tgz" -C "$out/bin"
tar -xzf "$dist/checkout_guard_valkey-$version-x86_64-linux-glibc.tgz" -C "$out/bin"
"$out/bin/checkout-guard" --version > "$out/cli.txt" 2>&1 || { cat "$out/cli.txt"; fail "the CLI archive's checkout-guard --version"; }
ok "the CLI archive runs: $(head -1 "$out/cli.txt")"

# 5. The suites, the extension loaded by the ini (the integration suite as php-matrix runs it).
status=0
for s in "$@"; do
  cmd=("$php")
  if [ "$s" != unit ]; then
    url="redis://127.0.0.1:$vport"
    # shellcheck disable=SC2054  # the commas are in values
    cmd=(env CHECKOUT_GUARD_TEST_URL="$url" CHECKOUT_GUARD_EXT="$ext_dir/checkout_guard.so"
         CHECKOUT_GUARD_VALKEY_MODULE="$out/bin/libcheckout_guard_valkey.so"
         CHECKOUT_GUARD_CLI="$out/bin/checkout-guard"
         CHECKOUT_GUARD_TEST_EVENTS="$out/$s-events.jsonl" VALKEY_SERVER="$VALKEY_SERVER"
         "$php" -d checkout_guard.events.sinks=jsonl,stream,newrelic
         -d "checkout_guard.events.jsonl_path=$out/$s-events.jsonl"
         -d "checkout_guard.events.stream_url=$url" -d checkout_guard.events.stream_key=cg-test:events)
  fi
  t0=$SECONDS
  if "${cmd[@]}" /usr/bin/phpunit -c tests/php/phpunit.xml --testsuite "$s" --exclude-group python-tooling \
      --log-junit "$out/$s.xml" > "$out/$s.log" 2>&1; then
    ok "phpunit $s: $(grep -E '^(OK|Tests:)' "$out/$s.log" | tail -1) ($((SECONDS - t0)) s)"
  else
    tail -30 "$out/$s.log" | sed 's/^/           /'
    echo "      FAIL phpunit $s ($out/$s.log)"
    status=1
  fi
done
exit $status
