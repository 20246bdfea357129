#!/usr/bin/env bash
# ds-server (A, port 4441) against electric's durable-streams 0.1.5 (B, port 4442), one
# ds-bench scenario run in turns (A, B, A, B, …) and reported as medians with the ratio A/B
# (and the lowest and highest ratio of one round, so the noise shows):
# the side-by-side measurement the performance issues ask for. Both servers are pinned to
# CPU 0 (only the one under load is busy), ds-bench to CPU 1; the access log is off; both
# data directories are temporary and removed, both servers stopped by their own PIDs.
#
# Usage: bench/compare-peer.sh MODE PEER_MODE SCENARIO [ds-bench options …]
#   MODE       ds's storage mode: memory, acid, file-fast, file-durable
#   PEER_MODE  electric's --durability: memory or wal
#   env ROUNDS (3), SECONDS_PER_RUN (5), PEER (path of electric's durable-streams-server;
#   default: on PATH, else ~/.cargo/bin), DS_ENV (extra VAR=value settings for ds).
# Examples (the figures in docs/performance/README.md):
#   bench/compare-peer.sh acid wal read --connections 16 --fill-bytes 16777216
#   bench/compare-peer.sh memory memory read --connections 16 --fill-bytes 16777216
#   SECONDS_PER_RUN=10 bench/compare-peer.sh acid wal append --connections 64 --streams 100 --bytes 256
#   SECONDS_PER_RUN=10 ROUNDS=2 bench/compare-peer.sh acid wal fanout --subscribers 1000 --rate 50
# The peer: cargo install durable-streams --version 0.1.5 (it mounts streams at the root).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ]; then
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
mode=$1 peer_mode=$2
shift 2
peer=${PEER:-$(command -v durable-streams-server || echo "$HOME/.cargo/bin/durable-streams-server")}
if [ ! -x "$peer" ]; then
  echo "electric's server not found at $peer: cargo install durable-streams --version 0.1.5" >&2
  exit 2
fi
cargo build --release --quiet --bin ds-server --bin ds-bench
source bench/ports.sh
ports_free_or_exit 4441 4442
ds_data=$(mktemp -d /tmp/ds-compare-peer-a.XXXXXX)
peer_data=$(mktemp -d /tmp/ds-compare-peer-b.XXXXXX)
# The catch-up fill is larger than the default stream limit (10 MiB), and the memory budget
# must not be what stops a long append run.
read -r -a extra <<<"${DS_ENV:-}"
env DS_SERVER__HOST=127.0.0.1 DS_SERVER__PORT=4441 RUST_LOG=warn \
  DS_LIMITS__MAX_MEMORY_BYTES=8000000000 DS_LIMITS__MAX_STREAM_BYTES=100000000 \
  DS_STORAGE__MODE="$mode" DS_STORAGE__DATA_DIR="$ds_data" "${extra[@]}" \
  taskset -c 0 ./target/release/ds-server &
ds=$!
taskset -c 0 "$peer" --port 4442 --durability "$peer_mode" --data-dir "$peer_data" >/dev/null 2>&1 &
electric=$!
trap 'kill -INT $ds $electric 2>/dev/null || true; wait $ds $electric 2>/dev/null || true; rm -rf "$ds_data" "$peer_data"' EXIT
await_ports 4441 4442
for pid in $ds $electric; do
  kill -0 "$pid" 2>/dev/null || { echo "a server did not start (pid $pid)" >&2; exit 2; }
done
taskset -c 1 ./target/release/ds-bench compare --a http://127.0.0.1:4441 --b http://127.0.0.1:4442 \
  --b-prefix / --rounds "${ROUNDS:-3}" "$@" --duration "${SECONDS_PER_RUN:-5}" --warmup 1 --quiet
