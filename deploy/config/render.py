"""The one source of the checkout's nginx, php-fpm and checkout_guard configuration: the
templates beside this file, rendered for the local stack (scripts/stack.sh) and for
Kubernetes (the ConfigMaps of deploy/k8s/checkout.yaml). Only what differs on purpose is a
variable: addresses and ports, paths, pool size, recycling, the events sink, the flow
control's limit. Standard library only.

  python3 deploy/config/render.py local RUN_DIR DOCROOT VALKEY_URL EXTENSION \\
      FPM_PORT HTTP_PORT STATUS_PORT OPS_PORT [PROVIDER_PORT PROVIDER_HTTP_PORT]
      writes RUN_DIR/php-fpm.conf, RUN_DIR/nginx.conf, RUN_DIR/conf.d/*.ini; knobs from the
      environment as scripts/stack.sh documents them (FPM_WORKERS, FPM_MAX_REQUESTS,
      FLOW_LIMIT, FPM_ENV, CHECKOUT_INI, ZONEA_RATE, ZONEA_BURST, PAYMENT_RATE, PAYMENT_BURST,
      PROVIDER_GLOBAL_RATE, PROVIDER_GLOBAL_BURST, PROVIDER_ENDPOINT_RATE, PROVIDER_ENDPOINT_BURST; and
      OPCACHE_BUILT_IN=1 from scripts/stack.sh where OPcache is part of PHP)
  python3 deploy/config/render.py k8s [--write]
      prints the ConfigMaps' files, or writes them into deploy/k8s/checkout.yaml

Templates: {{name}} is replaced by the value. A placeholder alone on its line takes the
indentation of the placeholder for every line of its value, and an empty value removes
the line. Every placeholder must have a value, and every value a placeholder.
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "..", "k8s", "checkout.yaml")
PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}")

# The Kubernetes values: one pod, php-fpm and nginx side by side (see deploy/k8s/checkout.yaml).
K8S = {
    "workers": 8,
    "max_requests": 10000,
    "flow_limit": 8,
}


def render(template: str, **values) -> str:
    """The template (a file name under deploy/config, or text) with its placeholders filled."""
    path = os.path.join(HERE, template)
    text = open(path).read() if os.path.exists(path) else template
    wanted = set(PLACEHOLDER.findall(text))
    given = set(values)
    if wanted != given:
        raise KeyError(f"{template}: missing {sorted(wanted - given)}, unused {sorted(given - wanted)}")
    out = []
    for line in text.splitlines():
        alone = re.fullmatch(r"(\s*)\{\{([a-z_]+)\}\}\s*", line)
        if alone:
            value = str(values[alone.group(2)])
            out += [alone.group(1) + v if v else v for v in value.splitlines()]
        else:
            out.append(PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), line))
    return "\n".join(out) + "\n"


def flow_control(limit: int) -> str:
    if limit <= 0:
        return ""
    return f"limit_conn inflight {limit};\nlimit_conn_status 503;\nerror_page 503 = @shed;"


def nginx_rate(value: str, name: str = "a provider rate") -> str:
    """A limit_req rate: a whole number of requests a second ('25' -> '25r/s'), or nginx's
    own form with its unit ('25r/s', '1r/m': the smoke run's limits that do not refill)."""
    if re.fullmatch(r"[1-9][0-9]*", value):
        return value + "r/s"
    if re.fullmatch(r"[1-9][0-9]*r/[sm]", value):
        return value
    raise ValueError(f"{name} must be a whole number of requests a second, or NNr/s or NNr/m, got '{value}'")


def fpm_env_lines(spec: str) -> str:
    """FPM_ENV's KEY=VALUE lines as php-fpm env[KEY] lines (lines without both are skipped)."""
    lines = []
    for line in spec.splitlines():
        key, _, value = line.partition("=")
        if key and value:
            lines.append(f'env[{key}] = "{value}"')
    return "\n".join(lines)


def k8s_files() -> dict:
    """The ConfigMaps' data: {file name: content}."""
    return {
        "30-checkout_guard.ini": render("checkout_guard.ini.tmpl", extension="checkout_guard.so",
                                        url="${CHECKOUT_GUARD_URL}", sinks="newrelic", events="", extra=""),
        "zz-checkout-pool.conf": render("php-fpm-pool.conf.tmpl", pool="www", fpm_listen="127.0.0.1:9000",
                                        workers=K8S["workers"], max_requests=K8S["max_requests"],
                                        status_listen="127.0.0.1:9001", extra=""),
        "default.conf": render("nginx-checkout.conf.tmpl", http_listen="8080", docroot="/var/www/checkout",
                               flow_control=flow_control(K8S["flow_limit"]), fastcgi_params="fastcgi_params",
                               fpm_address="127.0.0.1:9000", ops_listen="8081", status_address="127.0.0.1:9001"),
    }


def opcache_ini(built_in: bool) -> str:
    """The local stack's OPcache settings. From PHP 8.5 OPcache is part of PHP: loading it
    as a shared object fails (a warning at every php-fpm start), so the line goes."""
    text = open(os.path.join(HERE, "local", "10-opcache.ini")).read()
    if built_in:
        text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("zend_extension="))
    return text


def local_files(run: str, docroot: str, valkey_url: str, extension: str, fpm_port: int, http_port: int,
                status_port: int, ops_port: int, provider_port: str = "", provider_http_port: str = "",
                env: dict | None = None) -> dict:
    """The local stack's files, {path relative to RUN_DIR: content}."""
    env = os.environ if env is None else env
    pool = render("php-fpm-pool.conf.tmpl", pool="checkout", fpm_listen=f"127.0.0.1:{fpm_port}",
                  workers=env.get("FPM_WORKERS") or 4, max_requests=env.get("FPM_MAX_REQUESTS") or 0,
                  status_listen=f"127.0.0.1:{status_port}",
                  extra="\n".join(filter(None, [
                      fpm_env_lines(env.get("FPM_ENV", "")),
                      "catch_workers_output = yes",
                      f"php_admin_value[error_log] = {run}/php-errors.log",
                      "php_admin_flag[log_errors] = on"])))
    checkout = render("nginx-checkout.conf.tmpl", http_listen=f"127.0.0.1:{http_port}", docroot=docroot,
                      flow_control=flow_control(int(env.get("FLOW_LIMIT") or 0)),
                      fastcgi_params="/etc/nginx/fastcgi_params", fpm_address=f"127.0.0.1:{fpm_port}",
                      ops_listen=f"127.0.0.1:{ops_port}", status_address=f"127.0.0.1:{status_port}")
    provider = ""
    if provider_port:
        provider = render("local/nginx-provider.conf.tmpl", run=run, provider_port=provider_port,
                          provider_http_port=provider_http_port,
                          zonea_rate=env.get("ZONEA_RATE") or 200, zonea_burst=env.get("ZONEA_BURST") or 100,
                          payment_rate=env.get("PAYMENT_RATE") or 50, payment_burst=env.get("PAYMENT_BURST") or 10,
                          ep_global_rate=nginx_rate(env.get("PROVIDER_GLOBAL_RATE") or "50", "PROVIDER_GLOBAL_RATE"),
                          ep_global_burst=env.get("PROVIDER_GLOBAL_BURST") or 25,
                          ep_rate=nginx_rate(env.get("PROVIDER_ENDPOINT_RATE") or "25", "PROVIDER_ENDPOINT_RATE"),
                          ep_burst=env.get("PROVIDER_ENDPOINT_BURST") or 5)
    return {
        "conf.d/20-checkout_guard.ini": render(
            "checkout_guard.ini.tmpl", extension=extension, url=valkey_url, sinks="jsonl",
            events=f"checkout_guard.events.jsonl_path={run}/events.jsonl", extra=env.get("CHECKOUT_INI", "")),
        "conf.d/10-opcache.ini": opcache_ini(env.get("OPCACHE_BUILT_IN") == "1"),
        "php-fpm.conf": render("local/php-fpm.conf.tmpl", run=run, pool=pool),
        "nginx.conf": render("local/nginx.conf.tmpl", run=run, checkout=checkout, provider=provider),
    }


def write_k8s(manifest: str = MANIFEST) -> bool:
    """Writes k8s_files() into the manifest's ConfigMaps (each `  NAME: |` block scalar);
    True when something changed."""
    lines = open(manifest).read().splitlines()
    for name, content in k8s_files().items():
        start = lines.index(f"  {name}: |") + 1
        end = start
        while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
            end += 1
        lines[start:end] = ["    " + line if line else "" for line in content.rstrip("\n").splitlines()]
    text = "\n".join(lines) + "\n"
    changed = text != open(manifest).read()
    if changed:
        open(manifest, "w").write(text)
    return changed


def main(argv: list) -> int:
    if argv[:1] == ["k8s"]:
        if argv[1:] == ["--write"]:
            print("deploy/k8s/checkout.yaml " + ("updated" if write_k8s() else "already up to date"))
        else:
            for name, content in k8s_files().items():
                print(f"# {name}\n{content}")
        return 0
    if argv[:1] == ["local"] and len(argv) in (9, 11):
        run = argv[1]
        for rel, content in local_files(*argv[1:]).items():
            path = os.path.join(run, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(content)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
