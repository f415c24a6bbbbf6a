#!/usr/bin/env bash
# Runs inside a fresh chroot (scripts/install-test.sh) on a clean copy of the source in
# /usr/src/php/ext/checkout_guard: the PHP way, step by step as docker-php-ext-install
# runs it in the official php images (their CFLAGS/LDFLAGS exported, phpize,
# ./configure --enable-option-checking=fatal, make, strip, make install, make clean),
# checked as PIE checks it (modules/checkout_guard.so after make, the .so in php-config's
# extension dir after make install); then enabled, listed by php -m, deciding in Valkey.
#   phpize-inside.sh PHP_VERSION VALKEY_PORT
set -uo pipefail
v=$1 vport=$2
src=/usr/src/php/ext/checkout_guard
failed=0
ok() { echo "  ok   $*"; }
bad() { echo "  FAIL $*"; failed=1; }
check() { local what=$1; shift; if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$what"; fi; }
ms() { date +%s%3N; }
step() {  # step NAME CMD...: runs CMD, its output in /tmp/NAME.log, and says how long
  local name=$1 t0; shift; t0=$(ms)
  if "$@" > "/tmp/$name.log" 2>&1; then
    echo "  $name: $(( $(ms) - t0 )) ms"
  else
    tail -30 "/tmp/$name.log"; bad "$name (log above)"; exit 1
  fi
}

cd "$src" || exit 1
find . -type f | sort > /tmp/files-before
check "no Makefile in the source (docker-php-ext-install would skip ./configure)" test ! -e Makefile

# The official image's PHP_CFLAGS, PHP_CPPFLAGS, PHP_LDFLAGS, which docker-php-ext-install
# and docker-php-ext-configure export.
export CFLAGS="-fstack-protector-strong -fpic -fpie -O2 -D_LARGEFILE_SOURCE -D_FILE_OFFSET_BITS=64"
export CPPFLAGS="$CFLAGS" LDFLAGS="-Wl,-O1 -pie"
build=()
! command -v dpkg-architecture >/dev/null || build=(--build="$(dpkg-architecture --query DEB_BUILD_GNU_TYPE)")
step phpize phpize
step configure ./configure --enable-option-checking=fatal "${build[@]}"
step make make -j"$(nproc)"
check "PIE: make left modules/checkout_guard.so" test -f modules/checkout_guard.so
find modules -maxdepth 1 -name '*.so' -exec strip --strip-all {} +
step make-install make -j"$(nproc)" install
ext_dir=$(php-config --extension-dir)
check "PIE: make install put checkout_guard.so in $ext_dir" test -f "$ext_dir/checkout_guard.so"
check "make install did not run cargo" sh -c "! grep -q 'cargo build' /tmp/make-install.log"
# What phpize, configure, make and make install wrote, for install-test.sh to hold against
# .gitignore (git is not in the chroot).
find . -path ./target -prune -o -type f -print | sort | comm -13 /tmp/files-before - > /usr/src/files-written

# Enabled the Debian way (docker-php-ext-enable writes the same line into conf.d there).
printf '; priority=20\nextension=checkout_guard\n' > "/etc/php/$v/mods-available/checkout_guard.ini"
phpenmod -v "$v" -s cli checkout_guard
check "php -m lists checkout_guard" sh -c "php -m | grep -qx checkout_guard"
answer=$(php -d "checkout_guard.url=redis://127.0.0.1:$vport" -r '
  $l = new CheckoutGuard\RateLimiter(["name" => "phpize-" . getmypid() . "-" . hrtime(true),
      "global" => ["capacity" => 1, "refill_per_second" => 0.001]]);
  $a = $l->acquire("shop-1"); $b = $l->acquire("shop-1");
  echo PHP_MAJOR_VERSION, ".", PHP_MINOR_VERSION, " ", $a->reason(), " ", $b->reason();' 2>&1)
echo "  php -r acquire() twice: $answer"
check "acquire() decides in Valkey: allowed, then denied by global" test "$answer" = "$v allowed global"

step make-clean make -j"$(nproc)" clean
step phpize-clean phpize --clean
find . -type f | sort > /tmp/files-after
if diff /tmp/files-before /tmp/files-after > /tmp/files.diff; then
  ok "make clean + phpize --clean: the source tree as it was (nothing lost, nothing left)"
else
  bad "make clean + phpize --clean: the tree differs:"; head -20 /tmp/files.diff
fi
exit "$failed"
