#!/usr/bin/env bash
# Port checks shared by the comparison scripts (sourced, not run).

# Refuses to measure a stranger: a server left running on one of the ports would answer in
# place of the one the script starts (one that fails to bind exits at once).
ports_free_or_exit() {
  local port
  for port in "$@"; do
    if curl -s -o /dev/null "http://127.0.0.1:$port/"; then
      echo "something already answers on port $port: stop it first (ss -ltnp | grep :$port)" >&2
      exit 2
    fi
  done
}

# Waits up to 30 s for each port to answer HTTP.
await_ports() {
  local port
  for port in "$@"; do
    for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
  done
}
