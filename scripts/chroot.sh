# shellcheck shell=bash
# Debian chroots holding another PHP, made once and cached on this machine: the PHP matrix
# (scripts/php-matrix.sh) builds and tests the extension in them. Source it after lib.sh
# (it uses CG_ROOT and log); it defines functions only. Needs root (debootstrap, mount,
# chroot, unshare).
#
#   cg_chroot_ensure VERSION
#       Prints the root directory of a ready chroot with PHP VERSION: 8.4 (Debian 13
#       trixie), 8.5 (Debian experimental on a sid base) or 8.2 (Debian 12 bookworm, a
#       runtime-only chroot without compiler, php-dev, php-fpm or nginx: the prebuilt
#       archives' install test, scripts/release-test.sh; the matrix's 8.2 is the host). Made on first use
#       (debootstrap --variant=minbase, then apt-get from the host's own Debian mirror),
#       then reused; made again from scratch when what it should hold changed (its stamp
#       file, ROOT/.cg-stamp, records the suite, mirror and package list). Holds
#       php$V-{cli,dev,fpm,curl,xml,mbstring}, phpredis (php$V-redis, or built from
#       source where the archive lacks it), PHPUnit (Debian's `phpunit`), clang,
#       libclang-dev, gcc, make, nginx, libfcgi-bin (cgi-fcgi), python3, Guzzle and the
#       PSR-7/PSR-18 packages, redis-server and openssl (TlsTest's TLS server, never
#       started as a service: policy-rc.d); `php` is PHP VERSION. Returns 1 with a message naming the
#       step and its log when the chroot cannot be made (a mirror down): never a half one.
#   cg_chroot_run ROOT CMD [ARG...]
#       Runs CMD as root inside ROOT, in new mount and PID namespaces: every mount and
#       every process started inside ends with the run. The network is the host's, so a
#       Valkey on the host's loopback is reachable. Inside:
#         $CG_ROOT            this repository, read-write, at the same path
#         ~/.rustup, ~/.cargo/bin   the host's Rust toolchain, read-only
#         /cg/cargo-home      CARGO_HOME, writable, seeded from the host's registry cache
#                             before every run (the host's filled by `cargo fetch` first)
#         /cg/target          CARGO_TARGET_DIR (cached chroot: CG_CACHE/target/NAME/CHECKOUT)
#         /tmp                a fresh tmpfs
#       and only this environment: HOME PATH LANG CARGO_HOME CARGO_TARGET_DIR RUSTUP_HOME
#       CARGO_NET_OFFLINE=true PHP PHP_CONFIG (the chroot's php and php-config, which the
#       ext-php-rs build script reads). Pass more with `env VAR=VALUE... CMD`. Extra bind
#       mounts: CG_CHROOT_BINDS="SRC:DST ..." (DST a path inside). Status: CMD's.
#       It holds a shared lock on the chroot (cg_chroot_ensure makes a chroot again only
#       under an exclusive one, so never under a run, whichever session started it).
#   cg_chroot_build ROOT [DEST_DIR]
#       cargo build --release --offline --locked -p checkout_guard in ROOT; the extension
#       is /cg/target/release/libcheckout_guard.so inside, $(cg_chroot_target ROOT)/release/
#       outside. Incremental: the target directory is kept between runs (one per
#       checkout). With DEST_DIR, the .so is copied there under the target's lock, before
#       a concurrent build can replace it (test that copy).
#   cg_chroot_copy ROOT DEST
#       A throw-away copy of ROOT at DEST (for tests that install into it: make install,
#       apt-get install ./x.deb); cg_chroot_run works on it, with DEST/cg/target as target.
#       Remove it with rm -rf --one-file-system DEST.
#   cg_chroot_php ROOT      prints ROOT's PHP version (8.4)
#   cg_chroot_target ROOT   prints the host path of ROOT's CARGO_TARGET_DIR
#   cg_debian_mirror        prints the Debian mirror of the host's apt sources (the URI
#                           listing the host's own suite); CG_DEBIAN_MIRROR overrides it
#
# The cache is CG_CACHE (default /var/cache/checkout-guard), outside the repository:
#   chroots/php8.4/, chroots/php8.5/   the roots; chroots/NAME.log how each was made
#   target/php8.4/CHECKOUT/, ...       each chroot's cargo target directory, one per checkout
#                                      (its directory name and a hash of its path; removed
#                                      after 14 days unused)
#   cargo-home/                        the chroots' CARGO_HOME (registry copied from ~/.cargo;
#                                      CG_CHROOT_CARGO_HOME names another)
# Clearing it: `rm -rf --one-file-system /var/cache/checkout-guard` while no run is going
# (no mount outlives a run, so nothing is mounted under it between runs).

CG_CACHE=${CG_CACHE:-/var/cache/checkout-guard}
# Bump when the way a chroot is made changes without its package list changing: every
# cached chroot is then made again.
_CG_CHROOT_FORMAT=1

# The suite each PHP comes from.
_cg_chroot_suite() {
  case "$1" in
    8.2) echo bookworm ;;
    8.4) echo trixie ;;
    8.5) echo sid+experimental ;;
    *) echo "cg_chroot: no chroot for PHP '$1' (known: 8.2 from bookworm, 8.4 from trixie, 8.5 from experimental)" >&2; return 2 ;;
  esac
}

# phpredis (the tests inspect Valkey with it): Debian's php$V-redis where the archive has
# it. Experimental has no php8.5-redis: there it is built with phpize, as a PECL extension
# is, from the upstream tarball of Debian's source package php-redis (sid's, 6.2.0; the
# mirror serves its .orig.tar but not its .dsc). 6.2.0 includes
# ext/standard/php_smart_string.h, a header PHP 8.5 no longer ships (phpredis 6.3 includes
# Zend/zend_smart_string.h, which that header only forwarded to): a one-line stand-in on
# the include path builds it unchanged.
_cg_chroot_redis_from_source() { [ "$1" = 8.5 ]; }

_cg_chroot_packages() {
  local v=$1
  local redis="php$v-redis"
  ! _cg_chroot_redis_from_source "$v" || redis=dpkg-dev
  if [ "$v" = 8.2 ]; then
    # Runtime only (scripts/release-test.sh installs prebuilt archives into it): no
    # compiler, no php-dev, no php-fpm. The libraries the ZTS PHP of scripts/zts.sh (built
    # on a Debian 12 host) links come with php8.2-curl and php8.2-xml. netbase: its
    # post-install writes /etc/hosts (localhost), as the other chroots have it through
    # php-fpm/nginx's dependencies; without it "localhost" does not resolve (TlsTest).
    printf '%s\n' "php$v-cli" "$redis" "php$v-curl" "php$v-xml" "php$v-mbstring" phpunit \
      php-guzzlehttp-guzzle php-nyholm-psr7 php-psr-http-client php-psr-http-message \
      python3 ca-certificates procps redis-server openssl netbase
    return 0
  fi
  printf '%s\n' "php$v-cli" "php$v-dev" "php$v-fpm" "$redis" "php$v-curl" "php$v-xml" \
    "php$v-mbstring" phpunit php-guzzlehttp-guzzle php-nyholm-psr7 php-psr-http-client \
    php-psr-http-message clang libclang-dev gcc libc6-dev make nginx libfcgi-bin python3 \
    ca-certificates procps redis-server openssl
}

cg_debian_mirror() {
  if [ -n "${CG_DEBIAN_MIRROR:-}" ]; then echo "${CG_DEBIAN_MIRROR%/}"; return 0; fi
  local codename uri f
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || { echo "cg_debian_mirror: no VERSION_CODENAME in /etc/os-release; set CG_DEBIAN_MIRROR" >&2; return 1; }
  uri=$(
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -f "$f" ] || continue
      # deb [options] URI SUITE COMPONENTS...
      awk -v c="$codename" '$1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == c) print $i
      }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] || continue
      # deb822 stanzas: Types, URIs, Suites (and Enabled).
      awk -v c="$codename" 'BEGIN { RS = ""; FS = "\n" } {
        types = ""; uris = ""; suites = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^#/) continue
          k = tolower($i); sub(/:.*/, "", k); v = $i; sub(/^[^:]*:[ \t]*/, "", v)
          if (k == "types") types = v; else if (k == "uris") uris = v
          else if (k == "suites") suites = v; else if (k == "enabled") enabled = tolower(v)
        }
        if (enabled == "no" || (" " types " ") !~ / deb /) next
        n = split(suites, s, /[ \t]+/)
        for (j = 1; j <= n; j++) if (s[j] == c) { split(uris, u, /[ \t]+/); print u[1]; break }
      }' "$f"
    done | head -1
  )
  [ -n "$uri" ] || { echo "cg_debian_mirror: no apt source for suite '$codename' in /etc/apt; set CG_DEBIAN_MIRROR" >&2; return 1; }
  echo "${uri%/}"
}

cg_chroot_php() { cat "$1/.cg-php"; }

# A cached chroot's target directory is per checkout: cargo hashes a workspace's path
# packages relative to its root and judges freshness by mtimes, so two checkouts sharing
# one would each take the other's newer build for their own.
cg_chroot_target() {
  local root=${1%/}
  if [ "$(dirname "$root")" = "$CG_CACHE/chroots" ]; then
    echo "$CG_CACHE/target/$(basename "$root")/$(basename "$CG_ROOT")-$(printf %s "$CG_ROOT" | sha1sum | cut -c1-8)"
  else
    echo "$root/cg/target"
  fi
}

# What a chroot of PHP $1 from mirror $2 holds: its stamp.
_cg_chroot_spec() {
  local redis="php$1-redis"
  ! _cg_chroot_redis_from_source "$1" || redis="built from source package php-redis"
  printf 'checkout-guard chroot format %s\nphp %s\nsuite %s\nmirror %s\npackages %s\nphpredis %s\n' \
    "$_CG_CHROOT_FORMAT" "$1" "$(_cg_chroot_suite "$1")" "$2" "$(_cg_chroot_packages "$1" | sort | tr '\n' ' ')" "$redis"
}

# Nothing may be mounted under a directory that is about to be removed.
_cg_chroot_unmounted() {
  if awk '{print $5}' /proc/self/mountinfo | grep -q "^${1%/}/"; then
    echo "cg_chroot: something is mounted under $1 (a run still going?); not removing it" >&2
    return 1
  fi
}

# The host's Cargo registry (index, crate files, sources) copied into the chroots'
# CARGO_HOME: only what is new since the last copy, so the build works offline. The host's
# registry is filled first (`cargo fetch --locked`: a no-op when it holds every crate of
# Cargo.lock), so this works on a machine where nothing was built yet. Every run seeds it
# (cg_chroot_run): any run may build (the phpize path, deb.sh), not only cg_chroot_build.
_cg_chroot_seed_cargo_home() {
  local home; home=$(_cg_chroot_cargo_home)
  mkdir -p "$home/registry"
  if command -v cargo >/dev/null 2>&1 && [ -f "$CG_ROOT/Cargo.lock" ]; then
    (cd "$CG_ROOT" && cargo fetch --locked --quiet) || {
      echo "cg_chroot: cargo fetch --locked failed: the chroots build offline from the host's registry" >&2
      return 1
    }
  fi
  local d
  for d in index cache src; do
    [ -d "${CARGO_HOME:-$HOME/.cargo}/registry/$d" ] || continue
    cp -a -u "${CARGO_HOME:-$HOME/.cargo}/registry/$d" "$home/registry/"
  done
}

# The chroots' CARGO_HOME on the host: CG_CHROOT_CARGO_HOME (install-test.sh gives the PHP
# way's build an empty one, as on a machine where nothing was built yet) or the cache's.
_cg_chroot_cargo_home() { echo "${CG_CHROOT_CARGO_HOME:-$CG_CACHE/cargo-home}"; }

# _cg_chroot_enter ROOT TARGET CMD...: the namespaces, the mounts, then chroot.
_cg_chroot_enter() {
  local root=${1%/} target=$2
  shift 2
  local v; v=$(cat "$root/.cg-php")
  # The checkout's mount point is made inside, after the tmpfs on /tmp: a checkout under
  # /tmp (a fresh clone there) would otherwise get a mount point the tmpfs hides.
  mkdir -p "$target" "$(_cg_chroot_cargo_home)" "$root/cg/target" "$root/cg/cargo-home" \
    "$root$HOME/.rustup" "$root$HOME/.cargo/bin"
  rm -f "$root/etc/resolv.conf"; cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  # shellcheck disable=SC2016  # expanded by the inner bash
  unshare --mount --pid --fork --kill-child --propagation private -- bash -c '
    set -e
    root=$1 target=$2 v=$3 repo=$4 home=$5 cargo_home=$6; shift 6
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
    mkdir -p "$root$repo"
    mount --bind "$repo" "$root$repo"
    php_env=(PHP="/usr/bin/php$v" PHP_CONFIG="/usr/bin/php-config$v")
    if [ -n "${CG_CHROOT_NO_RUST:-}" ]; then
      rust_env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
    else
      for d in "$home/.rustup" "$home/.cargo/bin"; do
        mount --bind "$d" "$root$d"; mount -o remount,bind,ro "$root$d"
      done
      mount --bind "$cargo_home" "$root/cg/cargo-home"
      [ "$target" = "$root/cg/target" ] || mount --bind "$target" "$root/cg/target"
      rust_env=(PATH="$home/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        CARGO_HOME=/cg/cargo-home CARGO_TARGET_DIR=/cg/target RUSTUP_HOME="$home/.rustup"
        CARGO_NET_OFFLINE=true)
    fi
    for b in ${CG_CHROOT_BINDS:-}; do
      mkdir -p "$root${b#*:}"; mount --bind "${b%%:*}" "$root${b#*:}"
    done
    set +e
    chroot "$root" /usr/bin/env -i HOME="$home" LANG=C.UTF-8 "${rust_env[@]}" "${php_env[@]}" "$@"
    exit $?
  ' cg-chroot "$root" "$target" "$v" "$CG_ROOT" "$HOME" "$(_cg_chroot_cargo_home)" "$@"
}

cg_chroot_run() {
  local root=${1:?cg_chroot_run ROOT CMD...}
  shift
  [ -f "$root/.cg-stamp" ] || { echo "cg_chroot_run: $root is not a chroot made by cg_chroot_ensure" >&2; return 1; }
  mkdir -p "$CG_CACHE"
  [ -n "${CG_CHROOT_NO_RUST:-}" ] || (flock 9; _cg_chroot_seed_cargo_home) 9>"$(_cg_chroot_cargo_home).lock" || return 1
  # A shared lock on a cached chroot while it is in use: cg_chroot_ensure waits for it
  # before making that chroot again (other sessions' mounts are invisible here).
  ( flock -s 9; _cg_chroot_enter "$root" "$(cg_chroot_target "$root")" "$@" 9>&- ) 9>>"$(_cg_chroot_lock "$root")"
}

# The lock file of a chroot: beside a cached one, inside a copy.
_cg_chroot_lock() {
  local root=${1%/}
  if [ "$(dirname "$root")" = "$CG_CACHE/chroots" ]; then echo "$root.lock"; else echo "$root/.cg-lock"; fi
}

cg_chroot_build() {
  local root=${1:?cg_chroot_build ROOT [DEST_DIR]} dest=${2:-} target
  target=$(cg_chroot_target "$root")
  mkdir -p "$target"
  touch "$target"
  # Target directories of checkouts unused for 14 days go (about 350 MB each).
  find "$(dirname "$target")" -mindepth 1 -maxdepth 1 -type d -mtime +14 -exec rm -rf --one-file-system {} + 2>/dev/null || true
  # One build at a time in a target directory; the copy is taken before a build from
  # another checkout (another worktree, another session) replaces the .so.
  (
    flock 9
    cg_chroot_run "$root" sh -c "cd '$CG_ROOT' && cargo build --release --offline --locked --quiet -p checkout_guard" || exit
    [ -z "$dest" ] || { mkdir -p "$dest" && cp -f "$target/release/libcheckout_guard.so" "$dest/"; }
  ) 9>"$target.lock"
}

cg_chroot_copy() {
  local root=${1:?cg_chroot_copy ROOT DEST} dest=${2:?cg_chroot_copy ROOT DEST}
  [ -f "$root/.cg-stamp" ] || { echo "cg_chroot_copy: $root is not a chroot made by cg_chroot_ensure" >&2; return 1; }
  [ ! -e "$dest" ] || { echo "cg_chroot_copy: $dest exists" >&2; return 1; }
  ( flock -s 9; cp -a --reflink=auto "$root" "$dest" ) 9>>"$(_cg_chroot_lock "$root")"
}

# _cg_chroot_make VERSION ROOT MIRROR LOG: debootstrap + apt into ROOT (absent).
_cg_chroot_make() {
  local v=$1 root=$2 mirror=$3 logf=$4 suite
  suite=$(_cg_chroot_suite "$v") || return 2
  local base=${suite%%+*}
  local t0=$SECONDS
  log "chroot for PHP $v: debootstrap --variant=minbase $base from $mirror (log: $logf)"
  if ! timeout 1200 debootstrap --variant=minbase "$base" "$root" "$mirror" >>"$logf" 2>&1; then
    tail -5 "$logf" >&2
    echo "cg_chroot_ensure: debootstrap $base from $mirror failed (log: $logf)" >&2
    return 1
  fi
  # No service starts inside (php-fpm, nginx): the tests start their own.
  printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  cat > "$root/etc/apt/apt.conf.d/90checkout-guard" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
Acquire::Retries "3";
Acquire::http::Timeout "60";
Dpkg::Use-Pty "0";
EOF
  rm -f "$root/etc/apt/sources.list"
  if [ "$suite" = sid+experimental ]; then
    # Experimental's Release files are older than their Valid-Until on this mirror.
    echo 'Acquire::Check-Valid-Until "false";' >> "$root/etc/apt/apt.conf.d/90checkout-guard"
    printf 'deb %s sid main\ndeb %s experimental main\ndeb-src %s sid main\n' "$mirror" "$mirror" "$mirror" \
      > "$root/etc/apt/sources.list"
    cat > "$root/etc/apt/preferences.d/php$v" <<EOF
Package: php$v* src:php-defaults
Pin: release a=experimental
Pin-Priority: 990

Package: php-common
Pin: release a=experimental
Pin-Priority: 1001
EOF
  else
    printf 'deb %s %s main\n' "$mirror" "$base" > "$root/etc/apt/sources.list"
  fi
  echo "$v" > "$root/.cg-php"
  local pkgs; mapfile -t pkgs < <(_cg_chroot_packages "$v")
  log "chroot for PHP $v: apt-get install ${#pkgs[@]} packages"
  # shellcheck disable=SC2016  # expanded by the inner sh
  if ! _cg_chroot_enter "$root" "$root/cg/target" sh -c \
      'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" && apt-get clean' \
      apt "${pkgs[@]}" >>"$logf" 2>&1; then
    tail -15 "$logf" >&2
    echo "cg_chroot_ensure: apt-get install in the PHP $v chroot failed (log: $logf)" >&2
    return 1
  fi
  if _cg_chroot_redis_from_source "$v"; then
    log "chroot for PHP $v: phpredis from Debian's source package php-redis (phpize, make install)"
    # shellcheck disable=SC2016  # expanded by the inner sh
    if ! _cg_chroot_enter "$root" "$root/cg/target" sh -c '
        set -e; v=$1; cd /tmp
        apt-get source --download-only -q php-redis || true
        tar xf php-redis_*.orig.tar.*
        mkdir -p shim/ext/standard
        echo "#include <Zend/zend_smart_string.h>" > shim/ext/standard/php_smart_string.h
        d=$(dirname "$(find . -name config.m4 -path "*redis*" | head -1)")
        cd "$d"; phpize$v; ./configure -q --with-php-config=php-config$v CFLAGS="-g -O2 -I/tmp/shim"
        make -s -j"$(nproc)"; make install
        printf "; priority=20\nextension=redis.so\n" > /etc/php/$v/mods-available/redis.ini
        phpenmod -v "$v" redis' redis "$v" >>"$logf" 2>&1; then
      tail -15 "$logf" >&2
      echo "cg_chroot_ensure: building phpredis in the PHP $v chroot failed (log: $logf)" >&2
      return 1
    fi
  fi
  # The PHP asked for is the one `php` runs, and the extensions the tests need load.
  local got
  got=$(_cg_chroot_enter "$root" "$root/cg/target" php -r 'echo PHP_MAJOR_VERSION, ".", PHP_MINOR_VERSION, " ", extension_loaded("redis") ? "redis" : "-", "\n";' 2>>"$logf") || got="(php does not run)"
  if [ "$got" != "$v redis" ]; then
    echo "cg_chroot_ensure: the PHP $v chroot's php is '$got', expected '$v redis' (log: $logf)" >&2
    return 1
  fi
  log "chroot for PHP $v: ready in $((SECONDS - t0)) s"
}

cg_chroot_ensure() {
  local v=${1:?cg_chroot_ensure VERSION}
  _cg_chroot_suite "$v" >/dev/null || return 2
  local mirror spec root="$CG_CACHE/chroots/php$v"
  mirror=$(cg_debian_mirror) || return 1
  spec=$(_cg_chroot_spec "$v" "$mirror")
  mkdir -p "$CG_CACHE/chroots" "$CG_CACHE/target"
  _cg_chroot_current() { [ -f "$root/.cg-stamp" ] && [ "$(cat "$root/.cg-stamp")" = "$spec" ]; }
  # Ready: a shared lock suffices (runs in it hold shared locks too).
  if ( flock -s 9; _cg_chroot_current ) 9>>"$root.lock"; then echo "$root"; return 0; fi
  (
    # Made again only when no run is using it: the exclusive lock waits for them.
    flock 9
    _cg_chroot_current && exit 0
    command -v debootstrap >/dev/null || {
      log "apt-get install debootstrap"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    } || { echo "cg_chroot_ensure: debootstrap is missing and could not be installed" >&2; exit 1; }
    [ ! -d "$root" ] || log "chroot for PHP $v: what it should hold changed; making it again"
    local new="$root.new" logf="$root.log"
    _cg_chroot_unmounted "$new" && _cg_chroot_unmounted "$root" || exit 1
    rm -rf --one-file-system "$new"
    : > "$logf"
    _cg_chroot_make "$v" "$new" "$mirror" "$logf" || exit 1
    printf '%s\n' "$spec" > "$new/.cg-stamp"
    # The old chroot and its builds (of other headers) go; no run uses them (the lock).
    rm -rf --one-file-system "$root" "$CG_CACHE/target/php$v"
    mv "$new" "$root"
  ) 9>>"$root.lock" || return 1
  echo "$root"
}
