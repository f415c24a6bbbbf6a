#!/usr/bin/env bash
# Builds the Debian package checkout-guard_<version>+php<X.Y>_<arch>.deb with dpkg-deb:
# the extension for the PHP it is built against, in that PHP's extension directory, its
# ini in /etc/php/X.Y/mods-available (enabled on install, gone on remove: below), the
# checkout-guard command line in /usr/bin, and the PHP library (php/src) in Debian's PHP
# library layout, /usr/share/php/CheckoutGuard/ (namespace CheckoutGuard\ -> that
# directory), with /usr/share/php/CheckoutGuard/autoload.php, which loads it and Debian's
# PSR-7/PSR-18 interfaces (php-psr-http-message, php-psr-http-client: Recommends) as
# php/autoload.php does in a checkout. The IDE stubs go to /usr/share/checkout-guard/stubs/
# (outside PHP's include path: loaded with the extension they would redeclare its classes).
#
#   scripts/deb.sh [OUT_DIR]        (default OUT_DIR: dist/)
#
# The PHP is the one the build finds, as ext-php-rs does: $PHP_CONFIG (else php-config on
# PATH) and $PHP (else php on PATH), which must be the same PHP. cargo builds into
# $CARGO_TARGET_DIR (else target/). Needs a Debian with phpX.Y-dev, clang/libclang-dev,
# dpkg-deb, binutils. Prints the .deb's path.
#
# The ini: the package ships its default in /usr/share/checkout-guard/ and postinst copies
# it to /etc/php/X.Y/mods-available/checkout_guard.ini, not as a conffile, so that
# `apt-get remove` (not only purge) can take it away: postrm disables the module for every
# SAPI (phpdismod through Debian's php-maintscript-helper) and deletes the ini while it is
# the one postinst wrote. An ini the administrator edited stays (disabled) until purge;
# upgrades replace an unedited ini and keep an edited one. Enabled on install for every
# SAPI that is installed (cli, fpm, ...), as Debian's own PHP extension packages are, and
# registered, so a SAPI installed later enables it too.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out=${1:-dist}
priority=20

log() { printf '==> %s\n' "$*" >&2; }
die() { echo "scripts/deb.sh: $*" >&2; exit 1; }

for tool in dpkg-deb dpkg objdump strip cargo; do
  command -v "$tool" >/dev/null || die "$tool not found"
done
php_config=$(command -v "${PHP_CONFIG:-php-config}") || die "php-config not found (set PHP_CONFIG)"
php=$(command -v "${PHP:-php}") || die "php not found (set PHP)"
phpv=$("$php" -n -r 'echo PHP_MAJOR_VERSION, ".", PHP_MINOR_VERSION;')
vernum=$("$php_config" --vernum)
[ "$phpv" = "$((vernum / 10000)).$((vernum / 100 % 100))" ] \
  || die "$php is PHP $phpv but $php_config is $vernum: set PHP and PHP_CONFIG to one PHP"
ext_dir=$("$php_config" --extension-dir)
phpapi=$("$php_config" --phpapi 2>/dev/null || "$php" -n -i | sed -n 's/^PHP API => //p')
[ -n "$phpapi" ] || die "no PHP API number from $php_config --phpapi"
case "$ext_dir" in /usr/lib/php/*) ;; *) die "$php_config is not Debian's PHP (extension dir $ext_dir)";; esac

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || die "no [workspace.package] version in Cargo.toml"
debversion="$version+php$phpv"
arch=$(dpkg --print-architecture)
target=${CARGO_TARGET_DIR:-$root/target}

log "cargo build --release -p checkout_guard -p checkout-guard (PHP $phpv: $php)"
cargo build --release --locked --quiet -p checkout_guard -p checkout-guard

stage=$(mktemp -d "${TMPDIR:-/tmp}/checkout-guard-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
pkg="$stage/pkg"
install -d -m 755 "$pkg/DEBIAN" "$pkg$ext_dir" "$pkg/usr/bin" "$pkg/usr/share/checkout-guard" \
  "$pkg/usr/share/doc/checkout-guard"
install -m 644 "$target/release/libcheckout_guard.so" "$pkg$ext_dir/checkout_guard.so"
install -m 755 "$target/release/checkout-guard" "$pkg/usr/bin/checkout-guard"
strip --strip-unneeded "$pkg$ext_dir/checkout_guard.so"
strip "$pkg/usr/bin/checkout-guard"

# The PHP library: php/src/X/Y.php -> /usr/share/php/CheckoutGuard/X/Y.php; php/config/
# (the Laravel config file) -> /usr/share/php/CheckoutGuard/config/.
lib="$pkg/usr/share/php/CheckoutGuard"
install -d -m 755 "$lib" "$pkg/usr/share/checkout-guard/stubs"
(cd php/src && find . -type f -name '*.php' -printf '%P\n') | sort | while read -r f; do
  install -D -m 644 "php/src/$f" "$lib/$f"
done
if [ -d php/config ]; then
  (cd php/config && find . -type f -name '*.php' -printf '%P\n') | sort | while read -r f; do
    install -D -m 644 "php/config/$f" "$lib/config/$f"
  done
fi
[ -f "$lib/Http/RateLimitedClient.php" ] || die "php/src was not installed into $lib"
install -m 644 php/stubs/checkout_guard.php "$pkg/usr/share/checkout-guard/stubs/checkout_guard.php"
cat > "$lib/autoload.php" <<'PHP'
<?php
// checkout-guard's PHP library (package checkout-guard): require this file to load the
// classes of namespace CheckoutGuard\ from this directory (Debian's PHP library layout),
// and the PSR interfaces they implement from Debian's packages (php-psr-http-client,
// php-psr-http-message) when they are installed.
declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    $prefix = 'CheckoutGuard\\';
    if (strncmp($class, $prefix, strlen($prefix)) !== 0) {
        return;
    }
    $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
    if (is_file($file)) {
        require $file;
    }
});

foreach (['/usr/share/php/Psr/Http/Message/autoload.php', '/usr/share/php/Psr/Http/Client/autoload.php'] as $debian) {
    if (is_file($debian)) {
        require_once $debian;
    }
}
PHP
chmod 644 "$lib/autoload.php"

cat > "$pkg/usr/share/checkout-guard/checkout_guard.ini" <<EOF
; checkout_guard: CheckoutGuard\\RateLimiter and CheckoutGuard\\Telemetry (package
; checkout-guard). Enable or disable it per SAPI with phpenmod / phpdismod checkout_guard.
; The settings and their defaults are in the project's README ("Settings"); e.g.:
;   checkout_guard.url = redis://127.0.0.1:6379
;   checkout_guard.timeout_ms = 50
;   checkout_guard.on_unavailable = allow
; priority=$priority
extension=checkout_guard.so
EOF
chmod 644 "$pkg/usr/share/checkout-guard/checkout_guard.ini"

cat > "$pkg/usr/share/doc/checkout-guard/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: checkout-guard

Files: *
License: MIT
 checkout-guard is licensed under the MIT license (Cargo.toml); the Rust crates it is
 built from carry their own licenses (MIT or Apache-2.0, see their Cargo.toml).
EOF
chmod 644 "$pkg/usr/share/doc/checkout-guard/copyright"

# Dependencies of the two binaries: the package of each library they need (dpkg -S of
# the file ldd resolves), libc6 at least the newest GLIBC_ symbol version they use.
shlib_deps() {
  local f lib path p cand glibc
  declare -A seen=()
  for f in "$pkg$ext_dir/checkout_guard.so" "$pkg/usr/bin/checkout-guard"; do
    for lib in $(objdump -p "$f" | awk '$1 == "NEEDED" {print $2}'); do
      case "$lib" in libc.so.*|ld-linux*) continue ;; esac
      path=$(ldd "$f" | awk -v l="$lib" '$1 == l {print $3}')
      [ -n "$path" ] || die "$lib (needed by $f) not found"
      # dpkg knows a library by the path its package ships, /lib or /usr/lib (merged /usr).
      p=""
      for cand in "$path" "$(readlink -f "$path")" "/usr${path#/usr}" "${path#/usr}"; do
        p=$(dpkg -S "$cand" 2>/dev/null | head -1 | cut -d: -f1) || p=""
        [ -z "$p" ] || break
      done
      [ -n "$p" ] || die "no package holds $path"
      [ "$p" = libc6 ] || seen[$p]=1
    done
  done
  glibc=$(objdump -T "$pkg$ext_dir/checkout_guard.so" "$pkg/usr/bin/checkout-guard" \
    | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
  printf 'libc6 (>= %s)' "$glibc"
  for p in $(printf '%s\n' "${!seen[@]}" | sort); do printf ', %s' "$p"; done
}
depends="php$phpv-common, phpapi-$phpapi, $(shlib_deps)"

cat > "$pkg/DEBIAN/control" <<EOF
Package: checkout-guard
Version: $debversion
Architecture: $arch
Maintainer: checkout-guard maintainers <maintainers@users.noreply.a-seed-e9300bfc.example>
Section: php
Priority: optional
Depends: $depends
Recommends: php-psr-http-client, php-psr-http-message
Suggests: php-guzzlehttp-guzzle
Installed-Size: $(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
Description: checkout_guard PHP $phpv extension: rate limiter for checkouts, and its CLI
 checkout_guard gives PHP CheckoutGuard\\RateLimiter, a token bucket in Valkey decided
 atomically in one round trip, with a global bucket and smaller hot-lane and hot-shop
 buckets so that a flooded shop cannot take the whole payment provider's budget, and
 CheckoutGuard\\Telemetry, unsampled records of every external API call.
 .
 This package holds the extension built for PHP $phpv (API $phpapi), enabled for the
 installed SAPIs, the checkout-guard command line (scan, peaks, report, limiter), and
 the PHP library (PSR-18 decorators, Guzzle middleware, test helpers, framework
 integrations) in /usr/share/php/CheckoutGuard, loaded by
 require '/usr/share/php/CheckoutGuard/autoload.php'.
EOF

# Maintainer scripts. php_invoke (Debian's php-maintscript-helper, in php-common) enables
# and disables through phpenmod/phpdismod, respects an administrator's phpdismod on
# upgrade, and triggers the php-fpm reload.
common="set -e
v=$phpv
mod=checkout_guard
ini=/etc/php/\$v/mods-available/\$mod.ini
default=/usr/share/checkout-guard/\$mod.ini
written=/var/lib/checkout-guard/\$mod.ini.md5sum
# The ini is still the one postinst wrote (the administrator has not edited it).
ours() { [ -f \"\$written\" ] && md5sum --status -c \"\$written\" 2>/dev/null; }"

cat > "$pkg/DEBIAN/postinst" <<EOF
#!/bin/sh
$common
if [ "\$1" = configure ]; then
  mkdir -p /var/lib/checkout-guard
  if [ ! -e "\$ini" ] || ours; then
    cp "\$default" "\$ini.cg-new"
    mv -f "\$ini.cg-new" "\$ini"
    md5sum "\$ini" > "\$written"
  else
    echo "checkout-guard: keeping \$ini (edited); the default is \$default" >&2
  fi
  if [ -e /usr/lib/php/php-maintscript-helper ]; then
    . /usr/lib/php/php-maintscript-helper
    php_invoke enmod "\$v" ALL "\$mod" || exit 1
  else
    phpenmod -v "\$v" "\$mod"
  fi
fi
exit 0
EOF

cat > "$pkg/DEBIAN/prerm" <<EOF
#!/bin/sh
$common
# Disabled before an upgrade and enabled again by the new postinst (a changed priority
# moves the conf.d links), as Debian's own extension packages do.
if [ "\$1" = upgrade ] && [ -e /usr/lib/php/php-maintscript-helper ] && [ -e "\$ini" ]; then
  . /usr/lib/php/php-maintscript-helper
  php_invoke dismod "\$v" ALL "\$mod" || exit 1
fi
exit 0
EOF

cat > "$pkg/DEBIAN/postrm" <<EOF
#!/bin/sh
$common
case "\$1" in
  remove)
    if [ -e "\$ini" ]; then
      if [ -e /usr/lib/php/php-maintscript-helper ]; then
        . /usr/lib/php/php-maintscript-helper
        php_invoke dismod "\$v" ALL "\$mod" || exit 1
      elif command -v phpdismod >/dev/null; then
        phpdismod -v "\$v" "\$mod"
      fi
      if ours; then
        rm -f "\$ini" "\$written"
      else
        echo "checkout-guard: keeping \$ini (edited; disabled); purge removes it" >&2
      fi
    fi
    ;;
  purge)
    # Forget phpenmod's state of the module (/var/lib/php/modules/X.Y/SAPI/*_by_*/,
    # registry/), one SAPI at a time as php_invoke does: phpdismod -p for several SAPIs
    # at once forgets only the last one's.
    for state in /var/lib/php/modules/\$v/*/; do
      sapi=\$(basename "\$state")
      [ "\$sapi" != registry ] || continue
      phpdismod -p -f -v "\$v" -s "\$sapi" "\$mod" >/dev/null 2>&1 || true
    done
    rm -f /var/lib/php/modules/\$v/*/*_by_*/\$mod /var/lib/php/modules/\$v/registry/\$mod
    rm -f "\$ini" "\$ini.cg-new"
    rm -rf /var/lib/checkout-guard
    # Links left in any conf.d that point at the ini.
    find /etc/php -xtype l 2>/dev/null | while read -r link; do
      [ "\$(basename "\$(readlink -m "\$link")")" != "\$mod.ini" ] || rm -f "\$link"
    done
    ;;
esac
exit 0
EOF
chmod 755 "$pkg/DEBIAN/postinst" "$pkg/DEBIAN/prerm" "$pkg/DEBIAN/postrm"

(cd "$pkg" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
  > "$pkg/DEBIAN/md5sums"
chmod 644 "$pkg/DEBIAN/control" "$pkg/DEBIAN/md5sums"

mkdir -p "$out"
deb="$out/checkout-guard_${debversion}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
log "built $deb ($(du -h "$deb" | cut -f1)): Depends: $depends"
echo "$deb"
