#!/usr/bin/env bash
# The release archives, prebuilt for x86_64 Linux with glibc, into dist/ (gitignored):
#   scripts/release.sh            every archive below, then dist/SHA256SUMS
#   scripts/release.sh 8.2-nts    one extension archive (MINOR-nts or MINOR-zts), then
#                                 dist/SHA256SUMS over the archives dist/ holds
#
# The extension, one archive per PHP, named as PIE's pre-packaged-binary download method
# looks for it (php/pie src/Platform/PrePackagedBinaryAssetName.php at commit 827cefb1:
# php_{ext}-{version}_php{major.minor}-{arch}-{os}-{libc}[-debug][-zts|-nts].zip|.tgz,
# lower case; the .tgz is what PIE's own builder, php/pie-ext-binary-builder, uploads:
# `tar -czf NAME -C modules ext.so`, the .so at the archive's root):
#   php_checkout_guard-VERSION_php8.2-x86_64-linux-glibc-nts.tgz  the host's PHP 8.2 (target/release)
#   php_checkout_guard-VERSION_php8.4-x86_64-linux-glibc-nts.tgz  built in the PHP 8.4 chroot (scripts/chroot.sh)
#   php_checkout_guard-VERSION_php8.5-x86_64-linux-glibc-nts.tgz  built in the PHP 8.5 chroot
#   php_checkout_guard-VERSION_php8.2-x86_64-linux-glibc-zts.tgz  built against the ZTS PHP 8.2 (scripts/zts.sh)
# each holding checkout_guard.so alone. Not PIE's, named alike:
#   checkout-guard-VERSION-x86_64-linux-glibc.tgz          the CLI: checkout-guard
#   checkout_guard_valkey-VERSION-x86_64-linux-glibc.tgz   the Valkey module: libcheckout_guard_valkey.so
#   SHA256SUMS                                             sha256sum's format, every archive in dist/
# VERSION is the workspace's (Cargo.toml); the release's git tag must be that same string
# (no "v"): PIE puts the tag Composer reports into the name it looks for.
#
# The builds are the PHP matrix's (scripts/php-matrix.sh): the same cargo target
# directories, so after the matrix ran nothing is rebuilt. Each .so is checked before it
# is packed: its PHP loads it (`php -n -d extension=...`) and reports checkout_guard's
# version, and it is stripped of nothing (release profile as built). Needs root for the
# chroots. Prints the archives' paths.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$CG_ROOT/scripts/chroot.sh"
source "$CG_ROOT/scripts/zts.sh"
cd "$CG_ROOT"

ROWS=(8.2-nts 8.4-nts 8.5-nts 8.2-zts)
case "${1:-}" in
  "") rows=("${ROWS[@]}") all=1 ;;
  8.2-nts|8.4-nts|8.5-nts|8.2-zts) rows=("$1") all="" ;;
  *) echo "scripts/release.sh: unknown archive '$1' (known: ${ROWS[*]}; none: all of them)" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "scripts/release.sh: one archive at most (got: $*)" >&2; exit 2; }
case ":$PATH:" in *":$HOME/.cargo/bin:"*) ;; *) export PATH="$HOME/.cargo/bin:$PATH" ;; esac

dist="$CG_ROOT/dist"
mkdir -p "$dist"
# One run at a time in a checkout (the work directory and dist/'s temporary names are fixed).
mkdir -p "$CG_ROOT/.run"
exec 8>"$CG_ROOT/.run/release.lock"
flock -n 8 || { echo "scripts/release.sh: another scripts/release.sh runs in this checkout; waiting" >&2; flock 8; }
# Under the repository: the chroots see it at the same path (their PHP loads the .so there).
work="$CG_ROOT/.run/release"
rm -rf "$work"; mkdir -p "$work"

version=$(cg_version)
suffix="x86_64-linux-glibc"
[ "$(uname -m)" = x86_64 ] || { echo "scripts/release.sh: builds for x86_64 only (this machine: $(uname -m))" >&2; exit 1; }

# pack NAME FILE...: a reproducible .tgz of FILEs (their base names, at the root) in dist/.
pack() {
  local name=$1; shift
  local d="$work/$name.d"
  mkdir -p "$d"
  cp -f "$@" "$d/"
  chmod 0755 "$d"/*
  # Entries named as they are (checkout_guard.so, not ./checkout_guard.so).
  (cd "$d" && find . -mindepth 1 -maxdepth 1 -printf '%f\n' | LC_ALL=C sort \
    | tar --mtime=@0 --owner=0 --group=0 --numeric-owner --no-recursion -cf - -T -) \
    | gzip -n -9 > "$dist/$name.tmp"
  mv -f "$dist/$name.tmp" "$dist/$name"
  echo "$dist/$name"
}

# check_so ROW PHP... SO: that PHP loads the .so and it is checkout_guard VERSION.
check_so() {
  local row=$1 so=${*: -1} got
  local php=("${@:2:$#-2}")
  # shellcheck disable=SC2016  # PHP code
  got=$("${php[@]}" -n -d "extension=$so" -r 'echo PHP_MAJOR_VERSION, ".", PHP_MINOR_VERSION, PHP_ZTS ? "-zts" : "-nts", " ", phpversion("checkout_guard");' 2>&1) || true
  if [ "$got" != "$row $version" ]; then
    echo "scripts/release.sh: $row: the built $so does not load as checkout_guard $version for PHP $row (got: $got)" >&2
    return 1
  fi
}

ext_archive() { echo "php_checkout_guard-${version}_php${1%-*}-$suffix-${1#*-}.tgz"; }

# SHA256SUMS: this version's archives dist/ holds, by their exact names; written at the end
# and also when a row fails (it then covers what is there, never a stale list).
sums() {
  local names=() n r
  for r in "${ROWS[@]}"; do names+=("$(ext_archive "$r")"); done
  names+=("checkout-guard-$version-$suffix.tgz" "checkout_guard_valkey-$version-$suffix.tgz")
  (cd "$dist" && for n in "${names[@]}"; do [ ! -f "$n" ] || echo "$n"; done | LC_ALL=C sort \
    | xargs -r sha256sum > SHA256SUMS.tmp && mv -f SHA256SUMS.tmp SHA256SUMS)
}
trap sums EXIT

# The 8.2 NTS archive is this machine's build: a Debian 12 host with its PHP 8.2 (the ZTS one
# is built from bookworm's source, so it needs one too); 8.4 and 8.5 come from chroots.
host_php=$(php -r 'echo PHP_MAJOR_VERSION, ".", PHP_MINOR_VERSION, PHP_ZTS ? "-zts" : "-nts";' 2>/dev/null) || host_php=none
for row in "${rows[@]}"; do
  case "$row" in
    8.2-nts) [ "$host_php" = 8.2-nts ] || { echo "scripts/release.sh: 8.2-nts is built with this machine's PHP 8.2 (Debian 12); here php is '$host_php'" >&2; exit 1; } ;;
    8.2-zts) [ "$(. /etc/os-release && echo "${VERSION_CODENAME:-}")" = bookworm ] || { echo "scripts/release.sh: 8.2-zts is built from Debian 12's php8.2 source on a Debian 12 host" >&2; exit 1; } ;;
  esac
done
for row in "${rows[@]}"; do
  so="$work/$row/checkout_guard.so"
  mkdir -p "$work/$row"
  log "release: PHP $row"
  if [ "$row" = 8.2-zts ]; then
    prefix=$(cg_zts_ensure)
    built=$(cg_zts_build "$work/$row" | tail -1)
    mv -f "$built" "$so"
    check_so "$row" "$prefix/bin/php" "$so"
  elif [ "$row" = "$host_php" ]; then
    build_extension
    cp -f "$CG_EXT" "$so"
    check_so "$row" php "$so"
  else
    [ "$(id -u)" -eq 0 ] || { echo "scripts/release.sh: PHP $row is built in a chroot: needs root" >&2; exit 1; }
    root=$(cg_chroot_ensure "${row%-*}")
    cg_chroot_build "$root" "$work/$row"
    mv -f "$work/$row/libcheckout_guard.so" "$so"
    check_so "$row" bash -c 'source "$1/scripts/lib.sh"; source "$1/scripts/chroot.sh"; r=$2; shift 2; cg_chroot_run "$r" php "$@"' \
      release "$CG_ROOT" "$root" "$so"
  fi
  pack "$(ext_archive "$row")" "$so"
done

if [ -n "$all" ]; then
  log "release: the CLI and the Valkey module"
  build_extension
  pack "checkout-guard-$version-$suffix.tgz" "$CG_ROOT/target/release/checkout-guard"
  pack "checkout_guard_valkey-$version-$suffix.tgz" "$CG_VALKEY_MODULE"
fi

# Every archive of this version dist/ holds (an earlier scripts/release.sh ROW's too).
sums
echo "$dist/SHA256SUMS"
