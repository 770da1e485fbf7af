// Unit tests of the block hash against pkg/kvhash's golden values
// (kvhash_test.go, computed with the reference C implementation). Run by
// TestNodeUnitTests, or directly: npm test in examples/node-worker.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Hasher } from "./kvhash.js";

const seq = (first: number, last: number) => Array.from({ length: last - first + 1 }, (_, i) => first + i);

test("local hash matches pkg/kvhash's golden values", async () => {
  const h = await Hasher.create();
  const big = Array.from({ length: 16 }, (_, i) => 151643 - i * 7);
  const cases: [string, number[], bigint][] = [
    ["empty", [], 0xd1f3e77444430ab9n],
    ["1..16", seq(1, 16), 0xea06fc71a5ee6e88n],
    ["zeros16", new Array(16).fill(0), 0x4ca6490661395090n],
    ["1..64", seq(1, 64), 0xf617bf3b93a1d900n],
    ["qwen-range", big, 0xfd1c17532c57254an],
  ];
  for (const [name, tokens, want] of cases) {
    assert.equal(h.localHash(tokens), want, name);
  }
});

test("chained hashes match pkg/kvhash's golden values", async () => {
  const h = await Hasher.create();
  // 50 tokens: three full blocks of 16 and a partial one that is ignored.
  assert.deepEqual(h.hashes(seq(1, 50), 16), [
    { local: 0xea06fc71a5ee6e88n, sequence: 0xea06fc71a5ee6e88n },
    { local: 0x1fbf39bd106be0b5n, sequence: 0xad01835a37dd294cn },
    { local: 0xa8562fe663b7a097n, sequence: 0x0d55e56c2bccbd1an },
  ]);
});

test("a bad block size is refused", async () => {
  const h = await Hasher.create();
  assert.throws(() => h.hashes([1, 2, 3], 0), RangeError);
});
