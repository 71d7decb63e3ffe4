"""Minimal safetensors writer and reader (the format: 8-byte little-endian header length, JSON
header, raw little-endian tensor bytes). Debian has no python safetensors package, and the format
is small enough to implement exactly; the C++ loader reads what this writes."""
import json
import struct

import numpy as np
import torch

_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int32: "I32",
           torch.int64: "I64", torch.float64: "F64", torch.bool: "BOOL"}
_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.int16, "I32": np.int32, "I64": np.int64,
       "F64": np.float64, "BOOL": np.bool_}
_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "F64": 8, "BOOL": 1}


def _bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()


def save(tensors, path, metadata=None):
    """Write {name: tensor} in sorted name order, data 8-byte aligned after the header."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _DTYPES:
            raise ValueError(f"{name}: unsupported dtype {t.dtype}")
        b = _bytes(t)
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    """Read {name: tensor}; returns (tensors, metadata). Validates offsets and sizes."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: truncated (no header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} exceeds file size {len(data)}")
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        dt, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        count = int(np.prod(shape)) if shape else 1
        if e - b != count * _SIZE[dt] or e > len(body):
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {b}..{e}")
        arr = np.frombuffer(body[b:e], dtype=np.dtype(_NP[dt]).newbyteorder("<")).reshape(shape)
        t = torch.from_numpy(arr.astype(arr.dtype.newbyteorder("="), copy=True))
        if dt == "BF16":
            t = t.view(torch.bfloat16)
        out[name] = t
    return out, meta
