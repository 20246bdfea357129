// Runs the pinned public conformance suite against the server at CONFORMANCE_TEST_URL.
// Started by tests/tests/conformance.rs, which runs every group (forks included) in each
// storage mode; vitest's `-t` picks groups by name. conformance-http2.test.mjs runs it over
// HTTP/2.
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.CONFORMANCE_TEST_URL
if (!baseUrl) {
  throw new Error("CONFORMANCE_TEST_URL is required")
}

runConformanceTests({ baseUrl })
