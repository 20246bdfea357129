#!/usr/bin/env python3
"""A random damage campaign against a stopped data directory (not run by CI).

Each iteration writes a data directory through a real `ds-server` (30 streams, plain and
JSON, with closes, forks and deletes), remembers what every acknowledged write left, stops
the server, damages one to three random files (flipped bits, a zeroed range, a truncation,
garbage, a deleted file), starts the server again and reads every stream from the start,
following `Stream-Next-Offset`; then runs every `ds-tool` command on the directory.

What must never happen (reported as DEFECT, exit code 1):
- bytes served that are not a prefix of what was acknowledged for that stream;
- a panic in the server or in ds-tool, a ds-tool exit code other than 0, 1 or 2;
- a 5xx other than 500 (damage), 503 or 507, or a server that does not answer.

What the storage modes cannot tell apart from a crash (reported as known limits): damage that
looks like a torn write at the very end of a log or stream file (a truncation, zeros to the
end) is cut as one, so the stream reads as whole but shorter (in the file modes, when that
end was a stream's delete record, the deleted stream is back); a stream file (file modes) or
every trace of a stream (acid: its segment and its shard's checkpoints) lost makes it 404;
a damaged or missing MANIFEST and MANIFEST-COPY both refuse the start. See the README's "Damage" section.
The file modes after a clean stop (unless the saved file ends, `clean-ends/`, were damaged
too) tell them apart: a shorter stream or a deleted one back is then a DEFECT, and so is a
lost stream that answers 404 (it keeps its name as a damaged stream: 500).

    python3 tests/campaigns/damage.py MODE ITERATIONS SEED
    (MODE: acid, file-durable or file-fast; binaries from target/release unless
    DS_SERVER_BIN / DS_TOOL_BIN say otherwise; DS_CAMPAIGN_STOP=kill ends the writing
    server with SIGKILL instead of a clean stop, so recovery replays what it wrote)
"""
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import campaign_server
from campaign_server import stop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.environ.get("DS_TOOL_BIN", os.path.join(ROOT, "target/release/ds-tool"))
PORT = int(os.environ.get("DS_CAMPAIGN_PORT", "4470"))
STREAMS = 30


def start(mode, data_dir, log):
    return campaign_server.start(PORT, mode, data_dir, log, DS_STORAGE__ACID_SHARD_COUNT="4",
                                 DS_STORAGE__SEGMENT_BYTES="1048576", DS_LIMITS__MAX_APPEND_BYTES="65536")


def request(method, path, body=None, headers=None):
    return campaign_server.request(PORT, method, path, body, headers)


def is_json(name):
    return int(name[1:]) % 3 == 0


def fill(rnd, mode, data_dir):
    """Writes the streams; returns what each holds: ('json', [messages]), ('bin', bytes) or 'deleted'."""
    log = open(os.path.join(data_dir, "..", "fill.log"), "w")
    server = start(mode, data_dir, log)
    expected = {}
    for i in range(STREAMS):
        name, json_mode = f"s{i}", i % 3 == 0
        content_type = "application/json" if json_mode else "application/octet-stream"
        request("PUT", f"/v1/stream/{name}", headers={"Content-Type": content_type})
        expected[name] = ("json", []) if json_mode else ("bin", b"")
        for k in range(rnd.randint(1, 40)):
            if json_mode:
                message = {"i": i, "k": k, "pad": "x" * rnd.randint(0, 3000)}
                body = json.dumps([message]).encode()
            else:
                body = os.urandom(rnd.randint(1, 5000))
            status, _, _ = request("POST", f"/v1/stream/{name}", body, {"Content-Type": content_type})
            assert status == 204, status
            kind, held = expected[name]
            expected[name] = (kind, held + [message]) if json_mode else (kind, held + body)
        if i % 7 == 0:
            request("POST", f"/v1/stream/{name}", headers={"Content-Type": content_type, "Stream-Closed": "true"})
        if i % 5 == 0:
            status, _, _ = request("PUT", f"/v1/stream/f{i}", headers={"Stream-Forked-From": f"/v1/stream/{name}"})
            assert status == 201, status
            kind, held = expected[name]
            expected[f"f{i}"] = (kind, list(held) if kind == "json" else held)
        if i % 11 == 0:
            request("DELETE", f"/v1/stream/{name}")
            expected[name] = "deleted"
    if os.environ.get("DS_CAMPAIGN_STOP") == "kill":
        # A crash instead of a clean stop: recovery replays the whole log, not a checkpoint.
        server.kill()
        server.wait()
    else:
        stop(server)
    return expected


def damage(rnd, data_dir):
    files = [f for f in glob.glob(data_dir + "/**", recursive=True) if os.path.isfile(f) and not f.endswith("LOCK")]
    path = rnd.choice(files)
    size = os.path.getsize(path)
    kind = rnd.choice(["flip", "flip", "zero", "truncate", "garbage", "delete"])
    if size == 0 and kind != "delete":
        kind = "garbage"
    if kind == "delete":
        os.remove(path)
    else:
        with open(path, "r+b") as file:
            if kind == "flip":
                for _ in range(rnd.randint(1, 4)):
                    at = rnd.randrange(size)
                    file.seek(at)
                    byte = file.read(1)[0]
                    file.seek(at)
                    file.write(bytes([byte ^ (1 << rnd.randrange(8))]))
            elif kind == "zero":
                at = rnd.randrange(size)
                file.seek(at)
                file.write(b"\0" * min(rnd.randint(1, 8192), size - at))
            elif kind == "truncate":
                file.truncate(rnd.randrange(size))
            else:
                file.seek(rnd.randrange(size + 1))
                file.write(os.urandom(rnd.randint(1, 512)))
    return f"{kind} {os.path.relpath(path, data_dir)} ({size} B)"


def check(mode, name, expected, saved_ends):
    """(defects, limits) of one stream's reads against what was acknowledged; `saved_ends`:
    the file ends saved at a clean stop (file-durable) are there to tell damage from a crash."""
    limit_unless_saved = lambda finding: ([finding], []) if saved_ends else ([], [finding])
    if expected == "deleted":
        status, _, _ = request("GET", f"/v1/stream/{name}")
        if status in (404, 410, 500):
            return [], []
        if mode != "acid" and status == 200:
            # Its delete record was the end of its file, cut as a torn end is.
            return limit_unless_saved(f"{name}: deleted, back (its file's end cut)")
        return [f"{name}: deleted, answers {status}"], []
    kind, held = expected
    got, items, offset = b"", [], "-1"
    for _ in range(1000):
        status, data, response = request("GET", f"/v1/stream/{name}?offset={offset}")
        if status == 404 and held and saved_ends:
            return [f"{name}: lost, and its name not kept (404)"], []
        if status == 404:
            return [], ([f"{name}: lost (404)"] if held else [])
        if status == 500:
            break
        if status != 200:
            return [f"{name}: status {status}"], []
        if kind == "json":
            items += json.loads(data)
        else:
            got += data
        offset = response.getheader("stream-next-offset")
        if response.getheader("stream-up-to-date") == "true":
            break
    read = items if kind == "json" else got
    if read != held[: len(read)]:
        return [f"{name}: served bytes that are not the acknowledged prefix"], []
    if len(read) < len(held) and status == 200:
        return limit_unless_saved(f"{name}: read as whole but shorter ({len(read)} of {len(held)})")
    return [], []


def main():
    mode, iterations, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rnd = random.Random(seed)
    defects = limits = 0
    for iteration in range(iterations):
        scratch = tempfile.mkdtemp(prefix="ds-damage-campaign-")
        data_dir = os.path.join(scratch, "data")
        os.makedirs(data_dir)
        try:
            expected = fill(rnd, mode, data_dir)
            what = [damage(rnd, data_dir) for _ in range(rnd.randint(1, 3))]
            saved_ends = (mode != "acid" and os.environ.get("DS_CAMPAIGN_STOP") != "kill"
                          and not any("clean-ends/" in done for done in what))
            found, known = [], []
            log_path = os.path.join(scratch, "run.log")
            with open(log_path, "w") as log:
                server = start(mode, data_dir, log)
                if server.poll() is not None:
                    known.append(f"start refused (exit {server.returncode})")
                else:
                    for name, held in expected.items():
                        try:
                            more_found, more_known = check(mode, name, held, saved_ends)
                        except OSError as error:
                            found.append(f"{name}: no answer ({error!r})")
                            break
                        found += more_found
                        known += more_known
                    code = stop(server)
                    if code != 0:
                        found.append(f"the server stopped with {code}")
            if "panicked" in open(log_path).read():
                found.append("the server panicked")
            for command in ("info", "streams", "verify", "records", "stats"):
                tool = subprocess.run([TOOL, command, data_dir], capture_output=True, text=True, timeout=120)
                if tool.returncode not in (0, 1, 2) or "panicked" in tool.stderr:
                    found.append(f"ds-tool {command} exit {tool.returncode}: {tool.stderr.strip()[:200]}")
            defects += bool(found)
            limits += bool(known)
            if found or known:
                label = "DEFECT" if found else "limit"
                print(f"[{iteration}] {label}: {'; '.join(what)} -> {' | '.join(found + known)}", flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"{mode}, seed {seed}: {iterations} iterations, {defects} with defects, {limits} with known limits")
    sys.exit(1 if defects else 0)


if __name__ == "__main__":
    main()
