#!/usr/bin/env bash
# The example checkout (php/examples/checkout) on Apache's event MPM with the ZTS PHP as
# its module (scripts/apache.sh) against php-fpm + nginx (scripts/stack.sh, Debian's PHP
# 8.2), on this machine: N requests of GET /checkout.php (ab, C at a time, T seconds at
# most each) to each, the same Valkey, the same mock provider behind its nginx rate limits
# (start_checkout), the limiter on, OPcache on in both. Apache runs 2 children of 8 threads
# (16 request threads), php-fpm 16 workers.
#
#   scripts/bench-apache.sh [N] [C]    # default 2000 requests, 16 at a time
#
# scripts/test.sh runs it last (CI: the numbers are in its log); it fails when PHP under
# Apache logged an error or a server paid no purchase at all.
# Prints "server requests/s p95_ms non-2xx" lines; ab's own output is in
# .run/bench-apache/{apache,fpm}.ab. Non-2xx answers are the limiter's 503s and the
# provider's refusals (the payment API's 50/s), the same for both.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$CG_ROOT/scripts/chroot.sh"
source "$CG_ROOT/scripts/zts.sh"
cd "$CG_ROOT"
n=${1:-2000} c=${2:-16}
[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 100000 ] ||
  { echo "bench-apache.sh: N must be a whole number from 1 to 100000, got '$n'" >&2; exit 2; }
[[ "$c" =~ ^[0-9]+$ ]] && [ "$c" -ge 1 ] && [ "$c" -le 256 ] && [ "$c" -le "$n" ] ||
  { echo "bench-apache.sh: C must be a whole number from 1 to 256 and at most N, got '$c'" >&2; exit 2; }
case ":$PATH:" in *":$HOME/.cargo/bin:"*) ;; *) export PATH="$HOME/.cargo/bin:$PATH" ;; esac

begin_run bench-apache short
module=$(cg_zts_apache)
ext=$(cg_zts_build "$out/ext")
current="$out/fpm"
# Apache's run directory under /tmp: its children (www-data when started by root) write
# there, and a checkout (so .run/) may be where www-data cannot reach (under /root).
arun=$(mktemp -d /tmp/cg-bench-apache.XXXXXX)
trap 'bash scripts/apache.sh stop "$arun"; stop_current; rm -rf "$arun"' EXIT
trap 'bash scripts/apache.sh stop "$arun"; stop_current; rm -rf "$arun"; exit 130' INT TERM
fpm_port=$(FPM_WORKERS=16 start_checkout "$out/fpm" on "")
valkey="redis://127.0.0.1:$(sed -n 's/^valkey=//p' "$out/fpm/ports")"
provider="http://127.0.0.1:$(sed -n 's/^provider=//p' "$out/fpm/ports")"
mkdir -p "$arun"
apache_port=$(CG_EXT=$ext APACHE_PHP_MODULE=$module APACHE_CHILDREN=2 APACHE_THREADS=8 \
  APACHE_ENV="CHECKOUT_LIMITER=on
CHECKOUT_HOT_SHOPS=
CHECKOUT_PROVIDER_URL=$provider" bash scripts/apache.sh start "$arun" php/examples/checkout "$valkey")

path="/checkout.php?shop=bench&item=item-1&channel=card"
printf '%-8s %10s %8s %8s\n' server requests/s p95_ms non-2xx
for s in apache fpm; do
  port=$apache_port; [ "$s" = apache ] || port=$fpm_port
  # Warm-up (OPcache, connections), then the measured run; at most 120 s each.
  timeout 60 ab -q -n "$((c * 4))" -c "$c" -s 10 "http://127.0.0.1:$port$path" > /dev/null 2>&1 || true
  timeout 120 ab -n "$n" -c "$c" -s 10 "http://127.0.0.1:$port$path" > "$out/$s.ab" 2>&1 ||
    { tail -5 "$out/$s.ab" >&2; echo "bench-apache.sh: ab against $s failed" >&2; exit 1; }
  awk -v s="$s" '/^Requests per second:/ { rps = $4 } / 95% / { p95 = $2 } /^Non-2xx responses:/ { bad = $3 }
    END { printf "%-8s %10.0f %8d %8d\n", s, rps, p95, bad }' "$out/$s.ab"
  # The checkout ran: some purchases were paid (200), not only refusals.
  bad=$(awk '/^Non-2xx responses:/ { print $3 }' "$out/$s.ab")
  [ "${bad:-0}" -lt "$n" ] || { echo "bench-apache.sh: $s answered no request with 200 ($out/$s.ab)" >&2; exit 1; }
done
if [ -n "$(php_errors "$arun/php-errors.log")" ] || grep -Eq 'PHP (Startup|Fatal|Warning|Notice|Deprecated|Parse)' "$arun/error.log"; then
  echo "bench-apache.sh: PHP errors under Apache:" >&2; php_errors "$arun/php-errors.log" >&2
  grep -E 'PHP (Startup|Fatal|Warning|Notice|Deprecated|Parse)' "$arun/error.log" >&2 || true; exit 1
fi
