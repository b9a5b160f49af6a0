// Sends each gRPC request body of a file once, over HTTP/2 (Node's http2 module), and prints
// one JSON line: {"succeeded", "failed", "seconds", "mean_ms", "statuses"}.
//
//   node bench/grpc_bodies_load.mjs ADDRESS PATH BODIES CONNECTIONS STREAMS [HEADER=VALUE...]
//
// BODIES holds gRPC-framed requests back to back (each a 5-byte frame header, then the
// message): h2load posts one body over and over, which a node answers as a replay of a
// payer envelope it stored already (stored once, answered from the store), so publishes
// are measured with distinct bodies here. A request succeeds when its grpc-status is 0
// (h2load counts any HTTP 200). CONNECTIONS x STREAMS requests are in flight at a time.
import fs from "node:fs";
import http2 from "node:http2";

const [address, path, bodiesFile, connections, streams, ...headerArgs] = process.argv.slice(2);
const raw = fs.readFileSync(bodiesFile);
const bodies = [];
for (let at = 0; at < raw.length; ) {
  const length = raw.readUInt32BE(at + 1);
  bodies.push(raw.subarray(at, at + 5 + length));
  at += 5 + length;
}
const extra = Object.fromEntries(headerArgs.map((h) => h.split(/=(.*)/s).slice(0, 2)));
const statuses = {};
let next = 0;
let succeeded = 0;
let failed = 0;
let latencyMs = 0;

function one(session) {
  if (next >= bodies.length) return Promise.resolve();
  const body = bodies[next++];
  const started = process.hrtime.bigint();
  return new Promise((resolve) => {
    const request = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...extra,
    });
    let status = null;
    request.on("response", (headers) => {
      if (headers["grpc-status"] !== undefined) status = headers["grpc-status"];
    });
    request.on("trailers", (trailers) => {
      status = trailers["grpc-status"];
    });
    request.on("data", () => {});
    const done = () => {
      const key = status ?? "none";
      statuses[key] = (statuses[key] || 0) + 1;
      if (status === "0") succeeded++;
      else failed++;
      latencyMs += Number(process.hrtime.bigint() - started) / 1e6;
      resolve();
    };
    request.on("close", done);
    request.end(body);
  }).then(() => one(session));
}

const sessions = Array.from({ length: Number(connections) }, () =>
  http2.connect(`http://${address}`),
);
await Promise.all(sessions.map((s) => new Promise((ok) => s.once("connect", ok))));
const started = process.hrtime.bigint();
await Promise.all(
  sessions.flatMap((session) => Array.from({ length: Number(streams) }, () => one(session))),
);
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
for (const session of sessions) session.close();
const total = succeeded + failed;
console.log(
  JSON.stringify({ succeeded, failed, seconds, mean_ms: total ? latencyMs / total : 0, statuses }),
);
