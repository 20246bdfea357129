#!/usr/bin/env bash
# Two ds-server builds side by side in cluster mode: for each, a fresh one-member etcd,
# three acid nodes and the shipped HAProxy configuration (backend-directory.cfg, bearer
# tokens checked), then appends straight to the owner, through a node that forwards them to
# the owner, and through the proxy, and creations on one node. Builds take turns (A, B, A,
# B, …); etcd, HAProxy and the nodes run on CPU 0, ds-bench on CPU 1. Everything it starts
# is stopped by PID and its data removed.
# Usage: bench/compare-cluster.sh A_SERVER_BINARY B_SERVER_BINARY [rounds] [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
a_bin=$1
b_bin=$2
rounds=${3:-2}
seconds=${4:-5}
source bench/ports.sh
ports_free_or_exit 4441 4442 4443 4440 2389 2390
cargo build --release --quiet --bin ds-bench
bench=./target/release/ds-bench
keys=deploy/test-keys

b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
token() {
  local now header payload
  now=$(date +%s)
  header=$(printf '%s' '{"alg":"RS256","typ":"JWT","kid":"ds-test-only-1"}' | b64url)
  payload=$(printf '{"iss":"https://issuer.ds.test","aud":"ds-test","sub":"bench","iat":%d,"exp":%d}' \
    "$now" $((now + 3600)) | b64url)
  printf '%s.%s.%s' "$header" "$payload" \
    "$(printf '%s.%s' "$header" "$payload" | openssl dgst -sha256 -sign "$keys/test-only-jwt-signing-key.pem" | b64url)"
}
bearer=$(token)

pids=()
dirs=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for dir in "${dirs[@]}"; do rm -rf "$dir"; done
  pids=()
  dirs=()
}
trap stop_all EXIT

start_cluster() {
  local bin=$1 dir
  dir=$(mktemp -d /tmp/ds-cluster-bench.XXXXXX)
  dirs+=("$dir")
  taskset -c 0 etcd --name bench --data-dir "$dir/etcd" \
    --listen-client-urls http://127.0.0.1:2389 --advertise-client-urls http://127.0.0.1:2389 \
    --listen-peer-urls http://127.0.0.1:2390 --initial-advertise-peer-urls http://127.0.0.1:2390 \
    --initial-cluster bench=http://127.0.0.1:2390 >/dev/null 2>&1 &
  pids+=($!)
  await_ports 2389
  for node in 1 2 3; do
    env RUST_LOG=warn DS_SERVER__HOST=127.0.0.1 DS_SERVER__PORT=444$node DS_STORAGE__MODE=acid \
      DS_LIMITS__MAX_MEMORY_BYTES=20000000000 \
      DS_STORAGE__DATA_DIR="$dir/node$node" DS_CLUSTER__ETCD_ENDPOINTS=http://127.0.0.1:2389 \
      DS_CLUSTER__NODE_ID="node-$node" DS_CLUSTER__ADVERTISE_URL="http://127.0.0.1:444$node" \
      taskset -c 0 "$bin" >"$dir/node$node.log" 2>&1 &
    pids+=($!)
  done
  await_ports 4441 4442 4443
  env DS_PROXY_BIND=127.0.0.1:4440 DS_JWT_PUBLIC_KEY="$keys/test-only-jwt-public-key.pem" \
    DS_JWT_ISSUER=https://issuer.ds.test DS_JWT_AUDIENCE=ds-test \
    DS_NODE1=127.0.0.1:4441 DS_NODE2=127.0.0.1:4442 DS_NODE3=127.0.0.1:4443 DS_NODE4=127.0.0.1:4444 \
    taskset -c 0 haproxy -f deploy/haproxy/haproxy.cfg -f deploy/haproxy/backend-directory.cfg >"$dir/haproxy.log" 2>&1 &
  pids+=($!)
  await_ports 4440
  sleep 3 # the proxy's health checks (rise 2, every second) put the nodes in its ring
}

# The throughput and p99 lines of a ds-bench table, on one line.
figures() { grep -E 'per_sec|p99' | tr -s ' ' | paste -sd' '; }

measure() {
  local label=$1 round=$2 prefix="/v1/stream/r$2-$1-"
  local run=(taskset -c 1 "$bench")
  local timing=(--duration "$seconds" --warmup 1 --quiet)
  printf '%s round %s owner:     ' "$label" "$round"
  "${run[@]}" append --url http://127.0.0.1:4441 "${timing[@]}" --connections 64 --streams 100 --bytes 256 --prefix "${prefix}o-" | figures
  printf '%s round %s non-owner: ' "$label" "$round"
  "${run[@]}" append --url http://127.0.0.1:4442 --create-url http://127.0.0.1:4441 "${timing[@]}" \
    --connections 64 --streams 100 --bytes 256 --prefix "${prefix}f-" | figures
  printf '%s round %s proxy:     ' "$label" "$round"
  "${run[@]}" append --url http://127.0.0.1:4440 --bearer "$bearer" "${timing[@]}" \
    --connections 64 --streams 100 --bytes 256 --prefix "${prefix}p-" | figures
  printf '%s round %s creations: ' "$label" "$round"
  "${run[@]}" streams --url http://127.0.0.1:4441 --count 20000 --connections 16 --quiet --warmup 0 \
    --prefix "${prefix}c-" | figures
}

for round in $(seq 1 "$rounds"); do
  for side in A B; do
    bin=$a_bin
    [ "$side" = B ] && bin=$b_bin
    start_cluster "$bin"
    measure "$side" "$round"
    stop_all
  done
done
