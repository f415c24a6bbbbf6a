#!/usr/bin/env bash
# Installs a prebuilt checkout_guard archive (scripts/release.sh) into a PHP the way PIE's
# pre-packaged-binary method does, with no Rust, compiler or php-dev on the machine:
#   scripts/install-prebuilt.sh ARCHIVE|URL [PHP]
#     ARCHIVE  php_checkout_guard-VERSION_phpX.Y-x86_64-linux-glibc-nts|zts.tgz, a path or
#              an http(s) URL (fetched with curl)
#     PHP      the php binary to install for (default: php on the PATH)
# Steps, PIE's (php/pie: the .so at the archive's root is copied into the PHP's
# extension_dir; the ini enabled with the package's priority, composer.json "priority": 20):
#   1. SHA256SUMS: when one lies beside the archive (or at the URL's directory), the
#      archive's line must match (sha256sum -c); a missing line is an error. No file (a
#      404 for a URL): not checked (say so); any other download failure is an error.
#      CG_SKIP_SHA256=1 skips it.
#   2. the archive's PHP version and thread safety (from its name) must be the PHP's, its
#      architecture the machine's, and the PHP must load it (php -n) before anything is
#      replaced;
#   3. checkout_guard.so -> `php -r 'echo ini_get("extension_dir");'`;
#   4. the ini: docker-php-ext-enable where it exists (the official php images: what PIE
#      runs there), else phpenmod with /etc/php/X.Y/mods-available/checkout_guard.ini
#      ("; priority=20", Debian's PHP), else PRIORITY-checkout_guard.ini in the PHP's
#      scan dir (PHP_CONFIG_FILE_SCAN_DIR; a PHP built by hand);
#   5. `php -m` must list checkout_guard.
# Stand-alone on purpose (the Dockerfile and production hosts run it without the rest of
# the repository): it sources nothing. Needs write access to the extension and ini dirs.
set -euo pipefail
src=${1:?usage: scripts/install-prebuilt.sh ARCHIVE|URL [PHP]}
php=${2:-php}
priority=${CG_INI_PRIORITY:-20}
log() { printf '==> %s\n' "$*" >&2; }
die() { echo "install-prebuilt: $*" >&2; exit 1; }

command -v "$php" >/dev/null 2>&1 || die "no PHP binary '$php'"
name=$(basename "$src")
case "$name" in
  php_checkout_guard-*_php[0-9]*.[0-9]*-*-linux-*.tgz) ;;
  *) die "'$name' is not a checkout_guard extension archive (php_checkout_guard-VERSION_phpX.Y-ARCH-linux-LIBC-nts|zts.tgz)" ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

case "$src" in
  http://*|https://*)
    log "download $src"
    curl -fsSL --retry 3 -o "$tmp/$name" "$src" || die "could not download $src"
    # Only a 404 means the release has no SHA256SUMS; any other failure is an error.
    code=$(curl -sSL --retry 3 -o "$tmp/SHA256SUMS" -w '%{http_code}' "${src%/*}/SHA256SUMS") \
      || die "could not download ${src%/*}/SHA256SUMS (curl failed; CG_SKIP_SHA256=1 skips the check)"
    case "$code" in
      200) ;;
      404) rm -f "$tmp/SHA256SUMS" ;;
      *) die "${src%/*}/SHA256SUMS answered HTTP $code (CG_SKIP_SHA256=1 skips the check)" ;;
    esac
    ;;
  *)
    [ -f "$src" ] || die "no archive at $src"
    cp "$src" "$tmp/$name"
    [ ! -f "$(dirname "$src")/SHA256SUMS" ] || cp "$(dirname "$src")/SHA256SUMS" "$tmp/SHA256SUMS"
    ;;
esac
if [ -n "${CG_SKIP_SHA256:-}" ]; then
  log "SHA256SUMS not checked (CG_SKIP_SHA256)"
elif [ -f "$tmp/SHA256SUMS" ]; then
  grep -E "^[0-9a-f]{64} [ *]$name\$" "$tmp/SHA256SUMS" > "$tmp/sum" || die "SHA256SUMS has no line for $name"
  (cd "$tmp" && sha256sum -c --quiet sum) || die "$name does not match its SHA256SUMS line"
  log "sha256 ok: $name"
else
  log "no SHA256SUMS beside $src: checksum not checked"
fi

# The archive's PHP (phpX.Y, -nts|-zts) against the target's.
want=$(printf '%s\n' "$name" | sed -E 's/.*_php([0-9]+\.[0-9]+)-.*-(nts|zts)\.tgz$/\1-\2/')
# shellcheck disable=SC2016  # PHP code
have=$("$php" -r 'echo PHP_MAJOR_VERSION, ".", PHP_MINOR_VERSION, PHP_ZTS ? "-zts" : "-nts";')
[ "$want" = "$have" ] || die "$name is for PHP $want; $php is PHP $have"

mkdir -p "$tmp/x"
tar -xzf "$tmp/$name" -C "$tmp/x"
[ -f "$tmp/x/checkout_guard.so" ] || die "$name holds no checkout_guard.so at its root"

# The archive's machine and the PHP's, then a trial load before anything is replaced: a
# binary that cannot load here (another architecture, a glibc older than 2.34) leaves the
# installed extension and the ini as they were.
arch=$(printf '%s\n' "$name" | sed -E 's/.*_php[0-9]+\.[0-9]+-([a-z0-9_]+)-linux-.*/\1/')
[ "$arch" = "$(uname -m)" ] || die "$name is for $arch; this machine is $(uname -m)"
# shellcheck disable=SC2016  # PHP code
trial=$("$php" -n -d "extension=$tmp/x/checkout_guard.so" -r 'echo extension_loaded("checkout_guard") ? "ok" : "no";' 2>&1) || true
[ "$trial" = ok ] || die "$name does not load into $php (nothing installed): $trial"

# shellcheck disable=SC2016  # PHP code
ext_dir=$("$php" -r 'echo ini_get("extension_dir");')
[ -d "$ext_dir" ] || die "the extension dir '$ext_dir' of $php does not exist"
log "checkout_guard.so -> $ext_dir"
install -m 0644 "$tmp/x/checkout_guard.so" "$ext_dir/checkout_guard.so"

v=${have%-*}
# shellcheck disable=SC2016  # PHP code
scan=$("$php" -r 'echo PHP_CONFIG_FILE_SCAN_DIR;')
if command -v docker-php-ext-enable >/dev/null 2>&1 && [ "$scan" = "${PHP_INI_DIR:-/usr/local/etc/php}/conf.d" ]; then
  log "docker-php-ext-enable checkout_guard"
  docker-php-ext-enable checkout_guard
elif command -v phpenmod >/dev/null 2>&1 && [ "$scan" = "/etc/php/$v/cli/conf.d" ]; then
  # Debian's PHP: every SAPI (cli, fpm, ...) gets conf.d/PRIORITY-checkout_guard.ini.
  log "/etc/php/$v/mods-available/checkout_guard.ini, phpenmod -v $v checkout_guard"
  printf '; priority=%s\nextension=checkout_guard\n' "$priority" > "/etc/php/$v/mods-available/checkout_guard.ini"
  phpenmod -v "$v" checkout_guard
else
  [ -n "$scan" ] || die "$php has no ini scan dir (PHP_CONFIG_FILE_SCAN_DIR): add extension=checkout_guard to its php.ini"
  mkdir -p "$scan"
  log "$scan/$priority-checkout_guard.ini"
  printf 'extension=checkout_guard\n' > "$scan/$priority-checkout_guard.ini"
fi

"$php" -m | grep -x checkout_guard >/dev/null || die "installed, but $php -m does not list checkout_guard"
# shellcheck disable=SC2016  # PHP code
log "installed: checkout_guard $("$php" -r 'echo phpversion("checkout_guard");') for PHP $have ($ext_dir/checkout_guard.so)"
