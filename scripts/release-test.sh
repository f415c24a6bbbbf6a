#!/usr/bin/env bash
# The prebuilt archives (scripts/release.sh) installed where nothing can build them: for
# each, a fresh copy of a Debian chroot of that PHP (scripts/chroot.sh) with no Rust
# (CG_CHROOT_NO_RUST: no ~/.cargo, no ~/.rustup, no CARGO_*) and no C compiler (clang,
# gcc, make and php-dev purged from the copy with apt-get; the 8.2 chroot never had them),
# the archive installed as PIE installs a pre-packaged binary (scripts/install-prebuilt.sh:
# extension_dir, the ini with priority 20), then PHPUnit against the installed extension
# (tests/install/prebuilt-inside.sh), with the CLI and the Valkey module from their own
# archives, and a Valkey on the host's loopback:
#   8.2-nts  Debian 12 (bookworm) chroot, runtime only
#   8.4-nts  Debian 13 (trixie) chroot, compilers purged from the copy
#   8.5-nts  Debian experimental chroot, compilers purged from the copy
#   8.2-zts  the bookworm chroot with the ZTS PHP's prefix (scripts/zts.sh, built on this
#            Debian 12 host) copied in at its own path; its libraries are bookworm's
# First (every mode) the archives' names and contents are checked: the four extension
# archives named as PIE looks for them, each holding checkout_guard.so alone, the CLI's
# and the module's, and SHA256SUMS covering exactly these (sha256sum -c).
#   scripts/release-test.sh [short|full] [ROW...]
#     short  (CI, scripts/test.sh) every row: the unit suite and the integration suite
#     full   the same (the suites the chroots can run; the fpm suite needs php-fpm)
#     ROW    only these (default: 8.2-nts 8.4-nts 8.5-nts 8.2-zts)
# Builds through scripts/release.sh (the PHP matrix's cargo targets: nothing is rebuilt
# after the matrix ran). Prints a table; exits 1 when anything failed. Needs root.
# Logs: .run/release-test/MODE/ROW/. CG_RELEASE_SKIP_BUILD=1 tests dist/ as it is.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$CG_ROOT/scripts/chroot.sh"
source "$CG_ROOT/scripts/zts.sh"
cd "$CG_ROOT"
mode=$(run_mode release-test.sh "${1:-}") || exit 2
[ $# -eq 0 ] || shift
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(8.2-nts 8.4-nts 8.5-nts 8.2-zts)
for r in "${rows[@]}"; do
  case "$r" in 8.2-nts|8.4-nts|8.5-nts|8.2-zts) ;; *) echo "scripts/release-test.sh: unknown row '$r' (known: 8.2-nts 8.4-nts 8.5-nts 8.2-zts)" >&2; exit 2 ;; esac
done
[ "$(id -u)" -eq 0 ] || { echo "scripts/release-test.sh: needs root (chroot, mount)" >&2; exit 1; }
suites=(unit integration)

out="$CG_ROOT/.run/release-test/$mode"
rm -rf "$out"; mkdir -p "$out"
scratch=$(mktemp -d /var/tmp/checkout-guard-release-test.XXXXXX)
cleanup() {
  stop_pidfile "$out/valkey/valkey.pid"
  rm -rf --one-file-system "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
if [ -n "${CG_RELEASE_SKIP_BUILD:-}" ]; then
  log "release archives: dist/ as it is (CG_RELEASE_SKIP_BUILD)"
else
  log "release archives: scripts/release.sh"
  bash scripts/release.sh > "$out/release.log" 2>&1 || { tail -30 "$out/release.log" >&2; echo "FAIL: scripts/release.sh" >&2; exit 1; }
fi
release_s=$((SECONDS - t0))

# The archives' names and contents.
version=$(cg_version)
status=0
check() { if "$@"; then :; else status=1; fi; }
expect_archive() {  # NAME MEMBER...: NAME in dist/ holds exactly MEMBERs, at its root
  local name=$1; shift
  if [ ! -f "dist/$name" ]; then echo "FAIL: dist/$name is missing" >&2; return 1; fi
  local got want
  got=$(tar -tzf "dist/$name" | LC_ALL=C sort | tr '\n' ' ')
  want=$(printf '%s\n' "$@" | LC_ALL=C sort | tr '\n' ' ')
  if [ "$got" != "$want" ]; then echo "FAIL: dist/$name holds '$got', expected '$want'" >&2; return 1; fi
  log "dist/$name: $got"
}
expected=()
for r in 8.2-nts 8.4-nts 8.5-nts 8.2-zts; do
  # PIE's name (php/pie src/Platform/PrePackagedBinaryAssetName.php, commit 827cefb1).
  n="php_checkout_guard-${version}_php${r%-*}-x86_64-linux-glibc-${r#*-}.tgz"
  expected+=("$n")
  check expect_archive "$n" checkout_guard.so
done
expected+=("checkout-guard-$version-x86_64-linux-glibc.tgz" "checkout_guard_valkey-$version-x86_64-linux-glibc.tgz")
check expect_archive "checkout-guard-$version-x86_64-linux-glibc.tgz" checkout-guard
check expect_archive "checkout_guard_valkey-$version-x86_64-linux-glibc.tgz" libcheckout_guard_valkey.so
if [ "$(awk '{print $2}' dist/SHA256SUMS | sed 's/^\*//' | LC_ALL=C sort | tr '\n' ' ')" \
     != "$(printf '%s\n' "${expected[@]}" | LC_ALL=C sort | tr '\n' ' ')" ]; then
  echo "FAIL: dist/SHA256SUMS does not list exactly the six archives:" >&2; cat dist/SHA256SUMS >&2; status=1
elif ! (cd dist && sha256sum -c --quiet SHA256SUMS); then
  echo "FAIL: sha256sum -c dist/SHA256SUMS" >&2; status=1
else
  log "dist/SHA256SUMS: the six archives, sha256sum -c ok"
fi
# composer.json's priority is the ini's (install-prebuilt.sh writes 20).
prio=$(php -r 'echo json_decode(file_get_contents("composer.json"), true)["php-ext"]["priority"] ?? "none";')
[ "$prio" = 20 ] || { echo "FAIL: composer.json's php-ext priority is $prio; scripts/install-prebuilt.sh writes 20" >&2; status=1; }

port=$(free_port)
start_valkey "$out/valkey" "$port"

table=()
for r in "${rows[@]}"; do
  v=${r%-*}
  dir="$out/$r"; mkdir -p "$dir"
  archive="php_checkout_guard-${version}_php${v}-x86_64-linux-glibc-${r#*-}.tgz"
  log "PHP $r: $archive in a fresh chroot without Rust or a compiler"
  t0=$SECONDS
  root=$(cg_chroot_ensure "$v") || { table+=("$r|-|-|FAIL: no chroot"); status=1; continue; }
  copy="$scratch/$r"
  cg_chroot_copy "$root" "$copy"
  php=php
  if [ "$r" = 8.2-zts ]; then
    prefix=$(cg_zts_ensure)
    mkdir -p "$copy$(dirname "$prefix")"
    cp -a "$prefix" "$copy$prefix"
    # What the install adds goes into the copy's prefix, never the cached one.
    rm -f "$copy$prefix"/lib/conf.d/*checkout_guard*.ini
    php=$prefix/bin/php
  fi
  # The compilers out (only the packages the copy has; their dependencies with them).
  # shellcheck disable=SC2016  # expanded inside
  CG_CHROOT_NO_RUST=1 cg_chroot_run "$copy" sh -c '
    pkgs=$(for p in clang gcc g++ cpp make libclang-dev libc6-dev dpkg-dev "php$1-dev"; do
      dpkg-query -W -f="\${db:Status-Abbrev} \${Package}\n" "$p" 2>/dev/null | awk "/^ii/ {print \$2}"; done)
    [ -z "$pkgs" ] || DEBIAN_FRONTEND=noninteractive apt-get purge -y -q --auto-remove $pkgs
    # gcc-12, clang-19 and the like: whatever still provides a compiler.
    left=$(dpkg-query -W -f="\${db:Status-Abbrev} \${Package}\n" 2>/dev/null \
      | awk "/^ii/ && \$2 ~ /^(gcc|g[+][+]|clang|cpp)-[0-9]+\$/ {print \$2}")
    [ -z "$left" ] || DEBIAN_FRONTEND=noninteractive apt-get purge -y -q --auto-remove $left' \
    purge "$v" > "$dir/purge.log" 2>&1 || { tail -20 "$dir/purge.log" >&2; table+=("$r|-|-|FAIL: purging the compilers ($dir/purge.log)"); status=1; rm -rf --one-file-system "$copy"; continue; }
  prep_s=$((SECONDS - t0))
  t0=$SECONDS
  if CG_CHROOT_NO_RUST=1 timeout --foreground --kill-after=10 1200 bash -c 'source "$1/scripts/lib.sh"; source "$1/scripts/chroot.sh"; shift; cg_chroot_run "$@"' \
      rt "$CG_ROOT" "$copy" env -C "$CG_ROOT" VALKEY_SERVER="$(valkey_bin)" \
      bash tests/install/prebuilt-inside.sh "$CG_ROOT/dist" "$archive" "$php" "$port" "$dir" "${suites[@]}" \
      > "$dir/inside.log" 2>&1; then result=passed; else result="FAILED ($dir/inside.log)"; status=1; fi
  sed 's/^/    /' "$dir/inside.log" >&2
  table+=("$r|$prep_s s|$((SECONDS - t0)) s|$result")
  rm -rf --one-file-system "$copy"
done

{
  printf '\nrelease archives: scripts/release.sh %s s\n' "$release_s"
  printf '%-8s %-22s %-24s %s\n' PHP "fresh copy, purge" "install, unit+integration" result
  for t in "${table[@]}"; do
    IFS='|' read -r a b c d <<< "$t"
    printf '%-8s %-22s %-24s %s\n' "$a" "$b" "$c" "$d"
  done
} | tee "$out/table.txt" >&2
exit $status
