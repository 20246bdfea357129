#!/usr/bin/env python3
"""Writes fuzz/seeds/: each target's starting corpus, from the golden data directories
(tests/fixtures/) and from requests and bodies the tests send. Run it again after adding a
fixture; the seeds are committed, so a fuzz run starts from real inputs."""

import os
import shutil
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(ROOT, "..", "tests", "fixtures")
SEEDS = os.path.join(ROOT, "seeds")
RECORD_MAGIC = b"DSR1"


def files(suffix):
    for top, _, names in os.walk(FIXTURES):
        for name in sorted(names):
            if name.endswith(suffix):
                yield os.path.join(top, name)


def write(target, name, data):
    os.makedirs(os.path.join(SEEDS, target), exist_ok=True)
    with open(os.path.join(SEEDS, target, name), "wb") as out:
        out.write(data)


def records_of(data, start):
    """Each record of a log from `start` (docs/FORMAT.md: payload_len at byte 8, records
    8-byte aligned), as (position, bytes), until the first that is not one."""
    at = start
    while at + 64 <= len(data) and data[at:at + 4] == RECORD_MAGIC:
        payload_len = struct.unpack_from("<I", data, at + 8)[0]
        length = (64 + payload_len + 7) // 8 * 8
        yield at, data[at:at + length]
        at += length


def label(path):
    return os.path.relpath(path, FIXTURES).replace(os.sep, "-")


def logs():
    for path in files(".wal"):
        yield path, 64
    for path in files(".log"):
        yield path, 0


def main():
    shutil.rmtree(SEEDS, ignore_errors=True)
    for path, start in logs():
        data = open(path, "rb").read()
        found = list(records_of(data, start))
        for position, record in found[:40]:
            write("records", f"{label(path)}-{position}", record)
        if found:
            end = found[-1][0] + len(found[-1][1])
            write("records", f"{label(path)}-all", data[start:end])
            if path.endswith(".wal"):
                # The segment's written part (and one whole file, zeros and all).
                write("segment", f"{label(path)}-written", data[:end + 64])
                if not any(name.endswith("-whole") for name in os.listdir(os.path.join(SEEDS, "segment"))):
                    write("segment", f"{label(path)}-whole", data)
    for path in files("checkpoint") or []:
        write("checkpoint", label(path), open(path, "rb").read())
    for path in files("checkpoint.previous"):
        write("checkpoint", label(path), open(path, "rb").read())
    for path in files("MANIFEST"):
        write("manifest", label(path), open(path, "rb").read())
    for path in files("MANIFEST-COPY"):
        write("manifest", label(path), open(path, "rb").read())
    bodies = [b'{"a":1}', b'[{"a":1},{"b":2}]', b"[]", b'[1, {"big":12345678901234567890}]',
              b'{"key order":"kept","a":[1,2]}', b'"text"', b"  [ true , null ]  ", b"[[[[1]]]]",
              b'{"s":"\\ud83d\\ude00"}', b"1e999", b"[1,]", b'{"a":']
    for i, body in enumerate(bodies):
        write("json_body", f"body-{i}", body)
    heads = [
        b"GET /v1/stream/demo?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /v1/stream/demo?offset=0000000000000001_0000000000000006&live=long-poll&cursor=42 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /v1/stream/a/b?offset=now&live=sse HTTP/1.1\r\nHost: x\r\nLast-Event-ID: 0000000000000000_0000000000000000\r\n\r\n",
        b"POST /v1/stream/demo HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
        b"POST /v1/stream/e HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nProducer-Id: w1\r\nProducer-Epoch: 0\r\nProducer-Seq: 3\r\nStream-Seq: 0005\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
        b"PUT /v1/stream/f HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nStream-Forked-From: /v1/stream/src\r\nStream-Fork-Offset: 0000000000000007_000000000000001c\r\nStream-Fork-Sub-Offset: 2\r\nContent-Length: 0\r\n\r\n",
        b"PUT /v1/stream/t HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nStream-TTL: 3600\r\nStream-Expires-At: 2100-01-01T00:00:00Z\r\nStream-Closed: true\r\n\r\n",
        b"POST /v1/stream/c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HEAD /v1/stream/demo HTTP/1.0\r\n\r\n",
        b"DELETE /v1/stream/%C3%A9 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"OPTIONS /v1/stream/demo HTTP/1.1\r\nOrigin: http://a\r\nAccess-Control-Request-Method: POST\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ]
    for i, head in enumerate(heads):
        write("request_head", f"head-{i}", head)


if __name__ == "__main__":
    main()
