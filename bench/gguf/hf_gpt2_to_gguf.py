"""Hugging Face GPT-2 directory -> GGUF v3 file (architecture "gpt2") that llama.cpp loads.

  /usr/bin/python3 bench/gguf/hf_gpt2_to_gguf.py HF_DIR OUT.gguf [--outtype same|f32|f16|q8_0|q4_0]
      [--token-embd-type same|f16|q8_0|q4_0]

Written from the GGUF specification (ggml-org/ggml, docs/gguf.md: "File Structure",
"Standardized key-value pairs" and "Standardized tensor names"); the names of the hyperparameter
keys and tensors are the ones llama.cpp's gpt2 loader asks for. Only numpy is needed.

Layout (little-endian throughout):
  header:   "GGUF", uint32 version 3, uint64 tensor_count, uint64 metadata_kv_count,
            then the key-value pairs (key string, uint32 value type, value)
  tensors:  per tensor: name string, uint32 n_dims, uint64 dims[n_dims] (ggml order: the first
            dimension is the contiguous one, so a numpy [rows, cols] array is dims [cols, rows]),
            uint32 ggml type, uint64 offset into the data section (a multiple of the alignment)
  padding to general.alignment, then the data section, each tensor padded to the alignment.
A string is a uint64 byte length and UTF-8 bytes, no terminator.

Reads config.json, model.safetensors (F32 or F16) and the tokenizer: vocab.json + merges.txt or
a byte-level BPE tokenizer.json. Matrices keep the checkpoint's type (or --outtype); 1-D tensors
(layer norms, biases) are always F32, as llama.cpp's CPU kernels expect.

Quantized files (--outtype q8_0 / q4_0), written from ggml's block formats (ggml-common.h's
block_q8_0 / block_q4_0 and ggml-quants.c's reference quantizers, quantize_row_q8_0_ref and
quantize_row_q4_0_ref, the ones llama.cpp uses to make model files deterministically):
  - each row is cut into blocks of 32 consecutive values (QK8_0 = QK4_0 = 32);
  - Q8_0 block (34 bytes): float16 d = amax / 127 (amax: the largest |x|), then 32 int8
    q = roundf(x / d) (halves away from zero); the value is d * q;
  - Q4_0 block (18 bytes): float16 d = max / -8, where max is the value of largest magnitude
    with its sign (the first such), then 16 bytes: q = min(15, (int8)(x / d + 8.5)), element j
    (0..15) in the low nibble of byte j and element 16 + j in its high nibble; the value is
    d * (q - 8). The value of largest magnitude gets q = 0 (exact but for d's float16 rounding);
    its negation, if present, clips to q = 15, i.e. 7 d.
  The arithmetic is float32 with a float32 1/d, as in C; d is rounded to float16 only when
  stored. An all-zero block has d = 0 and q = 0 (Q8_0) or 8 (Q4_0).
What is quantized follows llama.cpp: its converter (convert_hf_to_gguf.py --outtype q8_0)
quantizes every 2-D ".weight" except the position embeddings, which it keeps F32; 1-D tensors
(norms, biases) stay F32. So here attn_qkv, attn_output, ffn_up, ffn_down and token_embd (which is
also the tied head; output.weight when the head is untied) are quantized, position_embd is F32,
norms and biases F32. A matrix whose rows are not a multiple of 32 long stays F16, as the
converter falls back to F16 for it. Q4_0: llama.cpp's converter has no q4_0; llama-quantize makes
it, and by default it gives the tied head (token_embd) the k-quant Q6_K, which is not written
here: token_embd is Q4_0 as with `llama-quantize --pure`, or --token-embd-type (as
llama-quantize's --token-embedding-type) picks f16 or q8_0 for it. general.file_type is
llama_ftype MOSTLY_Q8_0 (7) or MOSTLY_Q4_0 (2).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32  # the spec's default; written as general.alignment anyway

# gguf_metadata_value_type
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)
# ggml_type of the tensors written here
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8
QK = 32  # values per block, Q8_0 and Q4_0 alike
BLOCK_BYTES = {GGML_Q8_0: 2 + QK, GGML_Q4_0: 2 + QK // 2}  # float16 d, then the quants
# llama_ftype, general.file_type: what most of the matrices are
FILE_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7}
# tokenizer.ggml.token_type
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3

_SCALAR = {T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I", T_INT32: "<i",
           T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d"}


# --- ggml's Q8_0 and Q4_0 blocks ------------------------------------------------------------

class QuantizedTensor:
    """A matrix in one of ggml's block formats. shape: numpy's [rows, cols]; blocks: uint8
    [rows, cols / 32, bytes a block], each block its float16 d (little-endian) and its quants."""

    def __init__(self, ggml_type, shape, blocks):
        self.ggml_type, self.shape, self.blocks = ggml_type, tuple(shape), blocks

    @property
    def nbytes(self):
        return self.blocks.nbytes

    def scales(self):
        """d of every block, float16 [rows, cols / 32]."""
        return np.ascontiguousarray(self.blocks[..., :2]).view("<f2")[..., 0]


def _blocks_of(a):
    a = np.asarray(a, dtype=np.float32)
    rows, cols = a.shape
    if cols % QK:
        raise ValueError(f"rows of {cols} values are not whole blocks of {QK}")
    return a.reshape(rows, cols // QK, QK)


def _inverse(d):
    """1/d in float32, 0 where d is 0 (the reference's `d ? 1.0f/d : 0.0f`)."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)


def _pack(d, quants):
    """Blocks of float16 d followed by the quant bytes."""
    d16 = d.astype("<f2").view(np.uint8)  # [rows, blocks, 2]
    return np.concatenate([d16, quants.view(np.uint8)], axis=-1)


def quantize_q8_0(a):
    x = _blocks_of(a)
    d = np.abs(x).max(axis=-1, keepdims=True) / np.float32(127)
    scaled = x * _inverse(d)  # float32, as the reference
    # roundf: halves away from zero (numpy's round takes halves to even). float64 makes
    # |v| + 0.5 exact for these |v| <= 127.
    q = np.sign(scaled) * np.floor(np.abs(scaled).astype(np.float64) + 0.5)
    return QuantizedTensor(GGML_Q8_0, a.shape, _pack(d, q.astype(np.int8)))


def quantize_q4_0(a):
    x = _blocks_of(a)
    first_largest = np.abs(x).argmax(axis=-1)[..., None]
    signed_max = np.take_along_axis(x, first_largest, axis=-1)
    # All zeros: the reference never updates its max from +0.0, whatever the signs of the zeros.
    signed_max = np.where(signed_max == 0, np.float32(0), signed_max)
    d = signed_max / np.float32(-8)
    # x / d lies in [-8, 8], so x / d + 8.5 is positive and the int8 cast is a truncation.
    q = np.minimum(15, np.trunc(x * _inverse(d) + np.float32(8.5))).astype(np.uint8)
    nibbles = q[..., :QK // 2] | (q[..., QK // 2:] << 4)
    return QuantizedTensor(GGML_Q4_0, a.shape, _pack(d, nibbles))


def dequantize(t):
    """float32 [rows, cols] of a QuantizedTensor: d * q (Q8_0), d * (q - 8) (Q4_0)."""
    d = t.scales().astype(np.float32)[..., None]
    quants = t.blocks[..., 2:]
    if t.ggml_type == GGML_Q8_0:
        q = quants.view(np.int8).astype(np.float32)
    elif t.ggml_type == GGML_Q4_0:
        q = np.concatenate([quants & 0x0F, quants >> 4], axis=-1).astype(np.float32) - 8
    else:
        raise ValueError(f"ggml type {t.ggml_type} is not a block format here")
    return (d * q).reshape(t.shape)


QUANTIZERS = {"q8_0": quantize_q8_0, "q4_0": quantize_q4_0}


# --- writing -------------------------------------------------------------------------------

def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, value):
    """The bytes of one metadata value; value is (element type, list) for an array."""
    if vtype == T_STRING:
        return _string(value)
    if vtype == T_ARRAY:
        etype, items = value
        if etype == T_STRING:
            body = b"".join(_string(x) for x in items)
        else:  # a packed array of one scalar type
            body = np.asarray(items, dtype=np.dtype(_SCALAR[etype])).tobytes()
        return struct.pack("<IQ", etype, len(items)) + body
    return struct.pack(_SCALAR[vtype], value)


def _pad(n):
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def _ggml_type(a):
    if isinstance(a, QuantizedTensor):
        return a.ggml_type
    return {np.dtype(np.float32): GGML_F32, np.dtype(np.float16): GGML_F16}[a.dtype]


def _data(a):
    if isinstance(a, QuantizedTensor):
        return np.ascontiguousarray(a.blocks).tobytes()
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


def write_gguf(path, metadata, tensors):
    """metadata: list of (key, value type, value); tensors: list of (name, numpy array F32/F16
    or QuantizedTensor)."""
    kv = [("general.alignment", T_UINT32, ALIGNMENT)] + [m for m in metadata if m[0] != "general.alignment"]
    head = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kv))
    for key, vtype, value in kv:
        head += _string(key) + struct.pack("<I", vtype) + _value(vtype, value)
    offset = 0
    for name, a in tensors:
        if not isinstance(a, QuantizedTensor) and a.dtype not in (np.float32, np.float16):
            raise ValueError(f"{name}: {a.dtype} cannot be written (F32, F16, Q8_0 and Q4_0 only)")
        if len(name.encode()) > 64:
            raise ValueError(f"{name}: tensor names are at most 64 bytes")
        dims = a.shape[::-1]  # ggml order: contiguous dimension first
        head += _string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        head += struct.pack("<IQ", _ggml_type(a), offset)
        offset += a.nbytes + _pad(a.nbytes)
    with open(path, "wb") as f:
        f.write(head + b"\0" * _pad(len(head)))
        for _, a in tensors:
            f.write(_data(a))
            f.write(b"\0" * _pad(a.nbytes))


# --- reading (tests and checks; the inverse of write_gguf) ---------------------------------

def read_gguf(path):
    """Returns (version, {key: value}, {name: numpy array or QuantizedTensor}); arrays are
    read-only views of the file."""
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    data = memoryview(buf)
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = bytes(data[pos:pos + n]).decode("utf-8")
        pos += n
        return s

    def value(vtype):
        if vtype == T_STRING:
            return string()
        if vtype == T_ARRAY:
            etype, n = take("<IQ")
            return [value(etype) for _ in range(n)]
        return take(_SCALAR[vtype])

    if bytes(data[:4]) != GGUF_MAGIC:
        raise ValueError(f"{path}: not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = take("<IQQ")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        n_dims = take("<I")
        dims = [take("<Q") for _ in range(n_dims)]
        ttype, offset = take("<IQ")
        infos.append((name, dims, ttype, offset))
    align = meta.get("general.alignment", 32)
    start = pos + (align - pos % align) % align
    tensors = {}
    for name, dims, ttype, offset in infos:
        if ttype in BLOCK_BYTES:
            cols, rows = dims
            shape = (rows, cols // QK, BLOCK_BYTES[ttype])
            blocks = np.frombuffer(buf, dtype=np.uint8, count=int(np.prod(shape)), offset=start + offset)
            tensors[name] = QuantizedTensor(ttype, (rows, cols), blocks.reshape(shape))
            continue
        dt = {GGML_F32: np.float32, GGML_F16: np.float16}[ttype]
        count = int(np.prod(dims))
        tensors[name] = np.frombuffer(buf, dtype=dt, count=count, offset=start + offset).reshape(dims[::-1])
    return version, meta, tensors


# --- Hugging Face GPT-2 --------------------------------------------------------------------

def read_safetensors(path):
    """{name: numpy array} of an F32/F16 safetensors file (8-byte header length, JSON header, data)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        raw = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "F16": np.float16}.get(t["dtype"])
        if dt is None:
            raise ValueError(f"{path}: {name} is {t['dtype']} (F32 and F16 only)")
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(raw[b:e], dtype=np.dtype(dt).newbyteorder("<")).reshape(t["shape"])
    return out


def read_tokenizer(hf_dir):
    """(tokens by id, merges as "a b" strings, set of special token ids) of a byte-level BPE."""
    tj = os.path.join(hf_dir, "tokenizer.json")
    if os.path.exists(tj):
        with open(tj, encoding="utf-8") as f:
            t = json.load(f)
        model = t["model"]
        if model.get("type") != "BPE":
            raise ValueError(f"{tj}: a {model.get('type')} model; only byte-level BPE converts to gpt2")
        vocab = dict(model["vocab"])
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        special = set()
        for a in t.get("added_tokens", []):
            vocab[a["content"]] = a["id"]
            if a.get("special"):
                special.add(a["id"])
    else:
        with open(os.path.join(hf_dir, "vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        with open(os.path.join(hf_dir, "merges.txt"), encoding="utf-8") as f:
            merges = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#version")]
        # GPT-2's files mark no special tokens; <|endoftext|> is the one it has.
        special = {vocab["<|endoftext|>"]} if "<|endoftext|>" in vocab else set()
    tokens = [None] * (max(vocab.values()) + 1)
    for tok, i in vocab.items():
        tokens[i] = tok
    if any(t is None for t in tokens):
        raise ValueError(f"{hf_dir}: token ids are not contiguous from 0")
    return tokens, merges, special


def convert(hf_dir, out_path, outtype="same", token_embd_type="same"):
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "gpt2":
        raise ValueError(f"{hf_dir}: model_type {cfg.get('model_type')!r}, not gpt2")
    d, n_layer, n_head = cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
    n_ff = cfg.get("n_inner") or 4 * d
    if cfg.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError("llama.cpp's gpt2 runs the tanh GELU only")
    w = {k[len("transformer."):] if k.startswith("transformer.") else k: v
         for k, v in read_safetensors(os.path.join(hf_dir, "model.safetensors")).items()}
    if outtype == "same":
        outtype = "f16" if w["wte.weight"].dtype == np.float16 else "f32"
    if token_embd_type == "same":
        token_embd_type = outtype

    def mat(a, kind=None):  # 2-D: the chosen type; a quantized type needs whole blocks per row
        kind = kind or outtype
        if kind in QUANTIZERS and a.shape[1] % QK == 0:
            return QUANTIZERS[kind](a)
        return np.ascontiguousarray(a).astype(np.float32 if kind == "f32" else np.float16)

    def vec(a):  # 1-D: F32
        return np.ascontiguousarray(a).astype(np.float32)

    # HF's Conv1D stores [in, out]; ggml multiplies by a [out rows, in columns] matrix (dims
    # {in, out}), i.e. PyTorch's Linear layout, so every Conv1D weight is transposed. c_attn's
    # output columns are q, then k, then v: llama.cpp's gpt2 splits attn_qkv the same way.
    # llama.cpp's converter keeps the position embeddings F32 in a quantized file.
    pos_kind = "f32" if outtype in QUANTIZERS else outtype
    t = [("token_embd.weight", mat(w["wte.weight"], token_embd_type)),  # dims {n_embd, n_vocab}
         ("position_embd.weight", mat(w["wpe.weight"], pos_kind)),      # dims {n_embd, n_ctx}
         ("output_norm.weight", vec(w["ln_f.weight"])),
         ("output_norm.bias", vec(w["ln_f.bias"]))]
    if "lm_head.weight" in w and not cfg.get("tie_word_embeddings", True):
        t.append(("output.weight", mat(w["lm_head.weight"], token_embd_type)))
    # Tied (GPT-2's default): no output.weight; llama.cpp's loader then uses token_embd for the head.
    for i in range(n_layer):
        h, b = f"h.{i}.", f"blk.{i}."
        t += [(b + "attn_norm.weight", vec(w[h + "ln_1.weight"])), (b + "attn_norm.bias", vec(w[h + "ln_1.bias"])),
              (b + "attn_qkv.weight", mat(w[h + "attn.c_attn.weight"].T)), (b + "attn_qkv.bias", vec(w[h + "attn.c_attn.bias"])),
              (b + "attn_output.weight", mat(w[h + "attn.c_proj.weight"].T)), (b + "attn_output.bias", vec(w[h + "attn.c_proj.bias"])),
              (b + "ffn_norm.weight", vec(w[h + "ln_2.weight"])), (b + "ffn_norm.bias", vec(w[h + "ln_2.bias"])),
              (b + "ffn_up.weight", mat(w[h + "mlp.c_fc.weight"].T)), (b + "ffn_up.bias", vec(w[h + "mlp.c_fc.bias"])),
              (b + "ffn_down.weight", mat(w[h + "mlp.c_proj.weight"].T)), (b + "ffn_down.bias", vec(w[h + "mlp.c_proj.bias"]))]
    if t[0][1].shape != (cfg["vocab_size"], d) or t[1][1].shape != (cfg["n_positions"], d):
        raise ValueError(f"{hf_dir}: wte/wpe shapes do not match config.json")

    tokens, merges, special = read_tokenizer(hf_dir)
    if len(tokens) > cfg["vocab_size"]:
        raise ValueError(f"{hf_dir}: {len(tokens)} tokens but vocab_size {cfg['vocab_size']}")
    # llama.cpp takes the vocabulary size from the token list: pad it to the embedding's rows.
    tokens += [f"[PAD{i}]" for i in range(len(tokens), cfg["vocab_size"])]
    types = [TOKEN_CONTROL if i in special else TOKEN_NORMAL for i in range(len(tokens))]
    eos = cfg.get("eos_token_id", 50256)
    bos = cfg.get("bos_token_id", eos)
    meta = [
        ("general.architecture", T_STRING, "gpt2"),
        ("general.name", T_STRING, os.path.basename(os.path.normpath(hf_dir))),
        ("general.file_type", T_UINT32, FILE_TYPE[outtype]),
        ("gpt2.context_length", T_UINT32, cfg["n_positions"]),
        ("gpt2.embedding_length", T_UINT32, d),
        ("gpt2.block_count", T_UINT32, n_layer),
        ("gpt2.feed_forward_length", T_UINT32, n_ff),
        ("gpt2.attention.head_count", T_UINT32, n_head),
        ("gpt2.attention.layer_norm_epsilon", T_FLOAT32, cfg.get("layer_norm_epsilon", 1e-5)),
        ("tokenizer.ggml.model", T_STRING, "gpt2"),
        ("tokenizer.ggml.pre", T_STRING, "gpt-2"),  # GPT-2's pre-tokenizer regex
        ("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, tokens)),
        ("tokenizer.ggml.token_type", T_ARRAY, (T_INT32, types)),
        ("tokenizer.ggml.merges", T_ARRAY, (T_STRING, merges)),
        ("tokenizer.ggml.bos_token_id", T_UINT32, bos),
        ("tokenizer.ggml.eos_token_id", T_UINT32, eos),
        ("tokenizer.ggml.add_bos_token", T_BOOL, False),  # GPT-2 prompts start without one
    ]
    write_gguf(out_path, meta, t)
    return meta, t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["same", "f32", "f16", "q8_0", "q4_0"], default="same",
                    help="type of the matrices (default: the checkpoint's)")
    ap.add_argument("--token-embd-type", choices=["same", "f16", "q8_0", "q4_0"], default="same",
                    help="type of token_embd (the tied head) and output.weight (default: --outtype's)")
    args = ap.parse_args()
    meta, t = convert(args.hf_dir, args.out, args.outtype, args.token_embd_type)
    print(f"hf_gpt2_to_gguf: {args.out}: {len(t)} tensors, {len(meta) + 1} metadata keys, "
          f"{os.path.getsize(args.out) / 1e6:.1f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
