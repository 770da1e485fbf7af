"""Unit tests of the Python side; run by TestPythonUnitTests (or directly:
/usr/bin/python3 -m unittest test_worker.py in this folder)."""

import struct
import unittest

import kvhash
import requestplane


def seq(first, last):
    return list(range(first, last + 1))


class KvHashTest(unittest.TestCase):
    # pkg/kvhash's golden values (kvhash_test.go), computed with the
    # reference C implementation.
    def test_local_hash_golden(self):
        big = [151643 - i * 7 for i in range(16)]
        cases = [
            ([], 0xd1f3e77444430ab9),
            (seq(1, 16), 0xea06fc71a5ee6e88),
            ([0] * 16, 0x4ca6490661395090),
            (seq(1, 64), 0xf617bf3b93a1d900),
            (big, 0xfd1c17532c57254a),
        ]
        for tokens, want in cases:
            with self.subTest(n=len(tokens)):
                self.assertEqual(kvhash.local_hash(tokens), want)

    def test_hashes_golden(self):
        want = [
            (0xea06fc71a5ee6e88, 0xea06fc71a5ee6e88),
            (0x1fbf39bd106be0b5, 0xad01835a37dd294c),
            (0xa8562fe663b7a097, 0x0d55e56c2bccbd1a),
        ]
        # 50 tokens: three full blocks and a partial one that is ignored.
        self.assertEqual(kvhash.hashes(seq(1, 50), 16), want)

    def test_invalid_block_size(self):
        with self.assertRaises(ValueError):
            kvhash.hashes([1, 2], 0)


class FramingTest(unittest.TestCase):
    def test_frames(self):
        self.assertEqual(requestplane.encode_frame(requestplane.FRAME_DATA, b"abc"), b"\x02\x00\x00\x00\x03abc")
        self.assertEqual(requestplane.encode_frame(requestplane.FRAME_END), b"\x03\x00\x00\x00\x00")
        body = requestplane.encode_error("invalid_argument", "bad")
        self.assertEqual(body, struct.pack(">H", 16) + b"invalid_argument" + b"bad")


if __name__ == "__main__":
    unittest.main()


class LeaseErrorTest(unittest.TestCase):
    """worker.py's reading of a lease error's google.rpc.ErrorInfo reason and
    its full-jitter backoff."""

    @staticmethod
    def _status(details):
        import grpc
        from google.protobuf import any_pb2

        def ld(num, b):  # a length-delimited field, lengths < 128
            return bytes([num << 3 | 2, len(b)]) + b

        body = ld(2, b"lease gone")
        for type_url, info in details:
            body += ld(3, any_pb2.Any(type_url=type_url, value=info).SerializeToString())

        class Err(grpc.RpcError):
            def code(self):
                return grpc.StatusCode.NOT_FOUND

            def trailing_metadata(self):
                return (("grpc-status-details-bin", body),)
        return Err()

    def test_error_reason(self):
        import worker
        info = bytes([1 << 3 | 2, 15]) + b"LEASE_NOT_FOUND" + bytes([2 << 3 | 2, 10]) + b"switchyard"
        cases = [
            ("error info", [("type.googleapis.com/google.rpc.ErrorInfo", info)], "LEASE_NOT_FOUND", True),
            ("other detail first", [("type.googleapis.com/google.rpc.RetryInfo", b"\x0a\x00"),
                                    ("type.googleapis.com/google.rpc.ErrorInfo", info)], "LEASE_NOT_FOUND", True),
            ("no details", [], "", False),
            ("truncated", [("type.googleapis.com/google.rpc.ErrorInfo", info[:5])], "", False),
        ]
        for name, details, reason, gone in cases:
            with self.subTest(name):
                err = self._status(details)
                self.assertEqual(worker.error_reason(err), reason)
                self.assertEqual(worker.lease_gone(err), gone)

    def test_plain_rpc_error_is_not_lease_gone(self):
        import grpc
        import worker
        self.assertFalse(worker.lease_gone(grpc.RpcError("keep-alive stream ended")))
        self.assertEqual(worker.error_reason(grpc.RpcError("x")), "")

    def test_full_jitter_bounds(self):
        import worker
        for attempt, cap in [(0, 0.05), (1, 0.1), (3, 0.4), (10, 5.0), (1000, 5.0)]:
            for _ in range(50):
                w = worker.full_jitter(attempt)
                self.assertTrue(0 <= w <= cap, (attempt, w))


class TokenizerTest(unittest.TestCase):
    def test_tokenizer_object(self):
        import worker
        # pkg/wire.TokenizerObject's examples (wire_test.go).
        for model, name, want in [("Qwen/Qwen3-0.6B", "tokenizer.json", "Qwen--Qwen3-0.6B/tokenizer.json"),
                                  ("my model/x", "vocab.txt", "my_model--x/vocab.txt"),
                                  ("plain", "tokenizer.json.gz", "plain/tokenizer.json.gz")]:
            self.assertEqual(worker.tokenizer_object(model, name), want)

    def test_tokenizer_files(self):
        import os
        import tempfile
        import worker
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "tokenizer_config.json"), "w").close()
            with self.assertRaises(ValueError):
                worker.tokenizer_files(d)
            open(os.path.join(d, "tokenizer.json.gz"), "w").close()
            open(os.path.join(d, "other.txt"), "w").close()
            self.assertEqual([os.path.basename(p) for p in worker.tokenizer_files(d)],
                             ["tokenizer.json.gz", "tokenizer_config.json"])
