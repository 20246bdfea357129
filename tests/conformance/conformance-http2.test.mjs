// Runs the pinned public conformance suite against the server at CONFORMANCE_TEST_URL (an
// https:// URL) over HTTP/2: every fetch goes through undici with `allowH2`, so each
// connection the suite opens negotiates `h2` by ALPN. CONFORMANCE_TLS_CA names the PEM
// certificate to trust. Started by tests/tests/conformance.rs; after the suite, the
// server's own count of HTTP/2 connections must show that it was spoken.
import { readFileSync } from "node:fs"
import { afterAll, expect } from "vitest"
import { Agent, fetch, setGlobalDispatcher } from "undici"

const baseUrl = process.env.CONFORMANCE_TEST_URL
const caPath = process.env.CONFORMANCE_TLS_CA
if (!baseUrl || !caPath) {
  throw new Error("CONFORMANCE_TEST_URL and CONFORMANCE_TLS_CA are required")
}
setGlobalDispatcher(new Agent({ allowH2: true, connect: { ca: readFileSync(caPath) } }))
globalThis.fetch = fetch

const { runConformanceTests } = await import("@durable-streams/server-conformance-tests")
runConformanceTests({ baseUrl })

afterAll(async () => {
  const metrics = await (await fetch(`${baseUrl}/metrics`)).text()
  const served = Number(/^ds_http2_connections_total (\d+)$/m.exec(metrics)?.[1] ?? 0)
  expect(served, "connections the server served as HTTP/2").toBeGreaterThan(0)
})
