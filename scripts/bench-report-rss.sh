#!/usr/bin/env bash
# Peak RSS of `checkout-guard report` over one generated day (in .run/bench-report/,
# 2026-11-30 UTC) for a day, a month and a year window, and the size of each HTML file.
# BIN=path/to/checkout-guard compares another build (e.g. one from before the charts'
# buckets followed the window).
#
#   scripts/bench-report-rss.sh short   # 100,000 events, ~23 MB of JSONL (the default)
#   scripts/bench-report-rss.sh full    # 1 million events, ~230 MB (the documented run)
#   EVENTS=N scripts/bench-report-rss.sh  # another size
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
mode=$(run_mode bench-report-rss.sh "${1:-}") || exit 2
export PATH="$HOME/.cargo/bin:$PATH"
[ -n "${BIN:-}" ] || { cargo build --release --quiet -p checkout-guard; BIN=target/release/checkout-guard; }
case "$mode" in
  short) EVENTS=${EVENTS:-100000} ;;
  full) EVENTS=${EVENTS:-1000000} ;;
esac
dir="$CG_ROOT/.run/bench-report"; mkdir -p "$dir"
file="$dir/day-$EVENTS.jsonl"
[ -s "$file" ] || "$BIN" generate --events "$EVENTS" --seed 1 -o "$file" 2>/dev/null
printf '%-6s %-46s %12s %8s %12s\n' window "--window" "peak RSS" seconds "HTML bytes"
for w in "day 2026-11-30T00:00:00Z..2026-12-01T00:00:00Z" \
         "month 2026-11-15T00:00:00Z..2026-12-16T00:00:00Z" \
         "year 2026-06-01T00:00:00Z..2027-06-01T00:00:00Z"; do
  set -- $w
  rm -f "$dir/$1.html"
  # Capped at 8 GB of address space: a build whose memory follows the window fails here.
  out=$( (ulimit -v 8000000; /usr/bin/time -f '%M %e %x' "$BIN" report "$file" --window "$2" -o "$dir/$1.html") 2>&1) || true
  read -r kb secs rc <<< "$(tail -1 <<< "$out")"
  if [ "$rc" = 0 ] && [ -s "$dir/$1.html" ]; then size=$(stat -c %s "$dir/$1.html"); else size="failed: $(head -1 <<< "$out")"; fi
  printf '%-6s %-46s %9s MB %8s %12s\n' "$1" "$2" "$((kb / 1024))" "$secs" "$size"
done
