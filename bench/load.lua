-- wrk script: every request is read from a file, and each is sent once.
--
--   wrk -t2 -c64 -d60s -s bench/load.lua http://127.0.0.1:PORT -- REQUESTS_FILE STOP_AFTER THREADS DONE_PREFIX
--
-- REQUESTS_FILE holds one request a line: METHOD<TAB>PATH<TAB>BEARER<TAB>BODY
-- (BEARER and BODY may be empty).  Thread k of n takes lines k, k+n, k+2n...,
-- so no two connections ever send the same line: a CI token's jti is single
-- use, and a replay would measure the 409 path instead of the attestation.
-- A thread stops after STOP_AFTER answers (its share minus the requests its
-- connections may still have in flight) and leaves the file DONE_PREFIX.<id>,
-- so a run is bounded by the file, not by the clock; -d is only a ceiling.  If a thread runs out of lines
-- anyway it sends its last one again, and the status table shows it.
--
-- done() prints one JSON line (prefixed with "WRKJSON ") that bench/outside.py reads.

local threads = {}

function setup(thread)
   thread:set("id", #threads)
   table.insert(threads, thread)
end

function init(args)
   local path, stop_after, nthreads = args[1], tonumber(args[2]), tonumber(args[3])
   done_file = args[4] .. "." .. id
   requests = {}
   local n = 0
   local line_no = 0
   for line in io.lines(path) do
      if line_no % nthreads == id then
         local method, target, bearer, body = line:match("^([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$")
         local headers = {}
         if bearer ~= "" then headers["Authorization"] = "Bearer " .. bearer end
         if body ~= "" then headers["Content-Type"] = "application/json" else body = nil end
         n = n + 1
         requests[n] = wrk.format(method, target, headers, body)
      end
      line_no = line_no + 1
   end
   total = n
   limit = stop_after
   sent = 0
   answered = 0
   statuses = {}
end

function request()
   sent = sent + 1
   if sent > total then
      return requests[total]
   end
   return requests[sent]
end

function response(status, headers, body)
   answered = answered + 1
   local key = tostring(status)
   statuses[key] = (statuses[key] or 0) + 1
   if answered == limit then
      -- wrk's main thread sleeps for -d whatever the threads do: the file
      -- tells bench/outside.py to end the run now (SIGINT), so the run's
      -- duration, hence its rate, is the time the requests took.
      local marker = io.open(done_file, "w")
      marker:close()
      wrk.thread:stop()
   end
end

function done(summary, latency, requests)
   local merged = {}
   for _, thread in ipairs(threads) do
      local counts = thread:get("statuses")
      for code, count in pairs(counts) do
         merged[code] = (merged[code] or 0) + count
      end
   end
   local parts = {}
   for code, count in pairs(merged) do
      table.insert(parts, string.format('"%s": %d', code, count))
   end
   io.write(string.format(
      'WRKJSON {"requests": %d, "duration_us": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, ' ..
      '"mean_us": %.1f, "errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d, "status": %d}, ' ..
      '"statuses": {%s}}\n',
      summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
      latency:percentile(99), latency.max, latency.mean, summary.errors.connect, summary.errors.read,
      summary.errors.write, summary.errors.timeout, summary.errors.status, table.concat(parts, ", ")))
end
