#!/usr/bin/env bash
# A thread-safe (ZTS) PHP built from Debian's source package, made once per machine and
# cached like the chroots (scripts/chroot.sh), with the extension built against it and the
# threaded test host (tests/zts/host.c) linked to its embed SAPI. The PHP matrix's `zts`
# row (scripts/php-matrix.sh) runs the unit and integration suites and the threaded suite
# (tests/php/zts) on it.
#
# Sourced (after lib.sh: it uses CG_ROOT and log), it defines functions only:
#   cg_zts_ensure        prints the install prefix of a ready ZTS PHP (PREFIX/bin/php,
#                        PREFIX/bin/php-config, PREFIX/lib/libphp.so, phpredis built into
#                        PREFIX's extension directory and loaded by PREFIX/lib/conf.d; PREFIX/lib/php.ini is Debian's CLI one).
#                        Made on first use, then reused; made again from scratch when what
#                        it should hold changed (PREFIX/.cg-stamp: configure options, the
#                        source suite, phpredis). Installs the build dependencies with apt
#                        when one is missing (root then). Takes ~5 min on 2 cores.
#   cg_zts_build [DEST]  cargo build --release -p checkout_guard against that PHP
#                        (PHP_CONFIG), in a target directory of its own under the cache
#                        (one per checkout: the host's target/ is not invalidated). Prints
#                        the .so's path; with DEST, the .so is copied there first (under
#                        the target's lock) and that path printed.
#   cg_zts_host          builds tests/zts/host.c against the ZTS PHP's embed SAPI (when
#                        the source is newer) and prints the binary's path.
#   cg_zts_worker        the same for tests/zts/worker.c, the FrankenPHP-style worker host.
#   cg_zts_apache        prints the path of the same PHP built as Apache's module (mod_php,
#                        CG_CACHE/zts/apache/libphp.so): the same sources and configure
#                        options with --with-apxs2 in place of --enable-embed (PHP builds one
#                        SAPI module at a time: both are libphp.so, and configure stops with
#                        "You've configured multiple SAPIs to be built"). Its --prefix is
#                        the ZTS PHP's (the same extension directory and API: the extension
#                        cg_zts_build makes loads into it); with OPcache (opcache.so beside
#                        it). Only these two are kept (nothing is
#                        installed into Debian's /usr/lib/apache2 or /etc/apache2). Made on
#                        first use (~5 min on 2 cores), then reused (CG_CACHE/zts/apache/.cg-stamp);
#                        installs apache2-bin, apache2-dev (apxs) and apache2-utils (ab) with
#                        apt when missing (root then). scripts/apache.sh serves with it.
# Run as a command: scripts/zts.sh ensure | build [DEST] | host | worker | apache | php ARGS...
#
# The source: Debian's php8.2 source package from the host suite's main (bookworm), fetched
# with `apt-get source --download-only` through a source list of this script's own (the
# host's apt configuration is not changed). Only the upstream tarball (.orig: the php.net
# release) is built, without Debian's patches: no bison or re2c is needed. The security
# suite's version is not used: its source files answer 404 on deb.debian.org.
#
# Cache (CG_CACHE, default /var/cache/checkout-guard):
#   zts/php/             the install prefix;  zts/build.log  how it was made
#   zts/src/             the sources (kept for the host's headers and a rebuild)
#   zts/host/CHECKOUT    the threaded host binary;  zts/worker/CHECKOUT  the worker host
#   zts/apache/          mod_php (libphp.so), opcache.so, its .cg-stamp and build.log
#   target/zts/CHECKOUT/ the extension's cargo target directory, one per checkout
#   zts.lock             held while the PHP is made (exclusive) or used (shared)
# shellcheck source-path=SCRIPTDIR

CG_CACHE=${CG_CACHE:-/var/cache/checkout-guard}
# Bump when the way the PHP is made changes without its configure options changing.
_CG_ZTS_FORMAT=1

# The extensions: what Debian's PHPUnit (9.6) needs (dom, xml, xmlwriter, tokenizer,
# mbstring, ctype, json: `dpkg -s phpunit`; json is always built in PHP 8) and what the
# unit and integration suites call (pcntl, posix, sockets, curl, openssl for the TLS tests'
# stream contexts, simplexml for the JUnit counts, filter, iconv). phpredis (the tests
# inspect Valkey with it) is built separately with this PHP's phpize.
_cg_zts_configure_options() {
  printf '%s\n' --enable-zts --enable-embed --disable-zend-signals --disable-all \
    --disable-cgi --disable-phpdbg --enable-cli \
    --enable-ctype --enable-dom --enable-xml --enable-xmlwriter --enable-xmlreader \
    --enable-simplexml --with-libxml --enable-tokenizer --enable-mbstring --disable-mbregex \
    --enable-pcntl --enable-posix --enable-sockets --with-curl --with-openssl \
    --enable-filter --with-iconv --enable-session --with-zlib
}

# Debian packages the build needs (libxml2-dev: dom/xml; libcurl4-openssl-dev: curl;
# libssl-dev: openssl; dpkg-dev: apt-get source; autoconf: phpize for phpredis).
_cg_zts_build_deps() {
  printf '%s\n' gcc g++ make pkg-config autoconf dpkg-dev xz-utils libc6-dev libxml2-dev \
    libcurl4-openssl-dev libssl-dev zlib1g-dev ca-certificates
}

_cg_zts_prefix() { echo "$CG_CACHE/zts/php"; }

_cg_zts_suite() { (. /etc/os-release && echo "${VERSION_CODENAME:-}"); }

_cg_zts_spec() {
  printf 'checkout-guard zts format %s\nsource php8.2 from %s main\nconfigure %s\nphpredis from %s main\n' \
    "$_CG_ZTS_FORMAT" "$(_cg_zts_suite)" "$(_cg_zts_configure_options | tr '\n' ' ')" "$(_cg_zts_suite)"
}

# _cg_zts_install_deps [PACKAGE...]: the build dependencies, or these packages, installed
# with apt when one is missing.
_cg_zts_install_deps() {
  local missing=() p wanted
  if [ $# -gt 0 ]; then wanted=("$@"); else mapfile -t wanted < <(_cg_zts_build_deps); fi
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "cg_zts: missing build dependencies (${missing[*]}); run as root or install them" >&2
    return 1
  fi
  log "zts: apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"; }
}

# _cg_zts_source DIR PACKAGE: the package's source files from the host suite's main into DIR
# (through a source list of our own in DIR/apt; the host's apt configuration is untouched).
_cg_zts_source() {
  local dir=$1 pkg=$2 mirror suite
  mirror=$(cg_debian_mirror) || return 1
  suite=$(_cg_zts_suite)
  mkdir -p "$dir/apt/lists/partial"
  echo "deb-src $mirror $suite main" > "$dir/apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$dir/apt/sources.list" -o "Dir::Etc::SourceParts=$dir/apt/none"
              -o "Dir::State::Lists=$dir/apt/lists" -o "APT::Get::List-Cleanup=false" -o Acquire::Retries=3)
  compgen -G "$dir/apt/lists/*_Sources*" >/dev/null || apt-get "${opts[@]}" update -q || return 1
  (cd "$dir" && apt-get "${opts[@]}" source --download-only -q "$pkg")
}

_cg_zts_make() {
  local prefix=$1 src="$CG_CACHE/zts/src" t0=$SECONDS
  _cg_zts_install_deps || return 1
  # A PHP built by an earlier attempt with the same options is kept (phpredis failed after).
  if [ -x "$prefix/bin/php" ] && [ "$(cat "$src/.php-done" 2>/dev/null)" = "$(_cg_zts_spec)" ]; then
    log "zts: PHP already built in $prefix (an earlier attempt)"
  else
    _cg_zts_make_php "$prefix" "$src" || return 1
  fi
  _cg_zts_make_redis "$prefix" "$src" || return 1
  local got
  got=$("$prefix/bin/php" -r 'echo PHP_ZTS, " ", extension_loaded("redis") ? "redis" : "-";') || got="(php does not run)"
  [ "$got" = "1 redis" ] || { echo "cg_zts: the built php says '$got', expected '1 redis'" >&2; return 1; }
  log "zts: PHP $("$prefix/bin/php" -r 'echo PHP_VERSION;') ZTS ready in $((SECONDS - t0)) s"
}

_cg_zts_make_php() {
  local prefix=$1 src=$2
  rm -rf "$src" "$prefix"; mkdir -p "$src"
  log "zts: php8.2 sources from Debian ($(_cg_zts_suite) main)"
  _cg_zts_source "$src" php8.2 || { echo "cg_zts: apt-get source php8.2 failed" >&2; return 1; }
  local orig; orig=$(compgen -G "$src/php8.2_*.orig.tar.*" | head -1)
  [ -n "$orig" ] || { echo "cg_zts: no php8.2 .orig tarball was downloaded" >&2; return 1; }
  tar -C "$src" -xf "$orig"
  local tree; tree=$(find "$src" -mindepth 1 -maxdepth 1 -type d -name 'php-8.2*' | head -1)
  [ -n "$tree" ] || { echo "cg_zts: $orig holds no php-8.2.* directory" >&2; return 1; }
  log "zts: configure + make in $tree (a few minutes)"
  local opts; mapfile -t opts < <(_cg_zts_configure_options)
  (cd "$tree" && ./configure -q --prefix="$prefix" --with-config-file-path="$prefix/lib" \
      --with-config-file-scan-dir="$prefix/lib/conf.d" "${opts[@]}" CFLAGS="-g -O2") || return 1
  (cd "$tree" && make -s -j"$(nproc)" >/dev/null && make -s install >/dev/null) || return 1
  mkdir -p "$prefix/lib/conf.d"
  # As Debian's CLI php.ini is: php.ini-production with no memory limit, and Debian's
  # include_path (PHPUnit and the other PHP libraries from Debian are in /usr/share/php).
  { cat "$tree/php.ini-production"
    printf '\n; checkout-guard (scripts/zts.sh): as Debian'"'"'s CLI\nmemory_limit=-1\ninclude_path=".:/usr/share/php"\n'
  } > "$prefix/lib/php.ini"
  _cg_zts_spec > "$src/.php-done"
}

# phpredis from the newest release in Debian's php-redis source (it holds several).
_cg_zts_make_redis() {
  local prefix=$1 src=$2 orig
  rm -rf "$src/redis"
  log "zts: phpredis from Debian's php-redis source ($(_cg_zts_suite) main)"
  _cg_zts_source "$src" php-redis || return 1
  orig=$(compgen -G "$src/php-redis_*.orig.tar.*" | head -1)
  [ -n "$orig" ] || { echo "cg_zts: no php-redis .orig tarball was downloaded" >&2; return 1; }
  mkdir -p "$src/redis"; tar -C "$src/redis" -xf "$orig"
  local d; d=$(find "$src/redis" -mindepth 1 -maxdepth 1 -type d -name 'redis-*' | sort -V | tail -1)
  [ -f "$d/config.m4" ] || { echo "cg_zts: no phpredis release (redis-*/config.m4) in $orig" >&2; return 1; }
  (cd "$d" && "$prefix/bin/phpize" >/dev/null && ./configure -q --with-php-config="$prefix/bin/php-config" &&
     make -s -j"$(nproc)" >/dev/null && make -s install >/dev/null) || return 1
  printf 'extension=redis.so\n' > "$prefix/lib/conf.d/20-redis.ini"
}

cg_zts_ensure() {
  local prefix spec; prefix=$(_cg_zts_prefix); spec=$(_cg_zts_spec)
  mkdir -p "$CG_CACHE/zts"
  _cg_zts_current() { [ -f "$prefix/.cg-stamp" ] && [ "$(cat "$prefix/.cg-stamp")" = "$spec" ]; }
  if ( flock -s 9; _cg_zts_current ) 9>>"$CG_CACHE/zts.lock"; then echo "$prefix"; return 0; fi
  (
    flock 9
    _cg_zts_current && exit 0
    [ ! -d "$prefix" ] || log "zts: what the PHP should hold changed; making it again"
    _cg_zts_make "$prefix" > >(tee "$CG_CACHE/zts/build.log" >&2) 2>&1 || {
      echo "cg_zts_ensure: the ZTS PHP could not be made (log: $CG_CACHE/zts/build.log)" >&2; exit 1; }
    printf '%s\n' "$spec" > "$prefix/.cg-stamp"
    # Builds against an older PHP go.
    rm -rf --one-file-system "$CG_CACHE/target/zts" "$CG_CACHE/zts/host" "$CG_CACHE/zts/worker"
  ) 9>>"$CG_CACHE/zts.lock" || return 1
  echo "$prefix"
}

# Per checkout, as the chroots' targets are (cargo judges freshness by mtimes and paths).
cg_zts_target() {
  echo "$CG_CACHE/target/zts/$(basename "$CG_ROOT")-$(printf %s "$CG_ROOT" | sha1sum | cut -c1-8)"
}

cg_zts_build() {
  local dest=${1:-} prefix target
  prefix=$(cg_zts_ensure) || return 1
  target=$(cg_zts_target)
  mkdir -p "$target"; touch "$target"
  find "$(dirname "$target")" -mindepth 1 -maxdepth 1 -type d -mtime +14 -exec rm -rf --one-file-system {} + 2>/dev/null || true
  (
    flock 9
    log "zts: cargo build --release -p checkout_guard (PHP_CONFIG=$prefix/bin/php-config)"
    (cd "$CG_ROOT" && PHP="$prefix/bin/php" PHP_CONFIG="$prefix/bin/php-config" CARGO_TARGET_DIR="$target" \
       cargo build --release --locked --quiet -p checkout_guard) >&2 || exit 1
    if [ -n "$dest" ]; then
      mkdir -p "$dest" && cp -f "$target/release/libcheckout_guard.so" "$dest/" || exit 1
    fi
  ) 9>"$target.lock" || return 1
  if [ -n "$dest" ]; then echo "$dest/libcheckout_guard.so"; else echo "$target/release/libcheckout_guard.so"; fi
}

cg_zts_host() { _cg_zts_embed_binary host; }
cg_zts_worker() { _cg_zts_embed_binary worker; }

# _cg_zts_embed_binary NAME: tests/zts/NAME.c built against the ZTS PHP's embed SAPI.
_cg_zts_embed_binary() {
  local name=$1 prefix out src="$CG_ROOT/tests/zts/$1.c"
  prefix=$(cg_zts_ensure) || return 1
  out="$CG_CACHE/zts/$name/$(basename "$CG_ROOT")-$(printf %s "$CG_ROOT" | sha1sum | cut -c1-8)"
  mkdir -p "$(dirname "$out")"
  if [ ! -x "$out" ] || [ "$src" -nt "$out" ]; then
    # shellcheck disable=SC2046  # php-config --includes is a list of flags
    gcc -std=gnu11 -O1 -g -Wall -Werror -pthread -o "$out.new" "$src" \
      $("$prefix/bin/php-config" --includes) -L"$prefix/lib" -lphp -Wl,-rpath,"$prefix/lib" >&2 || return 1
    mv -f "$out.new" "$out"
  fi
  echo "$out"
}

# Apache's module: the ZTS PHP's options with --with-apxs2 in place of --enable-embed, and
# OPcache (opcache.so, kept beside libphp.so): Apache is run with it, as production and the
# php-fpm it is measured against are (scripts/bench-apache.sh).
_cg_zts_apache_options() {
  _cg_zts_configure_options | sed 's|^--enable-embed$|--with-apxs2=/usr/bin/apxs|'
  echo --enable-opcache
}

# apache2-bin, not apache2: the latter's maintainer scripts would start Debian's own Apache on
# port 80; the runs here start Apache from a configuration of their own (scripts/apache.sh).
_cg_zts_apache_deps() { printf '%s\n' apache2-bin apache2-dev apache2-utils; }

_cg_zts_apache_spec() {
  printf 'checkout-guard zts apache format %s\nsource %s\nconfigure %s\n' "$_CG_ZTS_FORMAT" \
    "$(basename "$(compgen -G "$CG_CACHE/zts/src/php8.2_*.orig.tar.*" | grep -v '\.asc$' | head -1)")" \
    "$(_cg_zts_apache_options | tr '\n' ' ')"
}

_cg_zts_apache_make() {
  local prefix=$1 dir=$2 t0=$SECONDS orig tree
  # shellcheck disable=SC2046  # a list of package names
  _cg_zts_install_deps $(_cg_zts_apache_deps) || return 1
  rm -rf "$dir/src" "$dir/libphp.so" "$dir/opcache.so"; mkdir -p "$dir/src"
  orig=$(compgen -G "$CG_CACHE/zts/src/php8.2_*.orig.tar.*" | grep -v '\.asc$' | head -1)
  [ -n "$orig" ] || { echo "cg_zts_apache: no php8.2 .orig tarball in $CG_CACHE/zts/src" >&2; return 1; }
  tar -C "$dir/src" -xf "$orig"
  tree=$(find "$dir/src" -mindepth 1 -maxdepth 1 -type d -name 'php-8.2*' | head -1)
  [ -n "$tree" ] || { echo "cg_zts_apache: $orig holds no php-8.2.* directory" >&2; return 1; }
  log "zts apache: configure + make in $tree (a few minutes)"
  local opts; mapfile -t opts < <(_cg_zts_apache_options)
  (cd "$tree" && ./configure -q --prefix="$prefix" --with-config-file-path="$prefix/lib" \
      --with-config-file-scan-dir="$prefix/lib/conf.d" "${opts[@]}" CFLAGS="-g -O2") || return 1
  (cd "$tree" && make -s -j"$(nproc)" >/dev/null) || return 1
  [ -f "$tree/libs/libphp.so" ] || { echo "cg_zts_apache: make made no libs/libphp.so" >&2; return 1; }
  [ -f "$tree/modules/opcache.so" ] || { echo "cg_zts_apache: make made no modules/opcache.so" >&2; return 1; }
  cp -f "$tree/libs/libphp.so" "$tree/modules/opcache.so" "$dir/"
  rm -rf --one-file-system "$dir/src"
  log "zts apache: mod_php (PHP $("$prefix/bin/php" -r 'echo PHP_VERSION;') ZTS) ready in $((SECONDS - t0)) s"
}

cg_zts_apache() {
  local prefix dir spec
  prefix=$(cg_zts_ensure) || return 1
  dir="$CG_CACHE/zts/apache"; spec=$(_cg_zts_apache_spec)
  mkdir -p "$dir"
  _cg_zts_apache_current() {
    [ -f "$dir/.cg-stamp" ] && [ "$(cat "$dir/.cg-stamp")" = "$spec" ] && [ -f "$dir/libphp.so" ] && [ -f "$dir/opcache.so" ] &&
      [ -x /usr/sbin/apache2 ] && command -v ab >/dev/null
  }
  if ! ( flock -s 9; _cg_zts_apache_current ) 9>>"$dir.lock"; then
    (
      flock 9
      _cg_zts_apache_current && exit 0
      if [ -f "$dir/.cg-stamp" ] && [ "$(cat "$dir/.cg-stamp")" = "$spec" ] && [ -f "$dir/libphp.so" ]; then
        # Built; only Apache itself is missing (a machine whose packages were removed).
        # shellcheck disable=SC2046  # a list of package names
        _cg_zts_install_deps $(_cg_zts_apache_deps) || exit 1
        exit 0
      fi
      rm -f "$dir/.cg-stamp"
      # The shared lock on the ZTS PHP: its sources (the tarball) are read.
      ( flock -s 8; _cg_zts_apache_make "$prefix" "$dir" ) 8>>"$CG_CACHE/zts.lock" \
        > >(tee "$dir/build.log" >&2) 2>&1 || {
        echo "cg_zts_apache: mod_php could not be made (log: $dir/build.log)" >&2; exit 1; }
      printf '%s\n' "$spec" > "$dir/.cg-stamp"
    ) 9>>"$dir.lock" || return 1
  fi
  echo "$dir/libphp.so"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  source "$(dirname "$0")/lib.sh"
  source "$CG_ROOT/scripts/chroot.sh"
  case "${1:-}" in
    ensure) cg_zts_ensure ;;
    build) shift; cg_zts_build "${1:-}" ;;
    host) cg_zts_host ;;
    worker) cg_zts_worker ;;
    apache) cg_zts_apache ;;
    php) shift; p=$(cg_zts_ensure); exec "$p/bin/php" "$@" ;;
    *) echo "usage: scripts/zts.sh ensure | build [DEST] | host | worker | apache | php ARGS..." >&2; exit 2 ;;
  esac
fi
