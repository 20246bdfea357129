#!/usr/bin/env python3
"""A churn soak: does a server's memory stay flat while streams come and go? (not run by CI)

Starts a release `ds-server` in MODE on a temporary data directory, then runs ROUNDS rounds
in which 8 keep-alive clients each take STREAMS streams through a whole life: create with a
first message, five appends as an idempotent producer, a catch-up read, a fork, a read of
the fork, the fork's delete and the stream's delete. After every round it prints the
server's anonymous resident memory (`RssAnon`: heap and stacks, not the page cache) and, in
the disk modes, the data directory's size.

What must hold (else exit code 1):
- every answer is the one the protocol gives (201, 200 or 204; 404 after the deletes), and
  every request gets one (a reset connection or a timeout is a failure);
- no stream is left (`ds_streams` 0 in `/metrics`) and nothing stays charged
  (`ds_charged_bytes` 0);
- the anonymous memory of the second half of the rounds grows by less than 4 MB.

    python3 tests/campaigns/churn.py MODE ROUNDS STREAMS
    (MODE: memory, acid, file-durable or file-fast; e.g. `acid 10 150`, about 40 s;
    the server from target/release unless DS_SERVER_BIN says otherwise)
"""
import http.client
import os
import shutil
import sys
import tempfile
import threading

import campaign_server

PORT = int(os.environ.get("DS_CAMPAIGN_PORT", "4471"))
CLIENTS = 8
GROWTH_MAX_KB = 4096
BINARY = {"Content-Type": "application/octet-stream"}


def anon_kb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def dir_kb(path):
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks // 2
            except FileNotFoundError:
                pass
    return total


def one_life(connection, path, failures):
    steps = [("PUT", path, b"first", BINARY, (201,))]
    for seq in range(5):
        headers = dict(BINARY, **{"Producer-Id": "p", "Producer-Epoch": "0", "Producer-Seq": str(seq)})
        steps.append(("POST", path, b"y" * 300, headers, (200, 204)))
    steps += [("GET", path + "?offset=-1", None, {}, (200,)),
              ("PUT", path + "-fork", None, dict(BINARY, **{"Stream-Forked-From": path}), (201,)),
              ("GET", path + "-fork?offset=-1", None, {}, (200,)),
              ("DELETE", path + "-fork", None, {}, (204, 200)),
              ("DELETE", path, None, {}, (204, 200)),
              ("GET", path + "?offset=-1", None, {}, (404,))]
    for method, target, body, headers, wanted in steps:
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status not in wanted:
            failures.append(f"{method} {target}: {response.status}, wanted {wanted}")


def client(index, round_number, streams, failures):
    """One client's streams of a round. A request that fails (reset, timeout, a reply that is
    not HTTP) is a failure too: it ends this client's round, which the next one starts on a
    new connection."""
    connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    try:
        for i in range(streams):
            one_life(connection, f"/v1/stream/churn-{round_number}-{index}-{i}", failures)
    except (OSError, http.client.HTTPException) as error:
        failures.append(f"client {index}, round {round_number}: {type(error).__name__}: {error}")
    finally:
        connection.close()


def metric(name):
    _, body, _ = campaign_server.request(PORT, "GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return None


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    mode, rounds, streams = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    data_dir = tempfile.mkdtemp(prefix="ds-churn-")
    log = open(data_dir + ".log", "w")
    server = campaign_server.start(PORT, mode, data_dir, log)
    if server.poll() is not None:
        sys.exit(f"the server exited at start ({server.returncode})")
    failures, anon = [], []
    try:
        for round_number in range(rounds):
            threads = [threading.Thread(target=client, args=(i, round_number, streams, failures))
                       for i in range(CLIENTS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            anon.append(anon_kb(server.pid))
            disk = f", data {dir_kb(data_dir)} kB" if mode != "memory" else ""
            print(f"round {round_number}: anonymous {anon[-1]} kB{disk}", flush=True)
        for name in ("ds_streams", "ds_charged_bytes"):
            value = metric(name)
            if value != 0:
                failures.append(f"{name} is {value} with every stream deleted")
    finally:
        if campaign_server.stop(server) == "hung":
            failures.append("the server did not stop within 10 s of SIGINT")
        log.close()
        shutil.rmtree(data_dir, ignore_errors=True)
        os.remove(log.name)
    growth = anon[-1] - anon[len(anon) // 2] if len(anon) > 1 else 0
    if growth >= GROWTH_MAX_KB:
        failures.append(f"anonymous memory grew {growth} kB over the second half of the rounds")
    for failure in failures[:20]:
        print("FAIL:", failure)
    print(f"{mode}: {rounds} rounds of {CLIENTS * streams} streams; second half grew {growth} kB;",
          "ok" if not failures else f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
