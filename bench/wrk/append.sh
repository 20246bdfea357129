#!/usr/bin/env bash
# Append throughput, as the issues measure it: server pinned to CPU 0, wrk to CPU 1,
# 64 keep-alive connections appending 256-byte bodies to 100 streams.
# Usage: bench/wrk/append.sh [seconds] [extra DS_* assignments...]
#   e.g. bench/wrk/append.sh 10 DS_STORAGE__MODE=acid
# Disk modes write to a fresh data directory (DATA_DIR, default /tmp/ds-bench-data).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-10}; shift || true
port=${PORT:-4437}
data_dir=${DATA_DIR:-/tmp/ds-bench-data}
rm -rf "$data_dir"
cargo build --release --quiet --bin ds-server
env DS_SERVER__HOST=127.0.0.1 DS_SERVER__PORT="$port" RUST_LOG=warn,ds_server=info \
  DS_STORAGE__DATA_DIR="$data_dir" DS_LIMITS__MAX_MEMORY_BYTES=20000000000 "$@" \
  taskset -c 0 ./target/release/ds-server 2>/tmp/ds-bench-server.log &
server=$!
trap 'kill -INT $server 2>/dev/null; wait $server 2>/dev/null; tail -1 /tmp/ds-bench-server.log; rm -rf "$data_dir"' EXIT
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
for i in $(seq 0 99); do
  curl -sf -o /dev/null -X PUT -H 'content-type: application/octet-stream' "http://127.0.0.1:$port/v1/stream/bench-$i"
done
taskset -c 1 wrk -t1 -c64 -d"${seconds}s" -s bench/wrk/append.lua "http://127.0.0.1:$port"
