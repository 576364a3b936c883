"""Minimal pure-Python safetensors writer and reader (numpy arrays in, numpy arrays out).

Format: 8-byte little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, padded with
spaces to a multiple of 8 bytes, then the raw little-endian row-major bytes of every tensor.
"""
import json
import struct

import numpy as np

DTYPES = {"F64": "<f8", "F32": "<f4", "I64": "<i8", "I32": "<i4", "U32": "<u4", "U16": "<u2", "U8": "u1"}
_NAME_OF = {np.dtype(v): k for k, v in DTYPES.items()}


def dtype_name(array):
    name = _NAME_OF.get(array.dtype.newbyteorder("<"))
    if name is None:
        raise ValueError(f"dtype {array.dtype} has no safetensors name; convert to one of {list(DTYPES)}")
    return name


def encode(tensors, metadata=None):
    """tensors: dict name -> numpy array (kept in the given order). Returns the file's bytes."""
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, array in tensors.items():
        dtype = dtype_name(array)
        raw = np.ascontiguousarray(array, dtype=DTYPES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(chunks)


def decode(data):
    """Inverse of encode: returns (dict name -> numpy array, metadata dict). Validates offsets."""
    if len(data) < 8:
        raise ValueError("truncated: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"header length {n} runs past the end of the data ({len(data)} bytes)")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    body = memoryview(data)[8 + n :]
    tensors, spans = {}, []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = np.dtype(DTYPES[info["dtype"]])
        count = int(np.prod(info["shape"], dtype=np.int64))
        if not 0 <= begin <= end <= len(body) or end - begin != count * dtype.itemsize:
            raise ValueError(f"tensor {name!r}: offsets {begin}..{end} do not fit its shape or the file")
        spans.append((begin, end, name))
        tensors[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(info["shape"]).copy()
    spans.sort()
    for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:]):
        if begin_b < end_a:
            raise ValueError(f"tensors {a!r} and {b!r} overlap")
    return tensors, metadata


def write(path, tensors, metadata=None):
    with open(path, "wb") as f:
        f.write(encode(tensors, metadata))


def read(path):
    with open(path, "rb") as f:
        return decode(f.read())
