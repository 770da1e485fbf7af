// KV block identity, exactly as Switchyard's pkg/kvhash computes it (the
// contract is written in proto/switchyard/worker/v1/worker.proto):
//
//   - a prompt is cut into blocks of the model card's block_size tokens; a
//     partial last block is never hashed;
//   - a block's local hash is XXH3-64, seed 1337, of its token ids as
//     little-endian uint32;
//   - its sequence hash is the local hash for the first block, and otherwise
//     XXH3-64, seed 1337, of (parent sequence hash, local hash) as two
//     little-endian uint64.
//
// XXH3 comes from the npm package hash-wasm (the reference C code compiled to
// WebAssembly); kvhash.test.ts checks it against pkg/kvhash's golden values.
import { createXXHash3, type IHasher } from "hash-wasm";

/** SEED is the XXH3 seed of every block hash. */
export const SEED = 1337;

/** BlockHash is one full block's identity. */
export interface BlockHash {
  local: bigint;
  sequence: bigint;
}

/** Hasher computes block hashes; build one with newHasher (XXH3 loads asynchronously). */
export class Hasher {
  private constructor(private readonly h: IHasher) {}

  static async create(): Promise<Hasher> {
    return new Hasher(await createXXHash3(SEED, 0));
  }

  private digest(bytes: Uint8Array): bigint {
    this.h.init();
    this.h.update(bytes);
    return BigInt("0x" + this.h.digest("hex"));
  }

  /** localHash is the local hash of one block's tokens. */
  localHash(tokens: ArrayLike<number>): bigint {
    const buf = new Uint8Array(tokens.length * 4);
    const view = new DataView(buf.buffer);
    for (let i = 0; i < tokens.length; i++) view.setUint32(i * 4, tokens[i], true);
    return this.digest(buf);
  }

  /** sequenceHash chains a block's local hash to its parent's sequence hash. */
  sequenceHash(parent: bigint, local: bigint): bigint {
    const buf = new Uint8Array(16);
    const view = new DataView(buf.buffer);
    view.setBigUint64(0, parent, true);
    view.setBigUint64(8, local, true);
    return this.digest(buf);
  }

  /** hashes returns the hashes of every full block of tokens, in order. */
  hashes(tokens: ArrayLike<number>, blockSize: number): BlockHash[] {
    if (!(blockSize > 0)) throw new RangeError(`block size must be positive, got ${blockSize}`);
    const out: BlockHash[] = [];
    let parent: bigint | undefined;
    const arr = Array.from(tokens);
    for (let i = 0; i + blockSize <= arr.length; i += blockSize) {
      const local = this.localHash(arr.slice(i, i + blockSize));
      const sequence = parent === undefined ? local : this.sequenceHash(parent, local);
      out.push({ local, sequence });
      parent = sequence;
    }
    return out;
  }
}
