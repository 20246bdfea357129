#!/usr/bin/env bash
# ds-server in memory mode (A, port 4437) against acid mode (B, port 4438), every ds-bench
# scenario run in turns (A, B, A, B, A, B) and reported as medians with the ratio A/B.
# Both servers are pinned to CPU 0 (only the one under load is busy), ds-bench to CPU 1.
# Usage: bench/compare-modes.sh [seconds per run] [output directory]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
out=${2:-/tmp/ds-compare}
source bench/ports.sh
ports_free_or_exit 4437 4438
data=$(mktemp -d /tmp/ds-compare-acid.XXXXXX)
mkdir -p "$out"
cargo build --release --quiet --bin ds-server --bin ds-bench
common=(DS_SERVER__HOST=127.0.0.1 RUST_LOG=warn DS_LIMITS__MAX_MEMORY_BYTES=20000000000
        DS_SERVER__LONG_POLL_TIMEOUT_SECS=5)
env "${common[@]}" DS_SERVER__PORT=4437 taskset -c 0 ./target/release/ds-server &
memory=$!
env "${common[@]}" DS_SERVER__PORT=4438 DS_STORAGE__MODE=acid DS_STORAGE__DATA_DIR="$data" \
  taskset -c 0 ./target/release/ds-server &
acid=$!
trap 'kill -INT $memory $acid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$data"' EXIT
await_ports 4437 4438
run() {
  local name=$1; shift
  taskset -c 1 ./target/release/ds-bench compare --a http://127.0.0.1:4437 --b http://127.0.0.1:4438 \
    --rounds 3 "$@" --duration "$seconds" --warmup 1 --quiet --json "$out/$name.json" | tee "$out/$name.txt"
}
run healthz healthz --connections 64
run append append --connections 64 --streams 100 --bytes 256
run append-producer append --connections 64 --streams 100 --bytes 256 --producer
run read read --connections 8 --fill-bytes 8388608
run fanout fanout --subscribers 1000 --rate 50
run longpoll longpoll --readers 100 --rate 50
run mixed mixed --writers 16 --catchup-readers 8 --live-readers 64 --streams 32
run streams streams --count 100000 --connections 64
