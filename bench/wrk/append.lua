-- wrk script: appends spread over 100 streams (created by the setup step), 256 bytes each
-- unless BODY_BYTES says otherwise.
-- Usage: wrk -t1 -c64 -d10s -s bench/wrk/append.lua http://127.0.0.1:4437
local streams = 100
local body = string.rep("x", tonumber(os.getenv("BODY_BYTES") or "256"))
local counter = 0

request = function()
  counter = counter + 1
  local path = "/v1/stream/bench-" .. (counter % streams)
  return wrk.format("POST", path, { ["Content-Type"] = "application/octet-stream" }, body)
end

done = function(summary, latency, requests)
  io.write(string.format("non-2xx: %d\n", summary.errors.status))
  io.write(string.format("p50 %.0fus  p99 %.0fus\n", latency:percentile(50), latency:percentile(99)))
end
