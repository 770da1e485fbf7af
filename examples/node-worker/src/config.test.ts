// Unit tests of the worker's configuration. Run by TestNodeUnitTests, or
// directly: npm test in examples/node-worker.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Role } from "../../../gen/ts/switchyard/common/v1/common_pb.js";
import { parseConfig } from "./worker.js";

test("--disaggregation-mode is the registered role, agg by default", () => {
  const cases: [string[], Record<string, string>, Role][] = [
    [[], {}, Role.AGG],
    [["--disaggregation-mode", "prefill"], {}, Role.PREFILL],
    [[], { SWITCHYARD_NODEWORKER_DISAGGREGATION_MODE: "decode" }, Role.DECODE],
  ];
  for (const [argv, env, want] of cases) {
    assert.equal(parseConfig(argv, { DYN_HTTP_RPC_HOST: "127.0.0.1", ...env }).role, want);
  }
});

test("a --disaggregation-mode that is no role is refused, naming the valid ones", () => {
  for (const mode of ["both", "", "constructor", "AGG"]) {
    assert.throws(() => parseConfig(["--disaggregation-mode", mode], { DYN_HTTP_RPC_HOST: "127.0.0.1" }), /agg, prefill, decode/);
  }
});
