// One session of the public TypeScript client (@durable-streams/client, pinned in
// package-lock.json) against a running ds-server: what an application does with it —
// create, append, read back, JSON streams, long-poll and SSE readers that see a later
// append (bytes that are not text too), an idempotent producer whose repeated batch is
// stored once, a fenced older epoch, closing, head and delete. Started by
// tests/tests/clients.rs with the server's base URL; exits non-zero (with the failed check
// on stderr) when anything differs from what the client promises.
import assert from "node:assert/strict"
import { DurableStream, IdempotentProducer, StaleEpochError, stream } from "@durable-streams/client"

const base = process.argv[2]
assert.ok(base, "usage: [DS_BEARER=token] node session.mjs BASE_URL")
const url = (name) => `${base}/v1/stream/${name}-${process.pid}`
// Behind the authenticating proxy every request carries the token, as an application's do.
const headers = process.env.DS_BEARER ? { Authorization: `Bearer ${process.env.DS_BEARER}` } : {}
const create = (options) => DurableStream.create({ ...options, headers })
const readFrom = (options) => stream({ ...options, headers })
// A session that hangs is a failure, not a stuck test run.
setTimeout(() => {
  console.error("the session did not finish within 60 s")
  process.exit(1)
}, 60_000).unref()

async function bytes() {
  const handle = await create({ url: url("ts-bytes"), contentType: "text/plain" })
  for (let i = 0; i < 5; i++) await handle.append(`m${i};`)
  const read = await readFrom({ url: url("ts-bytes"), offset: "-1", live: false })
  assert.equal(await read.text(), "m0;m1;m2;m3;m4;")
  const head = await handle.head()
  assert.equal(head.exists, true)
  assert.equal(head.offset, read.offset, "head and read agree on the tail")
}

async function json() {
  const handle = await create({ url: url("ts-json"), contentType: "application/json" })
  await handle.append(JSON.stringify({ a: 1 }))
  await handle.append(JSON.stringify([{ b: 2 }, { c: 3 }]))
  const read = await readFrom({ url: url("ts-json"), offset: "-1", live: false })
  // The client sends each append as one message (it wraps the value in an array, which the
  // server unwraps one level), so an appended array stays one message.
  assert.deepEqual(await read.json(), [{ a: 1 }, [{ b: 2 }, { c: 3 }]])
}

// A reader in `live` mode from the start sees the first message, then one appended later.
async function live(live) {
  const name = url(`ts-live-${live}`)
  const handle = await create({ url: name, contentType: "text/plain" })
  await handle.append("first;")
  const read = await readFrom({ url: name, offset: "-1", live })
  setTimeout(() => handle.append("later;"), 300)
  let seen = ""
  const texts = read.textStream()
  const reader = texts.getReader()
  while (!seen.endsWith("later;")) {
    const { value, done } = await reader.read()
    assert.ok(!done, `${live}: the session ended after ${JSON.stringify(seen)}`)
    seen += value
  }
  read.cancel()
  await read.closed
  assert.equal(seen, "first;later;", `${live}: what the reader saw`)
}

async function producer() {
  const name = url("ts-producer")
  const handle = await create({ url: name, contentType: "text/plain" })
  const writer = new IdempotentProducer(handle, "writer-1", { epoch: 0, lingerMs: 0 })
  writer.append("a;")
  writer.append("b;")
  await writer.flush()
  // The same producer again, its state lost (a restarted process): its first batch is a
  // duplicate, acknowledged and not stored again.
  const again = new IdempotentProducer(handle, "writer-1", { epoch: 0, lingerMs: 0 })
  again.append("a;")
  await again.flush()
  await writer.close("end;")
  const read = await readFrom({ url: name, offset: "-1", live: false })
  assert.equal(await read.text(), "a;b;end;")
  assert.equal(read.streamClosed, true, "closing with a final message closes the stream")
  await assert.rejects(handle.append("late;"), "a closed stream takes no appends")
}

// Bytes that are not text reach an SSE reader whole (ds sends them base64, and says so).
async function binaryOverSse() {
  const name = url("ts-binary")
  const handle = await create({ url: name, contentType: "application/octet-stream" })
  await handle.append(new Uint8Array([0, 1, 2, 255]))
  const read = await readFrom({ url: name, offset: "-1", live: "sse" })
  setTimeout(() => handle.append(new Uint8Array([13, 10, 0])), 300)
  const reader = read.bodyStream().getReader()
  const seen = []
  while (seen.length < 7) {
    const { value, done } = await reader.read()
    assert.ok(!done, `the session ended after ${seen}`)
    seen.push(...value)
  }
  read.cancel()
  await read.closed
  assert.deepEqual(seen, [0, 1, 2, 255, 13, 10, 0])
}

// A producer's newer epoch fences the older one: its next batch is refused, not stored.
async function fencing() {
  const name = url("ts-fencing")
  const handle = await create({ url: name, contentType: "text/plain" })
  const errors = []
  const old = new IdempotentProducer(handle, "writer", { epoch: 0, lingerMs: 0, onError: (e) => errors.push(e) })
  old.append("a;")
  await old.flush()
  const newer = new IdempotentProducer(handle, "writer", { epoch: 1, lingerMs: 0 })
  newer.append("b;")
  await newer.flush()
  old.append("c;")
  await old.flush().catch((error) => errors.push(error))
  assert.ok(errors.some((error) => error instanceof StaleEpochError), `errors: ${errors}`)
  const read = await readFrom({ url: name, offset: "-1", live: false })
  assert.equal(await read.text(), "a;b;")
}

async function closing() {
  const handle = await create({ url: url("ts-close"), contentType: "text/plain" })
  await handle.append("x;")
  const closed = await handle.close()
  const head = await handle.head()
  assert.equal(head.streamClosed, true)
  assert.equal(head.offset, closed.finalOffset, "the close reports the final offset")
}

async function deletion() {
  const handle = await create({ url: url("ts-gone"), contentType: "text/plain" })
  await handle.delete()
  const head = await DurableStream.head({ url: url("ts-gone"), headers })
  assert.equal(head.exists, false, "a deleted stream is gone")
}

const steps = {
  bytes,
  json,
  longPoll: () => live("long-poll"),
  sse: () => live("sse"),
  binaryOverSse,
  producer,
  fencing,
  closing,
  deletion,
}
for (const [name, step] of Object.entries(steps)) {
  try {
    await step()
  } catch (error) {
    console.error(`step ${name} failed`)
    throw error
  }
}
console.log("typescript client session: ok")
