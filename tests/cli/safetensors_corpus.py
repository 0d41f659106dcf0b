"""A corpus of corrupted safetensors files, each with the error fp4moe must report.

Used by cli_checkpoints.py (each file must make `fp4moe inspect` exit 1 with that message, never
crash) and as the seed corpus of the libFuzzer target (fuzz/run_fuzz.sh):
    python3 tests/cli/safetensors_corpus.py --write DIR
Only the standard library: the files are built byte by byte.
"""
import json
import os
import struct
import sys


def st_file(header, data=b"", raw_header=None):
    """A safetensors file from a header dict (or raw header bytes) and data bytes."""
    text = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def tensor(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def valid_file():
    header = {"__metadata__": {"format": "pt"}, "w": tensor("F32", [2, 2], 0, 16), "b": tensor("U8", [4], 16, 20)}
    return st_file(header, bytes(range(20)))


def corpus():
    """(name, file bytes, expected message part) for every corruption kind."""
    good = valid_file()
    cases = [
        ("truncated.safetensors", good[:-3], "run past the end of the data"),
        ("too_short.safetensors", b"\x01\x02\x03", "too short for the 8-byte header length"),
        ("empty.safetensors", b"", "too short for the 8-byte header length"),
        ("header_too_large.safetensors", struct.pack("<Q", 200_000_000) + b"{}", "limit"),
        ("header_past_end.safetensors", struct.pack("<Q", 1000) + b"{}", "exceeds the file size"),
        ("bad_json.safetensors", st_file(None, b"", b'{"w": {"dtype": "F32",'), "not valid JSON"),
        ("not_object.safetensors", st_file(None, b"", b"[1, 2, 3]"), "does not start with '{'"),
        ("unknown_dtype.safetensors", st_file({"w": tensor("F7", [4], 0, 4)}, bytes(4)), "unknown dtype 'F7'"),
        ("lying_offsets.safetensors", st_file({"w": tensor("F32", [4], 0, 16)}, bytes(8)), "run past the end"),
        ("size_mismatch.safetensors", st_file({"w": tensor("F32", [3], 0, 8)}, bytes(8)), "needs 12"),
        ("overlap.safetensors",
         st_file({"a": tensor("F32", [2], 0, 8), "b": tensor("F32", [2], 4, 12)}, bytes(12)), "overlaps tensor 'a'"),
        ("gap.safetensors", st_file({"a": tensor("F32", [1], 4, 8)}, bytes(8)), "gap of 4 bytes"),
        ("trailing.safetensors", st_file({"a": tensor("F32", [1], 0, 4)}, bytes(9)), "5 bytes after the last tensor"),
        ("duplicate.safetensors",
         st_file(None, bytes(2), b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                 b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'), "duplicate key 'a'"),
        ("reversed.safetensors", st_file({"a": tensor("U8", [4], 4, 0)}, bytes(4)), "reversed"),
        ("negative_shape.safetensors", st_file({"a": tensor("U8", [-4], 0, 4)}, bytes(4)), "non-negative integers"),
        ("bad_metadata.safetensors", st_file({"__metadata__": {"k": 5}}, b""), "__metadata__"),
        ("unknown_field.safetensors",
         st_file({"a": dict(tensor("U8", [1], 0, 1), extra=1)}, bytes(1)), "unknown field 'extra'"),
        ("invalid_utf8.safetensors", st_file(None, b"", b'{"\xff": 1}'), "not valid JSON"),
    ]
    return cases


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "--write":
        sys.exit("usage: safetensors_corpus.py --write DIR")
    os.makedirs(sys.argv[2], exist_ok=True)
    files = corpus() + [("valid.safetensors", valid_file(), "")]
    for name, data, _ in files:
        with open(os.path.join(sys.argv[2], name), "wb") as f:
            f.write(data)
    print(f"wrote {len(files)} files to {sys.argv[2]}")


if __name__ == "__main__":
    main()
