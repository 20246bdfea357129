#!/usr/bin/env bash
# Recovery time of acid mode over a log of about 1 GiB.
#
# Fills 100 streams with 64 KiB appends until the log holds ~1 GiB, kills the server with
# SIGKILL, and times two restarts: the normal one (from the newest checkpoint, replaying
# only what follows it) and one with the checkpoints removed, which replays the whole log.
# Usage: bench/recovery.sh [data dir] (default /tmp/ds-recovery; it is emptied first)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/ds-recovery}
port=${PORT:-4437}
rm -rf "$dir"
cargo build --release --quiet --bin ds-server
export DS_SERVER__HOST=127.0.0.1 DS_SERVER__PORT="$port" DS_STORAGE__MODE=acid DS_STORAGE__DATA_DIR="$dir"
export DS_LIMITS__MAX_MEMORY_BYTES=4000000000 DS_LIMITS__MAX_STREAM_BYTES=16000000 RUST_LOG=info,ds::access=off

# Starts the server; sets $server (pid) and $took (seconds until it answered /healthz).
start_server() {
  local began=$(date +%s.%N)
  ./target/release/ds-server >/dev/null 2>>"$dir.log" &
  server=$!
  for _ in $(seq 3000); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.01; done
  took=$(echo "$(date +%s.%N) - $began" | bc)
}

start_server
for i in $(seq 0 99); do
  curl -sf -o /dev/null -X PUT -H 'content-type: application/octet-stream' "http://127.0.0.1:$port/v1/stream/bench-$i"
done
BODY_BYTES=65536 wrk -t1 -c16 -d20s -s bench/wrk/append.lua "http://127.0.0.1:$port" >/dev/null || true
kill -9 "$server"; wait "$server" 2>/dev/null || true
echo "log on disk: $(du -sh --apparent-size "$dir" | cut -f1) in $(find "$dir" -name '*.wal' | wc -l) segments"
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
start_server; echo "restart after kill -9 (from checkpoints): $took s"
grep 'recovered' "$dir.log" | tail -1
kill -INT "$server"; wait "$server" 2>/dev/null || true
find "$dir" -name 'checkpoint*' -delete
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
start_server; echo "restart replaying the whole log (no checkpoints): $took s"
grep 'recovered' "$dir.log" | tail -1
kill -INT "$server"; wait "$server" 2>/dev/null || true
