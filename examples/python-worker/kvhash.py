"""KV block identity, exactly as Switchyard's pkg/kvhash computes it.

A block's local hash is XXH3-64 with seed 1337 of its token ids as
little-endian uint32; its sequence hash is the local hash for the first block
and otherwise XXH3-64 with seed 1337 of (parent sequence hash, local hash) as
little-endian uint64. A partial last block is never hashed.

XXH3 comes from the xxhash module (Debian: python3-xxhash), a binding of the
reference C library that pkg/kvhash's golden values were computed with.
"""

import struct

import xxhash

SEED = 1337


def local_hash(tokens):
    """Returns the local hash of one block's tokens."""
    return xxhash.xxh3_64_intdigest(struct.pack("<%dI" % len(tokens), *tokens), seed=SEED)


def sequence_hash(parent, local):
    """Returns the sequence hash of a block from its parent's and its own local hash."""
    return xxhash.xxh3_64_intdigest(struct.pack("<QQ", parent, local), seed=SEED)


def hashes(tokens, block_size):
    """Returns (local, sequence) for every full block of tokens, in order."""
    if block_size <= 0:
        raise ValueError("block size must be positive, got %d" % block_size)
    out = []
    parent = None
    for i in range(len(tokens) // block_size):
        local = local_hash(tokens[i * block_size:(i + 1) * block_size])
        seq = local if parent is None else sequence_hash(parent, local)
        out.append((local, seq))
        parent = seq
    return out
