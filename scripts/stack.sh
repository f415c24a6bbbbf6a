#!/usr/bin/env bash
# Starts or stops php-fpm (with checkout_guard loaded from a conf.d-style ini) and nginx in
# front of it, on loopback ports, all state under RUN_DIR. Telemetry writes JSON lines to
# RUN_DIR/events.jsonl; nginx writes JSON access logs to RUN_DIR/access.log.
#   scripts/stack.sh start RUN_DIR DOCROOT VALKEY_URL  -> prints the HTTP port
#   scripts/stack.sh stop RUN_DIR
# RUN_DIR/ports lists every port as NAME=PORT lines: http (nginx, the application), fpm
# (php-fpm's FastCGI listener), fpm_status (php-fpm's pm.status_listen, served by its own
# hidden pool even when every worker is busy), ops (nginx: /fpm-status from that pool, no
# flow control), provider (when PROVIDER_PORT is set).
# Optional environment:
#   FPM_WORKERS     pool size (default 4)
#   FPM_MAX_REQUESTS  pm.max_requests: recycle a worker after this many requests (default 0: never)
#   FLOW_LIMIT      inbound flow control: at most this many requests in flight to PHP
#                   (nginx limit_conn); past it nginx answers 503 + Retry-After at once
#                   instead of queueing. Unset or 0: no limit.
#   FPM_ENV         lines KEY=VALUE passed to the PHP code as env[KEY]
#   CHECKOUT_INI    extra checkout_guard INI lines (e.g. checkout_guard.tls.cafile=PATH)
#   PROVIDER_HTTP_PORT  the port for that nginx server (default: a free one)
#   PROVIDER_PORT   a mock provider on this port gets an nginx server in front of it that
#                   applies the provider's rate limits with limit_req (429 past them):
#                   ZONEA_RATE (r/s, default 200) and ZONEA_BURST (100) for /items/,
#                   PAYMENT_RATE (50) and PAYMENT_BURST (10) for /v1/charges; for the
#                   endpoint API (/v1/payment_intents create, confirm, retrieve and
#                   /v1/items/) PROVIDER_GLOBAL_RATE (50) and PROVIDER_GLOBAL_BURST (25)
#                   over all four, PROVIDER_ENDPOINT_RATE (25) and PROVIDER_ENDPOINT_BURST
#                   (5) for each (a rate: N a second, or nginx's Nr/s, Nr/m); its port is
#                   printed after the HTTP port, its access log is RUN_DIR/provider.log
set -euo pipefail
source "$(dirname "$0")/lib.sh"

cmd=${1:?start|stop}; run=${2:?RUN_DIR}

if [ "$cmd" = stop ]; then
  stop_pidfile "$run/nginx.pid"
  stop_pidfile "$run/php-fpm.pid"
  exit 0
fi

docroot=$(cd "${3:?DOCROOT}" && pwd); valkey_url=${4:?VALKEY_URL}
mkdir -p "$run/conf.d" "$run/tmp"
{ read -r fpm_port; read -r http_port; read -r spare_port; read -r status_port; read -r ops_port; } < <(free_ports 5)
provider_http=""
[ -z "${PROVIDER_PORT:-}" ] || provider_http=${PROVIDER_HTTP_PORT:-$spare_port}
# The configuration comes from deploy/config's templates, as in deploy/k8s (render.py).
# OPCACHE_BUILT_IN=1 where OPcache is part of PHP (8.5): its ini then loads no opcache.so.
OPCACHE_BUILT_IN=$(php -n -r 'echo extension_loaded("Zend OPcache") ? 1 : 0;') \
python3 "$CG_ROOT/deploy/config/render.py" local "$run" "$docroot" "$valkey_url" "$CG_EXT" \
  "$fpm_port" "$http_port" "$status_port" "$ops_port" ${PROVIDER_PORT:+"$PROVIDER_PORT" "$provider_http"}

# The php-fpm of the PHP that `php` runs: Debian 12's 8.2 on the host, another PHP in a
# chroot of scripts/chroot.sh (scripts/php-matrix.sh full).
php_v=$(php -r 'echo PHP_MAJOR_VERSION, ".", PHP_MINOR_VERSION;')
PHP_INI_SCAN_DIR="$run/conf.d" "php-fpm$php_v" --allow-to-run-as-root -y "$run/php-fpm.conf" \
  -c "/etc/php/$php_v/fpm/php.ini"
nginx -c "$run/nginx.conf" -p "$run" 2>>"$run/nginx-error.log"
wait_port "$http_port" || { echo "nginx did not come up; see $run" >&2; exit 1; }
printf 'http=%s\nfpm=%s\nfpm_status=%s\nops=%s\nprovider=%s\n' \
  "$http_port" "$fpm_port" "$status_port" "$ops_port" "${provider_http:-}" > "$run/ports"
echo "$http_port ${provider_http:-}"
