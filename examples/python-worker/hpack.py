"""HPACK (RFC 7541) for the HTTP/2 request plane: a full decoder for request
headers and a minimal encoder for response headers.

The tables below are RFC 7541's Appendix A (static table) and Appendix B
(Huffman code), transcribed from Go's golang.org/x/net/http2/hpack.
"""

STATIC_TABLE = (
    (':authority', ''),
    (':method', 'GET'),
    (':method', 'POST'),
    (':path', '/'),
    (':path', '/index.html'),
    (':scheme', 'http'),
    (':scheme', 'https'),
    (':status', '200'),
    (':status', '204'),
    (':status', '206'),
    (':status', '304'),
    (':status', '400'),
    (':status', '404'),
    (':status', '500'),
    ('accept-charset', ''),
    ('accept-encoding', 'gzip, deflate'),
    ('accept-language', ''),
    ('accept-ranges', ''),
    ('accept', ''),
    ('access-control-allow-origin', ''),
    ('age', ''),
    ('allow', ''),
    ('authorization', ''),
    ('cache-control', ''),
    ('content-disposition', ''),
    ('content-encoding', ''),
    ('content-language', ''),
    ('content-length', ''),
    ('content-location', ''),
    ('content-range', ''),
    ('content-type', ''),
    ('cookie', ''),
    ('date', ''),
    ('etag', ''),
    ('expect', ''),
    ('expires', ''),
    ('from', ''),
    ('host', ''),
    ('if-match', ''),
    ('if-modified-since', ''),
    ('if-none-match', ''),
    ('if-range', ''),
    ('if-unmodified-since', ''),
    ('last-modified', ''),
    ('link', ''),
    ('location', ''),
    ('max-forwards', ''),
    ('proxy-authenticate', ''),
    ('proxy-authorization', ''),
    ('range', ''),
    ('referer', ''),
    ('refresh', ''),
    ('retry-after', ''),
    ('server', ''),
    ('set-cookie', ''),
    ('strict-transport-security', ''),
    ('transfer-encoding', ''),
    ('user-agent', ''),
    ('vary', ''),
    ('via', ''),
    ('www-authenticate', ''),
)
HUFFMAN_CODES = (
    0x1ff8, 0x7fffd8, 0xfffffe2, 0xfffffe3, 0xfffffe4, 0xfffffe5, 0xfffffe6, 0xfffffe7,
    0xfffffe8, 0xffffea, 0x3ffffffc, 0xfffffe9, 0xfffffea, 0x3ffffffd, 0xfffffeb, 0xfffffec,
    0xfffffed, 0xfffffee, 0xfffffef, 0xffffff0, 0xffffff1, 0xffffff2, 0x3ffffffe, 0xffffff3,
    0xffffff4, 0xffffff5, 0xffffff6, 0xffffff7, 0xffffff8, 0xffffff9, 0xffffffa, 0xffffffb,
    0x14, 0x3f8, 0x3f9, 0xffa, 0x1ff9, 0x15, 0xf8, 0x7fa,
    0x3fa, 0x3fb, 0xf9, 0x7fb, 0xfa, 0x16, 0x17, 0x18,
    0x0, 0x1, 0x2, 0x19, 0x1a, 0x1b, 0x1c, 0x1d,
    0x1e, 0x1f, 0x5c, 0xfb, 0x7ffc, 0x20, 0xffb, 0x3fc,
    0x1ffa, 0x21, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62,
    0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a,
    0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72,
    0xfc, 0x73, 0xfd, 0x1ffb, 0x7fff0, 0x1ffc, 0x3ffc, 0x22,
    0x7ffd, 0x3, 0x23, 0x4, 0x24, 0x5, 0x25, 0x26,
    0x27, 0x6, 0x74, 0x75, 0x28, 0x29, 0x2a, 0x7,
    0x2b, 0x76, 0x2c, 0x8, 0x9, 0x2d, 0x77, 0x78,
    0x79, 0x7a, 0x7b, 0x7ffe, 0x7fc, 0x3ffd, 0x1ffd, 0xffffffc,
    0xfffe6, 0x3fffd2, 0xfffe7, 0xfffe8, 0x3fffd3, 0x3fffd4, 0x3fffd5, 0x7fffd9,
    0x3fffd6, 0x7fffda, 0x7fffdb, 0x7fffdc, 0x7fffdd, 0x7fffde, 0xffffeb, 0x7fffdf,
    0xffffec, 0xffffed, 0x3fffd7, 0x7fffe0, 0xffffee, 0x7fffe1, 0x7fffe2, 0x7fffe3,
    0x7fffe4, 0x1fffdc, 0x3fffd8, 0x7fffe5, 0x3fffd9, 0x7fffe6, 0x7fffe7, 0xffffef,
    0x3fffda, 0x1fffdd, 0xfffe9, 0x3fffdb, 0x3fffdc, 0x7fffe8, 0x7fffe9, 0x1fffde,
    0x7fffea, 0x3fffdd, 0x3fffde, 0xfffff0, 0x1fffdf, 0x3fffdf, 0x7fffeb, 0x7fffec,
    0x1fffe0, 0x1fffe1, 0x3fffe0, 0x1fffe2, 0x7fffed, 0x3fffe1, 0x7fffee, 0x7fffef,
    0xfffea, 0x3fffe2, 0x3fffe3, 0x3fffe4, 0x7ffff0, 0x3fffe5, 0x3fffe6, 0x7ffff1,
    0x3ffffe0, 0x3ffffe1, 0xfffeb, 0x7fff1, 0x3fffe7, 0x7ffff2, 0x3fffe8, 0x1ffffec,
    0x3ffffe2, 0x3ffffe3, 0x3ffffe4, 0x7ffffde, 0x7ffffdf, 0x3ffffe5, 0xfffff1, 0x1ffffed,
    0x7fff2, 0x1fffe3, 0x3ffffe6, 0x7ffffe0, 0x7ffffe1, 0x3ffffe7, 0x7ffffe2, 0xfffff2,
    0x1fffe4, 0x1fffe5, 0x3ffffe8, 0x3ffffe9, 0xffffffd, 0x7ffffe3, 0x7ffffe4, 0x7ffffe5,
    0xfffec, 0xfffff3, 0xfffed, 0x1fffe6, 0x3fffe9, 0x1fffe7, 0x1fffe8, 0x7ffff3,
    0x3fffea, 0x3fffeb, 0x1ffffee, 0x1ffffef, 0xfffff4, 0xfffff5, 0x3ffffea, 0x7ffff4,
    0x3ffffeb, 0x7ffffe6, 0x3ffffec, 0x3ffffed, 0x7ffffe7, 0x7ffffe8, 0x7ffffe9, 0x7ffffea,
    0x7ffffeb, 0xffffffe, 0x7ffffec, 0x7ffffed, 0x7ffffee, 0x7ffffef, 0x7fffff0, 0x3ffffee,
)
HUFFMAN_LENGTHS = (
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
)


class HPACKError(Exception):
    """A header block that does not decode: a COMPRESSION_ERROR."""


def _build_huffman_tree():
    # A binary trie: each node is a two-element list of children; a leaf is
    # the symbol (an int).
    root = [None, None]
    for sym, (code, length) in enumerate(zip(HUFFMAN_CODES, HUFFMAN_LENGTHS)):
        node = root
        for i in range(length - 1, 0, -1):
            bit = (code >> i) & 1
            if node[bit] is None:
                node[bit] = [None, None]
            node = node[bit]
        node[code & 1] = sym
    return root


_HUFFMAN_TREE = _build_huffman_tree()


def huffman_decode(data):
    """Decodes a Huffman-coded string; the padding must be at most 7 one bits."""
    out = bytearray()
    node = _HUFFMAN_TREE
    depth = 0  # bits consumed since the last symbol
    ones = True  # whether those bits are all ones (valid padding so far)
    for byte in data:
        for i in range(7, -1, -1):
            bit = (byte >> i) & 1
            nxt = node[bit]
            depth += 1
            ones = ones and bit == 1
            if nxt is None:
                raise HPACKError("invalid Huffman code")
            if isinstance(nxt, int):
                out.append(nxt)
                node, depth, ones = _HUFFMAN_TREE, 0, True
            else:
                node = nxt
    if depth > 7 or not ones:
        raise HPACKError("invalid Huffman padding")
    return bytes(out)


def _decode_int(data, pos, prefix_bits):
    """Decodes an HPACK integer whose prefix is the low prefix_bits of data[pos]."""
    if pos >= len(data):
        raise HPACKError("truncated integer")
    mask = (1 << prefix_bits) - 1
    value = data[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data):
            raise HPACKError("truncated integer")
        b = data[pos]
        pos += 1
        value += (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos
        if shift > 28:
            raise HPACKError("integer too large")


def _decode_string(data, pos):
    if pos >= len(data):
        raise HPACKError("truncated string")
    huffman = data[pos] & 0x80
    length, pos = _decode_int(data, pos, 7)
    if pos + length > len(data):
        raise HPACKError("truncated string")
    raw = bytes(data[pos:pos + length])
    pos += length
    return (huffman_decode(raw) if huffman else raw), pos


class Decoder:
    """Decodes header blocks of one connection, keeping its dynamic table."""

    def __init__(self, max_table_size=4096):
        self.max_allowed = max_table_size  # what our SETTINGS allow
        self.max_size = max_table_size
        self.size = 0
        self.dynamic = []  # newest first: (name, value) as bytes

    def _lookup(self, index):
        if index == 0:
            raise HPACKError("index 0")
        if index <= len(STATIC_TABLE):
            name, value = STATIC_TABLE[index - 1]
            return name.encode(), value.encode()
        i = index - len(STATIC_TABLE) - 1
        if i >= len(self.dynamic):
            raise HPACKError("index %d out of range" % index)
        return self.dynamic[i]

    def _evict(self):
        while self.size > self.max_size and self.dynamic:
            name, value = self.dynamic.pop()
            self.size -= 32 + len(name) + len(value)

    def _add(self, name, value):
        self.dynamic.insert(0, (name, value))
        self.size += 32 + len(name) + len(value)
        self._evict()

    def decode(self, data):
        """Returns the header block's fields as a list of (name, value) str pairs."""
        headers = []
        pos = 0
        while pos < len(data):
            b = data[pos]
            if b & 0x80:  # indexed field
                index, pos = _decode_int(data, pos, 7)
                name, value = self._lookup(index)
            elif b & 0xE0 == 0x20:  # dynamic table size update
                size, pos = _decode_int(data, pos, 5)
                if size > self.max_allowed:
                    raise HPACKError("table size %d over the limit" % size)
                self.max_size = size
                self._evict()
                continue
            else:
                # Literal: with incremental indexing (01), without indexing
                # (0000) or never indexed (0001).
                indexing = b & 0xC0 == 0x40
                index, pos = _decode_int(data, pos, 6 if indexing else 4)
                if index:
                    name = self._lookup(index)[0]
                else:
                    name, pos = _decode_string(data, pos)
                value, pos = _decode_string(data, pos)
                if indexing:
                    self._add(name, value)
            headers.append((name.decode("latin-1"), value.decode("latin-1")))
        return headers


def _encode_int(value, prefix_bits, first):
    mask = (1 << prefix_bits) - 1
    if value < mask:
        return bytes([first | value])
    out = bytearray([first | mask])
    value -= mask
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode(headers):
    """Encodes (name, value) str pairs without touching the peer's dynamic
    table: static-table hits are indexed, everything else is a literal
    without indexing and without Huffman coding."""
    out = bytearray()
    for name, value in headers:
        full = name_only = 0
        for i, (n, v) in enumerate(STATIC_TABLE, 1):
            if n == name:
                name_only = name_only or i
                if v == value:
                    full = i
                    break
        if full:
            out += _encode_int(full, 7, 0x80)
            continue
        if name_only:
            out += _encode_int(name_only, 4, 0x00)
        else:
            n = name.encode("latin-1")
            out += b"\x00" + _encode_int(len(n), 7, 0x00) + n
        v = value.encode("latin-1")
        out += _encode_int(len(v), 7, 0x00) + v
    return bytes(out)
