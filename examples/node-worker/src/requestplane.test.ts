// Unit tests of the http plane's framing and header mapping against
// pkg/transport's wire format (http.go, frame.go). Run by TestNodeUnitTests,
// or directly: npm test in examples/node-worker.
import assert from "node:assert/strict";
import { test } from "node:test";
import { errorFrame, frame, FRAME_DATA, FRAME_END, transportHeaders } from "./requestplane.js";

test("a data frame is type, big-endian length, payload", () => {
  assert.deepEqual([...frame(FRAME_DATA, new Uint8Array([7, 8, 9]))], [2, 0, 0, 0, 3, 7, 8, 9]);
  assert.deepEqual([...frame(FRAME_END)], [3, 0, 0, 0, 0]);
  const big = frame(FRAME_DATA, new Uint8Array(0x010203));
  assert.deepEqual([...big.subarray(0, 5)], [2, 0, 1, 2, 3]);
});

test("an error frame carries a uint16 code length, the code and the message", () => {
  const f = errorFrame("no_handler", "nope ☃");
  const body = Buffer.concat([Buffer.from([0, 10]), Buffer.from("no_handler"), Buffer.from("nope ☃", "utf8")]);
  assert.deepEqual(f, Buffer.concat([Buffer.from([4, 0, 0, 0, body.length]), body]));
});

test("request headers: Dyn-Hdr- prefixed ones and the three standard ones", () => {
  assert.deepEqual(
    transportHeaders({
      "dyn-hdr-tenant": "a",
      "dyn-hdr-": "empty name is dropped",
      "x-request-id": "r1",
      traceparent: "00-abc-def-01",
      tracestate: "k=v",
      "content-type": "application/octet-stream",
      ":path": "/v1/rpc/generate",
      "dyn-hdr-multi": ["first", "second"],
    }),
    { tenant: "a", "x-request-id": "r1", traceparent: "00-abc-def-01", tracestate: "k=v", multi: "first" },
  );
});
