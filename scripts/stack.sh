#!/usr/bin/env bash
# Starts or stops php-fpm (with checkout_guard loaded from a conf.d-style ini) and nginx in
# front of it, on loopback ports, all state under RUN_DIR. Telemetry writes JSON lines to
# RUN_DIR/events.jsonl. FPM_WORKERS sets the pool size (default 4).
#   scripts/stack.sh start RUN_DIR DOCROOT VALKEY_URL  -> prints the HTTP port
#   scripts/stack.sh stop RUN_DIR
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
fpm_port=$(free_port); http_port=$(free_port)

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

cat > "$run/php-fpm.conf" <<CONF
[global]
pid = $run/php-fpm.pid
error_log = $run/php-fpm.log
daemonize = yes

[checkout]
listen = 127.0.0.1:$fpm_port
pm = static
pm.max_children = ${FPM_WORKERS:-4}
pm.max_requests = 0
catch_workers_output = yes
clear_env = no
php_admin_value[error_log] = $run/php-errors.log
php_admin_flag[log_errors] = on
CONF

cat > "$run/nginx.conf" <<CONF
worker_processes 1;
pid $run/nginx.pid;
error_log $run/nginx-error.log;
events { worker_connections 256; }
http {
  access_log $run/nginx-access.log;
  client_body_temp_path $run/tmp/body;
  fastcgi_temp_path $run/tmp/fastcgi;
  proxy_temp_path $run/tmp/proxy;
  uwsgi_temp_path $run/tmp/uwsgi;
  scgi_temp_path $run/tmp/scgi;
  server {
    listen 127.0.0.1:$http_port;
    root $docroot;
    location ~ \.php\$ {
      include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
      fastcgi_pass 127.0.0.1:$fpm_port;
    }
  }
}
CONF

PHP_INI_SCAN_DIR="$run/conf.d" php-fpm8.2 --allow-to-run-as-root -y "$run/php-fpm.conf" \
  -c /etc/php/8.2/fpm/php.ini
nginx -c "$run/nginx.conf" -p "$run" 2>>"$run/nginx-error.log"
for i in $(seq 1 100); do
  if php -r 'exit(@fsockopen("127.0.0.1", (int)$argv[1]) ? 0 : 1);' "$http_port" 2>/dev/null; then
    echo "$http_port"; exit 0
  fi
  sleep 0.05
done
echo "nginx did not come up on $http_port; see $run" >&2
exit 1
