"""A release `ds-server` for the campaigns: started on a port and a data directory, asked over
HTTP, stopped by its own PID. Shared by `damage.py` and `churn.py`.

The server is target/release/ds-server unless DS_SERVER_BIN says otherwise.
"""
import http.client
import os
import signal
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.environ.get("DS_SERVER_BIN", os.path.join(ROOT, "target/release/ds-server"))


def start(port, mode, data_dir, log, **settings):
    """Starts the server in `mode` (with extra `DS_*` settings) and waits up to 10 s for
    `/healthz`; returns the process, which the caller checks with `poll()`."""
    env = dict(os.environ, DS_SERVER__HOST="127.0.0.1", DS_SERVER__PORT=str(port), RUST_LOG="warn",
               DS_STORAGE__MODE=mode, DS_STORAGE__DATA_DIR=data_dir, **settings)
    server = subprocess.Popen([SERVER], env=env, stdout=log, stderr=log)
    for _ in range(200):
        if server.poll() is not None:
            return server
        try:
            request(port, "GET", "/healthz")
            return server
        except OSError:
            time.sleep(0.05)
    return server


def stop(server):
    """SIGINT, then SIGKILL after 10 s; returns the exit code, or "hung"."""
    if server.poll() is None:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
            return "hung"
    return server.returncode


def request(port, method, path, body=None, headers=None):
    """One request on a new connection: (status, body, response)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    return response.status, response.read(), response
