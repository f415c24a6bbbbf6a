#!/usr/bin/env bash
# Starts or stops Apache with the event MPM and the ZTS PHP as its module (mod_php,
# scripts/zts.sh apache) with checkout_guard loaded, on a loopback port, all state under
# RUN_DIR: the counterpart of scripts/stack.sh (php-fpm + nginx) for teams on Apache.
# Apache runs from a configuration of its own (RUN_DIR/apache2.conf), never Debian's
# /etc/apache2. Telemetry writes JSON lines to RUN_DIR/events.jsonl; Apache's error log is
# RUN_DIR/error.log, PHP's RUN_DIR/php-errors.log.
#   scripts/apache.sh start RUN_DIR DOCROOT VALKEY_URL  -> prints the HTTP port
#   scripts/apache.sh stop RUN_DIR
# RUN_DIR/ports: http=PORT. Started by root, Apache's children run as www-data (Apache
# refuses to serve as root): RUN_DIR is given to it (so it must be reachable: one under
# /tmp), and where it cannot read the checkout (one under /root) DOCROOT and the PHP
# library (php/) are served from a copy in RUN_DIR. A start fails (status 1, the log's lines printed) when Apache's
# MPM is not event, PHP is not thread-safe or PHP reported a startup error (an extension
# that does not load: one built for another PHP).
# Optional environment:
#   CG_EXT          the extension: a build for the ZTS PHP (scripts/zts.sh build)
#   APACHE_PHP_MODULE  mod_php to load (default: scripts/zts.sh apache, made on first use)
#   APACHE_CHILDREN (default 2) processes of APACHE_THREADS (default 8) threads each
#   APACHE_ENV      lines KEY=VALUE the PHP code reads with getenv() (SetEnv)
#   CHECKOUT_INI    extra checkout_guard INI lines
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"

cmd=${1:-}; run=${2:-}
case "$cmd" in start|stop) ;; *) echo "usage: scripts/apache.sh start RUN_DIR DOCROOT VALKEY_URL | stop RUN_DIR" >&2; exit 2 ;; esac
[ -n "$run" ] || { echo "scripts/apache.sh $cmd: RUN_DIR is missing" >&2; exit 2; }

if [ "$cmd" = stop ]; then
  stop_pidfile "$run/apache2.pid"
  exit 0
fi

if [ -f "$run/apache2.pid" ] && kill -0 "$(cat "$run/apache2.pid")" 2>/dev/null; then
  echo "scripts/apache.sh start: an Apache of $run is running (pid $(cat "$run/apache2.pid")): stop it first" >&2; exit 1
fi
[ -d "${3:-}" ] || { echo "scripts/apache.sh start: DOCROOT '${3:-}' is not a directory" >&2; exit 2; }
docroot=$(cd "$3" && pwd); valkey_url=${4:?VALKEY_URL}
children=${APACHE_CHILDREN:-2}; threads=${APACHE_THREADS:-8}
for v in "APACHE_CHILDREN=$children" "APACHE_THREADS=$threads"; do
  [[ ${v#*=} =~ ^[1-9][0-9]{0,2}$ ]] || { echo "scripts/apache.sh: ${v%%=*} must be a whole number from 1 to 999, got '${v#*=}'" >&2; exit 2; }
done
[ -f "$CG_EXT" ] || { echo "scripts/apache.sh: no extension at CG_EXT=$CG_EXT (scripts/zts.sh build)" >&2; exit 1; }
if [ -z "${APACHE_PHP_MODULE:-}" ]; then
  source "$CG_ROOT/scripts/chroot.sh"
  source "$CG_ROOT/scripts/zts.sh"
  APACHE_PHP_MODULE=$(cg_zts_apache)
fi
[ -f "$APACHE_PHP_MODULE" ] || { echo "scripts/apache.sh: no mod_php at $APACHE_PHP_MODULE" >&2; exit 1; }
[ -x /usr/sbin/apache2 ] || { echo "scripts/apache.sh: /usr/sbin/apache2 is missing (scripts/zts.sh apache installs apache2-bin)" >&2; exit 1; }
opcache="$(dirname "$APACHE_PHP_MODULE")/opcache.so"
modules=/usr/lib/apache2/modules

user_lines=""
if [ "$(id -u)" -eq 0 ]; then
  user_lines=$'User www-data\nGroup www-data'
  mkdir -p "$run"
  chown www-data:www-data "$run"
  runuser -u www-data -- test -x "$run" ||
    { echo "scripts/apache.sh: www-data (Apache's children, started by root) cannot reach RUN_DIR $run: use one under /tmp" >&2; exit 2; }
  if ! runuser -u www-data -- test -r "$docroot" || ! runuser -u www-data -- test -r "$CG_ROOT/php/autoload.php"; then
    # A checkout www-data cannot read (one under /root, mode 700): the library (php/, the
    # example checkout in it) and DOCROOT are served from a copy in RUN_DIR, at the same
    # places relative to each other (the pages require the library by relative paths).
    case "$docroot/" in
      "$CG_ROOT"/*) rel=${docroot#"$CG_ROOT"/} ;;
      *) echo "scripts/apache.sh: www-data cannot read DOCROOT $docroot (outside the checkout): make it readable" >&2; exit 1 ;;
    esac
    rm -rf "$run/stage"; mkdir -p "$run/stage"
    cp -a "$CG_ROOT/php" "$run/stage/php"
    if [ ! -d "$run/stage/$rel" ]; then mkdir -p "$run/stage/$(dirname "$rel")" && cp -a "$docroot" "$run/stage/$rel"; fi
    docroot="$run/stage/$rel"
    log "apache: www-data cannot read $CG_ROOT: serving a copy ($docroot)"
  fi
fi

rm -rf "$run/conf.d"; mkdir -p "$run/conf.d"
port=$(free_port)
env_lines=""
while IFS= read -r line; do
  key=${line%%=*} value=${line#*=}
  [ -n "$key" ] && [ "$key" != "$line" ] || continue
  env_lines+="SetEnv $key \"$value\""$'\n'
done <<< "${APACHE_ENV:-}"

cat > "$run/apache2.conf" <<EOF
# Written by scripts/apache.sh: Apache with the event MPM and the ZTS PHP's mod_php.
ServerRoot "$run"
DefaultRuntimeDir "$run"
PidFile "$run/apache2.pid"
ErrorLog "$run/error.log"
LogLevel warn
Listen 127.0.0.1:$port
ServerName 127.0.0.1
$user_lines
LoadModule mpm_event_module $modules/mod_mpm_event.so
LoadModule authz_core_module $modules/mod_authz_core.so
LoadModule dir_module $modules/mod_dir.so
LoadModule env_module $modules/mod_env.so
LoadModule alias_module $modules/mod_alias.so
LoadModule php_module $APACHE_PHP_MODULE
# A fixed pool: every thread started at once and kept (no child is stopped as spare).
StartServers $children
ServerLimit $children
ThreadLimit $threads
ThreadsPerChild $threads
MaxRequestWorkers $((children * threads))
MinSpareThreads 1
MaxSpareThreads $((children * threads))
MaxConnectionsPerChild 0
KeepAlive On
ListenBacklog 1024
PHPIniDir "$run"
DocumentRoot "$docroot"
DirectoryIndex index.php
<Directory />
  AllowOverride None
  Require all denied
</Directory>
<Directory "$docroot">
  Require all granted
</Directory>
# What the start checks: the SAPI, thread safety, the extension (RUN_DIR/probe.php).
Alias /.cg-probe.php "$run/probe.php"
<Directory "$run">
  Require all granted
</Directory>
<FilesMatch "\.php$">
  SetHandler application/x-httpd-php
</FilesMatch>
${env_lines}
EOF

# PHP's settings: a php.ini of the run's own (no other is read: PHP_INI_SCAN_DIR below).
cat > "$run/php.ini" <<EOF
; Written by scripts/apache.sh
memory_limit=128M
; Debian's (PHP libraries from Debian packages, the example checkout's Guzzle and PSR-7)
include_path=".:/usr/share/php"
log_errors=On
display_errors=Off
display_startup_errors=On
error_log=$run/php-errors.log
zend_extension=$opcache
opcache.enable=1
opcache.validate_timestamps=0
EOF
python3 - "$CG_ROOT" "$run" "$CG_EXT" "$valkey_url" <<'EOF'
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "deploy", "config"))
from render import render
run, ext, url = sys.argv[2:5]
open(os.path.join(run, "conf.d", "20-checkout_guard.ini"), "w").write(render(
    "checkout_guard.ini.tmpl", extension=ext, url=url, sinks="jsonl",
    events=f"checkout_guard.events.jsonl_path={run}/events.jsonl", extra=os.environ.get("CHECKOUT_INI", "")))
EOF
echo '<?php echo PHP_SAPI, " zts=", PHP_ZTS, " checkout_guard=", (int) extension_loaded("checkout_guard");' > "$run/probe.php"
: > "$run/error.log"; : > "$run/php-errors.log"; : > "$run/events.jsonl"
[ -z "$user_lines" ] || chown -R www-data:www-data "$run"

fail() {
  echo "scripts/apache.sh: $1 ($run)" >&2
  tail -n 20 "$run/error.log" "$run/php-errors.log" >&2 2>/dev/null || true
  stop_pidfile "$run/apache2.pid"
  exit 1
}
ap() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin PHP_INI_SCAN_DIR="$run/conf.d" /usr/sbin/apache2 -f "$run/apache2.conf" "$@"; }
mpm=$(ap -V 2>&1) || fail "apache2 -V failed: $mpm"
grep -q '^Server MPM: *event' <<< "$mpm" || fail "the MPM is not event: $(grep 'Server MPM' <<< "$mpm")"
ap -t > "$run/configtest.log" 2>&1 || fail "apache2 -t: $(cat "$run/configtest.log")"
ap -k start 2>> "$run/error.log" || fail "apache2 -k start failed"
wait_port "$port" || fail "Apache did not come up"
if grep -q 'PHP Startup' "$run/error.log" "$run/php-errors.log"; then fail "PHP reported startup errors"; fi
probe=$(php -r 'echo @file_get_contents("http://127.0.0.1:" . $argv[1] . "/.cg-probe.php");' "$port") || true
[ "$probe" = "apache2handler zts=1 checkout_guard=1" ] ||
  fail "PHP under Apache says '$probe', expected 'apache2handler zts=1 checkout_guard=1'"
echo "http=$port" > "$run/ports"
echo "$port"
