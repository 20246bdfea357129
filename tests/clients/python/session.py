"""One session of the public Python client (durable-streams, pinned in requirements.txt)
against a running ds-server: what an application does with it -- create, append, read
back, JSON streams, a sequence conflict, the errors for a missing and an existing stream,
long-poll and SSE readers that see a later append, and delete. Started by
tests/tests/clients.rs with the server's base URL; exits non-zero (with the failed check
in the traceback) when anything differs from what the client promises."""

import os
import sys
import threading
import time

from durable_streams import (
    DurableStream,
    SeqConflictError,
    StreamExistsError,
    StreamNotFoundError,
    stream,
)

BASE = sys.argv[1]


def url(name):
    return f"{BASE}/v1/stream/{name}-{os.getpid()}"


def expect_error(error, action):
    try:
        action()
    except error:
        return
    raise AssertionError(f"expected {error.__name__}")


def bytes_stream():
    handle = DurableStream.create(url("py-bytes"), content_type="application/octet-stream")
    for i in range(5):
        handle.append(f"m{i};".encode())
    with stream(url("py-bytes"), live=False) as read:
        assert read.read_bytes() == b"m0;m1;m2;m3;m4;"
    assert handle.head().exists
    expect_error(StreamExistsError, lambda: DurableStream.create(url("py-bytes"), content_type="text/plain"))
    handle.delete()
    expect_error(StreamNotFoundError, handle.head)


def json_stream():
    handle = DurableStream.create(url("py-json"), content_type="application/json")
    handle.append({"a": 1})
    # Each append is one message: the client wraps the value, the server unwraps one level.
    handle.append([{"b": 2}, {"c": 3}])
    with stream(url("py-json"), live=False) as read:
        assert read.read_json() == [{"a": 1}, [{"b": 2}, {"c": 3}]]


def sequence_conflict():
    handle = DurableStream.create(url("py-seq"), content_type="text/plain")
    handle.append("x", seq="0002")
    expect_error(SeqConflictError, lambda: handle.append("y", seq="0001"))


def missing_stream():
    def read_missing():
        with stream(url("py-missing"), live=False) as read:
            read.read_bytes()

    expect_error(StreamNotFoundError, read_missing)


def live(mode, json):
    """A reader in `mode` from the start sees the first message, then one appended later."""
    name = url(f"py-live-{mode}-{'json' if json else 'text'}")
    handle = DurableStream.create(name, content_type="application/json" if json else "text/plain")
    first, later = ({"n": 1}, {"n": 2}) if json else ("first;", "later;")
    expected = [first, later] if json else "first;later;"
    handle.append(first)
    seen = []

    def reader():
        with stream(name, live=mode, offset="-1") as read:
            for item in items(read, mode, json):
                seen.append(item)
                if (seen if json else "".join(seen)) == expected:
                    return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    time.sleep(0.3)
    handle.append(later)
    thread.join(15)
    assert not thread.is_alive(), f"{mode}: the reader did not see the later append: {seen}"
    assert (seen if json else "".join(seen)) == expected, (mode, seen)


def items(read, mode, json):
    """What a reader iterates: JSON values, or text (SSE gives text; a long-poll body
    iterates as bytes)."""
    if json:
        return read.iter_json()
    return read.iter_text() if mode == "sse" else (chunk.decode() for chunk in read)


for step in [
    bytes_stream,
    json_stream,
    sequence_conflict,
    missing_stream,
    lambda: live("long-poll", json=False),
    lambda: live("sse", json=False),
    lambda: live("long-poll", json=True),
    lambda: live("sse", json=True),
]:
    step()
print("python client session: ok")
