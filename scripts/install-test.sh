#!/usr/bin/env bash
# The install paths of docs/install.md, tested in Debian chroots of another PHP
# (scripts/chroot.sh): for each PHP,
#   1. the PHP way: a clean copy of the source (the files git tracks or would add) in a
#      fresh copy of the chroot, built and installed as docker-php-ext-install does it in
#      the official php images and checked as PIE checks it (tests/install/phpize-inside.sh);
#   2. the Debian package: built by scripts/deb.sh in the chroot, installed with apt-get
#      into another fresh copy, php-fpm behind nginx serving a page that calls acquire(),
#      then removed and purged, leaving no ini (tests/install/deb-inside.sh).
# Both decide against a Valkey started here on the host's loopback.
#   scripts/install-test.sh [short|full]   short (CI): PHP 8.4; full: PHP 8.4 and 8.5
# Prints a table; exits 1 when anything failed. Needs root. Logs: .run/install-test/MODE/.
# CG_INSTALL_PATHS="deb" (or "phpize") runs only that path (default: "phpize deb").
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$CG_ROOT/scripts/chroot.sh"
cd "$CG_ROOT"
mode=$(run_mode install-test.sh "${1:-}") || exit 2
case "$mode" in short) versions=(8.4) ;; full) versions=(8.4 8.5) ;; esac
paths=" ${CG_INSTALL_PATHS:-phpize deb} "
for p in $paths; do
  case "$p" in phpize|deb) ;; *) echo "scripts/install-test.sh: CG_INSTALL_PATHS: unknown path '$p' (known: phpize deb)" >&2; exit 2 ;; esac
done
[ "$(id -u)" -eq 0 ] || { echo "scripts/install-test.sh: needs root (debootstrap, chroot, mount)" >&2; exit 1; }

out="$CG_ROOT/.run/install-test/$mode"
rm -rf "$out"; mkdir -p "$out"
scratch=$(mktemp -d /var/tmp/checkout-guard-install-test.XXXXXX)
cleanup() {
  stop_pidfile "$out/valkey/valkey.pid"
  # cg_chroot_run's mounts end with each run: nothing is mounted under the copies now.
  rm -rf --one-file-system "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

{ read -r vport; read -r fport; read -r hport; } < <(free_ports 3)
start_valkey "$out/valkey" "$vport"

# The source as a clean checkout has it, uncommitted changes included.
source_tar="$scratch/source.tar"
git ls-files -z --cached --others --exclude-standard | grep -zvx '\.venv' \
  | tar --null -cf "$source_tar" -T -

rows=()
status=0
for v in "${versions[@]}"; do
  root=$(cg_chroot_ensure "$v")

  # A checkout may live anywhere, /tmp included (a fresh clone there): the chroot's /tmp is
  # a tmpfs of its own, which must not hide the checkout's mount point.
  elsewhere=$(mktemp -d /tmp/checkout-guard-clone.XXXXXX)
  mkdir -p "$elsewhere/scripts"
  cp scripts/lib.sh scripts/chroot.sh "$elsewhere/scripts/"
  if bash -c 'source "$1/scripts/lib.sh"; source "$1/scripts/chroot.sh"; cg_chroot_run "$2" test -f "$1/scripts/chroot.sh"; s=$?; rmdir "$(cg_chroot_target "$2")"; exit $s' \
      checkout "$elsewhere" "$root" > "$out/under-tmp-$v.log" 2>&1; then
    log "PHP $v: a checkout under /tmp is seen inside the chroot"
  else
    cat "$out/under-tmp-$v.log" >&2
    echo "FAIL: a checkout under /tmp ($elsewhere) is not seen inside the PHP $v chroot" >&2
    status=1
  fi
  rm -rf "$elsewhere"

  phpize_s=0 phpize_result=skipped
  if [[ "$paths" == *" phpize "* ]]; then
  log "PHP $v, the PHP way: phpize, configure, make, make install in a fresh chroot"
  copy="$scratch/phpize-$v"
  cg_chroot_copy "$root" "$copy"
  mkdir -p "$copy/usr/src/php/ext/checkout_guard"
  tar -xf "$source_tar" -C "$copy/usr/src/php/ext/checkout_guard"
  t0=$SECONDS
  # As on a machine where nothing was built yet: the build gets an empty CARGO_HOME, which
  # cg_chroot_run must seed from the host's registry (it builds offline).
  if CG_CHROOT_CARGO_HOME="$scratch/cargo-home-$v" cg_chroot_run "$copy" bash "$CG_ROOT/tests/install/phpize-inside.sh" "$v" "$vport" \
      > "$out/phpize-$v.log" 2>&1; then phpize_result=passed; else phpize_result=FAILED; status=1; fi
  phpize_s=$((SECONDS - t0))
  # Every file the build wrote is one git ignores (target/ is).
  if [ -s "$copy/usr/src/files-written" ]; then
    unignored=$(sed 's|^\./||' "$copy/usr/src/files-written" | git check-ignore --no-index -v -n --stdin \
      | awk -F'\t' '$1 == "::" {print $2}')
    if [ -n "$unignored" ]; then
      echo "      FAIL files the PHP way wrote that .gitignore misses: $unignored" >> "$out/phpize-$v.log"
      phpize_result=FAILED; status=1
    else
      echo "      ok   .gitignore covers the $(wc -l < "$copy/usr/src/files-written") files phpize, configure and make wrote" >> "$out/phpize-$v.log"
    fi
  fi
  sed 's/^/    /' "$out/phpize-$v.log" >&2
  rm -rf --one-file-system "$copy"
  fi
  if [[ "$paths" != *" deb "* ]]; then
    rows+=("$v|$phpize_s s|$phpize_result|-|-|skipped")
    continue
  fi

  log "PHP $v, the Debian package: scripts/deb.sh in the chroot"
  t0=$SECONDS
  deb=""
  # The chroot's cached target directory: the extension is mostly built already by
  # scripts/php-matrix.sh; the CLI is added.
  cg_chroot_build "$root" >/dev/null 2>&1 || true
  if cg_chroot_run "$root" bash "$CG_ROOT/scripts/deb.sh" "$out/deb-$v" > "$out/deb-build-$v.log" 2>&1; then
    deb=$(tail -1 "$out/deb-build-$v.log")
  fi
  deb_build_s=$((SECONDS - t0))
  if [ -z "$deb" ] || [ ! -f "$deb" ]; then
    cat "$out/deb-build-$v.log" >&2
    rows+=("$v|$phpize_s s|$phpize_result|$deb_build_s s|-|FAILED (build)")
    status=1
    continue
  fi
  log "PHP $v, the Debian package: apt-get install into a fresh chroot, php-fpm + nginx, remove"
  copy="$scratch/deb-$v"
  cg_chroot_copy "$root" "$copy"
  t0=$SECONDS
  if cg_chroot_run "$copy" bash "$CG_ROOT/tests/install/deb-inside.sh" "$deb" "$v" "$vport" "$fport" "$hport" \
      > "$out/deb-test-$v.log" 2>&1; then deb_result=passed; else deb_result=FAILED; status=1; fi
  deb_test_s=$((SECONDS - t0))
  sed 's/^/    /' "$out/deb-test-$v.log" >&2
  rm -rf --one-file-system "$copy"
  rows+=("$v|$phpize_s s|$phpize_result|$deb_build_s s|$deb_test_s s|$deb_result ($(basename "$deb"))")
done

printf '\n%-5s %-22s %-9s %-10s %-9s %s\n' PHP "phpize..make install" result "deb build" "deb test" result
for r in "${rows[@]}"; do
  IFS='|' read -r a b c d e f <<< "$r"
  printf '%-5s %-22s %-9s %-10s %-9s %s\n' "$a" "$b" "$c" "$d" "$e" "$f"
done
exit "$status"
