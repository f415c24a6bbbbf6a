#!/usr/bin/env bash
# Puts the command line of a developer's build on the PATH: a symbolic link BIN_DIR/checkout-guard
# to the checkout's target/release/checkout-guard (cargo build --release), so a rebuild is
# picked up without running this again.
#
#   scripts/install-cli.sh [BIN_DIR]
#
# BIN_DIR: default /usr/local/bin as root, else ~/.local/bin (made if missing; Debian's
# ~/.profile puts it on the PATH at the next login when it exists). The build is
# $CARGO_TARGET_DIR/release/checkout-guard when CARGO_TARGET_DIR is set. A file at
# BIN_DIR/checkout-guard that is not such a link is left alone (an error); the Debian
# package's /usr/bin/checkout-guard is another directory, and whichever comes first on
# the PATH wins. Prints the link and what `checkout-guard --version` answers through it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
die() { echo "scripts/install-cli.sh: $*" >&2; exit 1; }

cli="${CARGO_TARGET_DIR:-$root/target}/release/checkout-guard"
case "$cli" in /*) ;; *) cli="$root/$cli" ;; esac
[ -x "$cli" ] || die "no build at $cli: run cargo build --release first"
if [ $# -gt 0 ]; then
  bin=$1
elif [ "$(id -u)" -eq 0 ]; then
  bin=/usr/local/bin
else
  bin="$HOME/.local/bin"
fi
mkdir -p "$bin"
bin=$(cd "$bin" && pwd)
link="$bin/checkout-guard"
if [ -e "$link" ] || [ -L "$link" ]; then
  [ -L "$link" ] || die "$link exists and is not a link (left alone): remove it first"
fi
ln -sfn "$cli" "$link"
version=$("$link" --version) || die "$link does not run"
echo "$link -> $cli ($version)"
case ":$PATH:" in
  *":$bin:"*)
    found=$(command -v checkout-guard || true)
    [ "$found" = "$link" ] || echo "note: checkout-guard on the PATH is $found, which comes before $bin" >&2
    ;;
  *) echo "note: $bin is not on the PATH: export PATH=\"$bin:\$PATH\" (e.g. in ~/.profile)" >&2 ;;
esac
