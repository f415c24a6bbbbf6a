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
#   PROVIDER_HTTP_PORT  the port for that nginx server (default: a free one)
#   PROVIDER_PORT   a mock provider on this port gets an nginx server in front of it that
#                   applies the provider's rate limits with limit_req (429 past them):
#                   ZONEA_RATE (r/s, default 200) and ZONEA_BURST (100) for /items/,
#                   PAYMENT_RATE (50) and PAYMENT_BURST (10) for /v1/charges; its port is printed after the HTTP port, its access log is
#                   RUN_DIR/provider.log
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
fpm_env=""
while IFS='=' read -r key value; do
  [ -n "$key" ] && [ -n "$value" ] && fpm_env+="env[$key] = \"$value\""$'\n'
done <<< "${FPM_ENV:-}"
provider_server=""
if [ -n "${PROVIDER_PORT:-}" ]; then
  provider_http=${PROVIDER_HTTP_PORT:-$spare_port}
  provider_server="
  # The provider's rate limits, as the talk reproduced them: nginx limit_req answers 429.
  limit_req_zone \$server_name zone=zonea:1m rate=${ZONEA_RATE:-200}r/s;
  limit_req_zone \$server_name zone=payment:1m rate=${PAYMENT_RATE:-50}r/s;
  upstream provider { server 127.0.0.1:$PROVIDER_PORT; keepalive 32; }
  server {
    listen 127.0.0.1:$provider_http;
    server_name provider;
    access_log $run/provider.log cg;
    limit_req_status 429;
    proxy_http_version 1.1;
    proxy_set_header Connection \"\";
    location /items/ { limit_req zone=zonea burst=${ZONEA_BURST:-100} nodelay; proxy_pass http://provider; }
    location /v1/charges { limit_req zone=payment burst=${PAYMENT_BURST:-10} nodelay; proxy_pass http://provider; }
  }"
fi

# The extension's settings come from an ini file, as a PHP team would ship it.
cat > "$run/conf.d/20-checkout_guard.ini" <<INI
; priority=20
extension=$CG_EXT
checkout_guard.url=$valkey_url
checkout_guard.timeout_ms=50
checkout_guard.on_unavailable=allow
checkout_guard.retry_interval_ms=1000
checkout_guard.events.sinks=jsonl
checkout_guard.events.jsonl_path=$run/events.jsonl
INI
# Production runs PHP with OPcache; without it every request compiles its code again.
cat > "$run/conf.d/10-opcache.ini" <<INI
zend_extension=opcache.so
opcache.enable=1
opcache.validate_timestamps=0
INI

cat > "$run/php-fpm.conf" <<CONF
[global]
pid = $run/php-fpm.pid
error_log = $run/php-fpm.log
daemonize = yes

[checkout]
listen = 127.0.0.1:$fpm_port
pm = static
pm.max_children = ${FPM_WORKERS:-4}
pm.max_requests = ${FPM_MAX_REQUESTS:-0}
listen.backlog = 1024
; For operators: the pool's status from a hidden pool of its own, reachable while every
; worker is busy (nginx serves it on the ops port as /fpm-status).
pm.status_path = /status
pm.status_listen = 127.0.0.1:$status_port
$fpm_env
catch_workers_output = yes
clear_env = no
php_admin_value[error_log] = $run/php-errors.log
php_admin_flag[log_errors] = on
CONF

flow=""
if [ "${FLOW_LIMIT:-0}" -gt 0 ]; then
  # Refuse quickly above the threshold: a request that would only wait for a php-fpm
  # worker gets 503 + Retry-After from nginx, costing no worker.
  flow="
      limit_conn inflight $FLOW_LIMIT;
      limit_conn_status 503;
      error_page 503 = @shed;"
fi

cat > "$run/nginx.conf" <<CONF
worker_processes 1;
pid $run/nginx.pid;
error_log $run/nginx-error.log;
events { worker_connections 2048; }
http {
  log_format cg escape=json '{"t":\$msec,"s":\$status,"rt":\$request_time,"m":"\$request_method","u":"\$request_uri"}';
  access_log $run/access.log cg;
  client_body_temp_path $run/tmp/body;
  fastcgi_temp_path $run/tmp/fastcgi;
  proxy_temp_path $run/tmp/proxy;
  uwsgi_temp_path $run/tmp/uwsgi;
  scgi_temp_path $run/tmp/scgi;
  limit_conn_zone \$server_port zone=inflight:1m;
  server {
    listen 127.0.0.1:$http_port;
    root $docroot;
    location ~ \.php\$ {$flow
      include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
      fastcgi_pass 127.0.0.1:$fpm_port;
    }
    location @shed {
      default_type application/json;
      add_header Retry-After 1 always;
      return 503 '{"error":"overloaded","retry_after":1}';
    }
  }
  server {
    listen 127.0.0.1:$ops_port;
    access_log off;
    location = /fpm-status {
      fastcgi_param REQUEST_METHOD \$request_method;
      fastcgi_param QUERY_STRING \$query_string;
      fastcgi_param SCRIPT_NAME /status;
      fastcgi_param SCRIPT_FILENAME /status;
      fastcgi_pass 127.0.0.1:$status_port;
    }
  }$provider_server
}
CONF

PHP_INI_SCAN_DIR="$run/conf.d" php-fpm8.2 --allow-to-run-as-root -y "$run/php-fpm.conf" \
  -c /etc/php/8.2/fpm/php.ini
nginx -c "$run/nginx.conf" -p "$run" 2>>"$run/nginx-error.log"
wait_port "$http_port" || { echo "nginx did not come up; see $run" >&2; exit 1; }
printf 'http=%s\nfpm=%s\nfpm_status=%s\nops=%s\nprovider=%s\n' \
  "$http_port" "$fpm_port" "$status_port" "$ops_port" "${provider_http:-}" > "$run/ports"
echo "$http_port ${provider_http:-}"
