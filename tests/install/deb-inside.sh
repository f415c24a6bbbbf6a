#!/usr/bin/env bash
# Runs inside a fresh chroot (scripts/install-test.sh): installs the Debian package with
# apt-get, serves tests/install/www/acquire.php with php-fpm behind nginx on loopback and
# checks the page's decisions (made in the Valkey on the host's loopback), then removes
# the package and checks that no checkout_guard ini is left under /etc/php; then the same
# with an ini the administrator edited (kept, disabled, until purge).
#   deb-inside.sh DEB PHP_VERSION VALKEY_PORT FPM_PORT HTTP_PORT
set -uo pipefail
deb=$1 v=$2 vport=$3 fport=$4 hport=$5
here=$(cd "$(dirname "$0")" && pwd)
failed=0
ok() { echo "  ok   $*"; }
bad() { echo "  FAIL $*"; failed=1; }
check() { local what=$1; shift; if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$what"; fi; }
inis() { find /etc/php -name '*checkout_guard*' 2>/dev/null | sort; }
ms() { date +%s%3N; }

export DEBIAN_FRONTEND=noninteractive
t0=$(ms)
apt-get install -y -q "$deb" > /tmp/apt-install.log 2>&1 || { cat /tmp/apt-install.log; bad "apt-get install $deb"; exit 1; }
echo "  apt-get install ./$(basename "$deb"): $(( $(ms) - t0 )) ms"
ini=/etc/php/$v/mods-available/checkout_guard.ini
check "the package is installed" dpkg-query -W -f='${Status}' checkout-guard
check "$ini has '; priority=20'" grep -qx '; priority=20' "$ini"
check "$ini has 'extension=checkout_guard.so'" grep -qx 'extension=checkout_guard.so' "$ini"
check "enabled for cli: /etc/php/$v/cli/conf.d/20-checkout_guard.ini" test -L "/etc/php/$v/cli/conf.d/20-checkout_guard.ini"
check "enabled for fpm: /etc/php/$v/fpm/conf.d/20-checkout_guard.ini" test -L "/etc/php/$v/fpm/conf.d/20-checkout_guard.ini"
check "php -m lists checkout_guard" sh -c "php -m | grep -qx checkout_guard"
check "the extension is in php-config's extension dir" test -f "$(php-config --extension-dir)/checkout_guard.so"
check "/usr/bin/checkout-guard runs" sh -c "checkout-guard --help | grep -q limiter"
check "checkout-guard on the PATH is /usr/bin/checkout-guard" sh -c '[ "$(command -v checkout-guard)" = /usr/bin/checkout-guard ]'
check "checkout-guard --version names the package's version" sh -c "checkout-guard --version | grep -qx \"checkout-guard \$(dpkg-query -W -f='\${Version}' checkout-guard | sed 's/+php.*//')\""
check "the PHP library: /usr/share/php/CheckoutGuard/autoload.php loads CheckoutGuard\\Http\\RateLimitedClient" \
  sh -c "php -r 'require \"/usr/share/php/CheckoutGuard/autoload.php\"; var_dump(class_exists(\"CheckoutGuard\\\\Http\\\\RateLimitedClient\"));' | grep -qx 'bool(true)'"
check "the PHP library on PHP's include path (Debian's /usr/share/php): require 'CheckoutGuard/autoload.php'" \
  sh -c "php -r 'require \"CheckoutGuard/autoload.php\"; exit(class_exists(\"CheckoutGuard\\\\Testing\\\\CallBudget\") ? 0 : 1);'"
check "dpkg -S: the package owns the PHP library" sh -c "dpkg -S /usr/share/php/CheckoutGuard/autoload.php | grep -q '^checkout-guard:'"
check "dpkg -S: the package owns the extension" sh -c "dpkg -S checkout_guard.so | grep -q '^checkout-guard:'"

# php-fpm (Debian's php.ini and conf.d, so the module as the package enabled it) behind
# nginx, both on loopback ports, everything under /tmp/www.
mkdir -p /tmp/www/root && cp "$here/www/acquire.php" /tmp/www/root/ && chmod -R a+rX /tmp/www
cat > /tmp/www/php-fpm.conf <<EOF
[global]
pid = /tmp/www/php-fpm.pid
error_log = /tmp/www/php-fpm.log
[www]
user = www-data
group = www-data
listen = 127.0.0.1:$fport
pm = static
pm.max_children = 2
php_admin_value[checkout_guard.url] = redis://127.0.0.1:$vport
php_admin_value[checkout_guard.timeout_ms] = 500
php_admin_flag[log_errors] = on
php_admin_value[error_log] = /tmp/www/php-errors.log
catch_workers_output = yes
EOF
cat > /tmp/www/nginx.conf <<EOF
pid /tmp/www/nginx.pid;
error_log /tmp/www/nginx-error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path /tmp/www; fastcgi_temp_path /tmp/www; proxy_temp_path /tmp/www;
  uwsgi_temp_path /tmp/www; scgi_temp_path /tmp/www;
  server {
    listen 127.0.0.1:$hport;
    root /tmp/www/root;
    location ~ \.php\$ {
      include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
      fastcgi_pass 127.0.0.1:$fport;
    }
  }
}
EOF
"php-fpm$v" -y /tmp/www/php-fpm.conf || bad "php-fpm$v starts"
nginx -c /tmp/www/nginx.conf || bad "nginx starts"

# GET with a 5 s timeout; up to 50 tries 0.1 s apart while nginx comes up.
get() {
  php -r '$c = stream_context_create(["http" => ["timeout" => 5, "ignore_errors" => true]]);
          $b = @file_get_contents($argv[1], false, $c); if ($b === false) exit(1); echo $b;' "$1"
}
run=$$-$(ms)
url="http://127.0.0.1:$hport/acquire.php?run=$run"
for _ in $(seq 1 50); do get "http://127.0.0.1:$hport/" >/dev/null && break; sleep 0.1; done
answers=()
for _ in 1 2 3; do answers+=("$(get "$url" || echo "no answer")"); done
printf '  page: %s\n' "${answers[@]}"
expect() {
  php -r '$a = json_decode($argv[1], true); $w = json_decode($argv[2], true);
          foreach ($w as $k => $x) { if (!is_array($a) || ($a[$k] ?? null) !== $x) exit(1); }' "$1" "$2"
}
check "1st acquire() under php-fpm: allowed, 1 left, decided in Valkey" \
  expect "${answers[0]}" "{\"sapi\":\"fpm-fcgi\",\"php\":\"$v\",\"allowed\":true,\"reason\":\"allowed\",\"remaining\":1}"
check "2nd acquire(): allowed, 0 left" expect "${answers[1]}" '{"allowed":true,"reason":"allowed","remaining":0}'
check "3rd acquire(): denied by the global bucket" expect "${answers[2]}" '{"allowed":false,"reason":"global"}'
[ ! -s /tmp/www/php-errors.log ] || { bad "PHP errors under php-fpm"; cat /tmp/www/php-errors.log; }
kill "$(cat /tmp/www/nginx.pid)" "$(cat /tmp/www/php-fpm.pid)" 2>/dev/null
for _ in $(seq 1 50); do [ -e /tmp/www/nginx.pid ] || [ -e /tmp/www/php-fpm.pid ] || break; sleep 0.1; done

# An upgrade (here: the same version again) keeps what the administrator decided: a SAPI
# disabled with phpdismod stays disabled, the others stay enabled.
phpdismod -v "$v" -s fpm checkout_guard
apt-get install -y -q --reinstall "$deb" > /tmp/apt-reinstall.log 2>&1 || { cat /tmp/apt-reinstall.log; bad "apt-get install --reinstall"; }
check "reinstalled: still enabled for cli" test -L "/etc/php/$v/cli/conf.d/20-checkout_guard.ini"
check "reinstalled: fpm, disabled by the administrator, stays disabled" test ! -e "/etc/php/$v/fpm/conf.d/20-checkout_guard.ini"

t0=$(ms)
apt-get remove -y -q checkout-guard > /tmp/apt-remove.log 2>&1 || { cat /tmp/apt-remove.log; bad "apt-get remove"; }
echo "  apt-get remove checkout-guard: $(( $(ms) - t0 )) ms"
left=$(inis)
if [ -z "$left" ]; then ok "after apt-get remove: no checkout_guard ini (or link) under /etc/php"; else bad "after apt-get remove, left: $left"; fi
check "after apt-get remove: php -m does not list checkout_guard" sh -c "! php -m | grep -qx checkout_guard"
check "after apt-get remove: dpkg -S finds nothing named checkout_guard" sh -c "! dpkg -S checkout_guard"
check "after apt-get remove: no /usr/bin/checkout-guard" test ! -e /usr/bin/checkout-guard
check "after apt-get remove: no /usr/share/php/CheckoutGuard" test ! -e /usr/share/php/CheckoutGuard

# Installed again (phpenmod remembers the removal's dismod), the ini edited, removed:
# the edited ini stays in mods-available, enabled nowhere; purge takes it.
apt-get install -y -q "$deb" > /tmp/apt-install2.log 2>&1 || { cat /tmp/apt-install2.log; bad "apt-get install again"; }
check "installed again: php -m lists checkout_guard" sh -c "php -m | grep -qx checkout_guard"
echo 'checkout_guard.timeout_ms = 80' >> "$ini"
apt-get remove -y -q checkout-guard > /tmp/apt-remove2.log 2>&1 || { cat /tmp/apt-remove2.log; bad "apt-get remove (edited ini)"; }
check "edited ini, after apt-get remove: it stays in mods-available" grep -q 'timeout_ms = 80' "$ini"
left=$(inis | grep -v "^$ini$")
if [ -z "$left" ]; then ok "edited ini, after apt-get remove: enabled for no SAPI"; else bad "edited ini, after apt-get remove, enabled: $left"; fi
check "edited ini, after apt-get remove: php -m does not list checkout_guard" sh -c "! php -m | grep -qx checkout_guard"
apt-get purge -y -q checkout-guard > /tmp/apt-purge.log 2>&1 || { cat /tmp/apt-purge.log; bad "apt-get purge"; }
left=$(inis)
if [ -z "$left" ]; then ok "after apt-get purge: no checkout_guard ini under /etc/php"; else bad "after apt-get purge, left: $left"; fi
check "after apt-get purge: no phpenmod state left" sh -c "! find /var/lib/php/modules -name checkout_guard | grep -q ."
exit "$failed"
