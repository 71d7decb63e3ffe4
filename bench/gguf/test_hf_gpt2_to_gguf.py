"""The GGUF writer read back by its own reader, on a tiny GPT-2 directory made here (llama.cpp
loading the real one is bench/peer_decode.py's check).

  /usr/bin/python3 -m pytest -q bench/gguf
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_gpt2_to_gguf as g  # noqa: E402


def tiny_gpt2(d, n_layer=2, n_pos=6, dtype=np.float16):
    vocab = {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġa": 4, "<|endoftext|>": 5}
    rng = np.random.default_rng(1)
    w = {"transformer.wte.weight": rng.standard_normal((len(vocab), d)), "transformer.wpe.weight": rng.standard_normal((n_pos, d)),
         "transformer.ln_f.weight": rng.standard_normal(d), "transformer.ln_f.bias": rng.standard_normal(d)}
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        for name, shape in (("ln_1.weight", (d,)), ("ln_1.bias", (d,)), ("ln_2.weight", (d,)), ("ln_2.bias", (d,)),
                            ("attn.c_attn.weight", (d, 3 * d)), ("attn.c_attn.bias", (3 * d,)),
                            ("attn.c_proj.weight", (d, d)), ("attn.c_proj.bias", (d,)),
                            ("mlp.c_fc.weight", (d, 4 * d)), ("mlp.c_fc.bias", (4 * d,)),
                            ("mlp.c_proj.weight", (4 * d, d)), ("mlp.c_proj.bias", (d,))):
            w[p + name] = rng.standard_normal(shape)
    w = {k: v.astype(dtype) for k, v in w.items()}
    config = {"model_type": "gpt2", "vocab_size": len(vocab), "n_positions": n_pos, "n_embd": d, "n_layer": n_layer,
              "n_head": 2, "n_inner": None, "layer_norm_epsilon": 1e-5, "bos_token_id": 5, "eos_token_id": 5}
    return w, config, vocab, ["a b", "Ġ a"]


def write_dir(path, w, config, vocab, merges):
    os.makedirs(path, exist_ok=True)
    header, offset = {}, 0
    for k, a in w.items():
        header[k] = {"dtype": "F16" if a.dtype == np.float16 else "F32", "shape": list(a.shape),
                     "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    head = json.dumps(header).encode()
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(a.tobytes() for a in w.values()))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(path, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(path, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")


def test_round_trip(tmp_path):
    d = 8
    w, config, vocab, merges = tiny_gpt2(d)
    write_dir(tmp_path / "hf", w, config, vocab, merges)
    out = str(tmp_path / "m.gguf")
    g.convert(str(tmp_path / "hf"), out)
    raw = open(out, "rb").read()
    assert raw[:4] == b"GGUF" and struct.unpack_from("<I", raw, 4)[0] == 3
    version, meta, t = g.read_gguf(out)
    assert version == 3
    assert meta["general.architecture"] == "gpt2" and meta["general.alignment"] == 32
    assert meta["gpt2.embedding_length"] == d and meta["gpt2.block_count"] == 2
    assert meta["gpt2.feed_forward_length"] == 4 * d and meta["gpt2.attention.head_count"] == 2
    assert meta["gpt2.context_length"] == 6 and meta["general.file_type"] == 1
    assert abs(meta["gpt2.attention.layer_norm_epsilon"] - 1e-5) < 1e-12
    assert meta["tokenizer.ggml.model"] == "gpt2"
    assert meta["tokenizer.ggml.tokens"] == ["a", "b", "Ġ", "ab", "Ġa", "<|endoftext|>"]
    assert meta["tokenizer.ggml.token_type"] == [1, 1, 1, 1, 1, 3]
    assert meta["tokenizer.ggml.merges"] == merges
    assert meta["tokenizer.ggml.eos_token_id"] == 5 and meta["tokenizer.ggml.add_bos_token"] is False
    assert len(t) == 4 + 12 * 2 and "output.weight" not in t  # tied head: llama.cpp reuses token_embd
    # Conv1D [in, out] becomes [out, in] (ggml dims {in, out}); 1-D tensors become F32.
    np.testing.assert_array_equal(t["blk.1.attn_qkv.weight"], w["transformer.h.1.attn.c_attn.weight"].T)
    np.testing.assert_array_equal(t["blk.0.ffn_up.weight"], w["transformer.h.0.mlp.c_fc.weight"].T)
    np.testing.assert_array_equal(t["blk.0.ffn_down.weight"], w["transformer.h.0.mlp.c_proj.weight"].T)
    np.testing.assert_array_equal(t["token_embd.weight"], w["transformer.wte.weight"])
    assert t["blk.0.ffn_up.weight"].shape == (4 * d, d) and t["blk.0.ffn_up.weight"].dtype == np.float16
    assert t["blk.0.attn_norm.bias"].dtype == np.float32
    np.testing.assert_array_equal(t["output_norm.weight"], w["transformer.ln_f.weight"].astype(np.float32))


def test_f32_and_alignment(tmp_path):
    w, config, vocab, merges = tiny_gpt2(8, n_layer=1, dtype=np.float32)
    write_dir(tmp_path / "hf", w, config, vocab, merges)
    out = str(tmp_path / "m.gguf")
    g.convert(str(tmp_path / "hf"), out)
    _, meta, t = g.read_gguf(out)
    assert meta["general.file_type"] == 0 and t["blk.0.attn_output.weight"].dtype == np.float32
    for a in t.values():  # every tensor starts on the 32-byte alignment the spec asks for
        assert a.ctypes.data % 32 == 0  # the file is mapped at a page boundary
    g.convert(str(tmp_path / "hf"), out, outtype="f16")
    assert g.read_gguf(out)[2]["blk.0.ffn_up.weight"].dtype == np.float16


# --- Q8_0 and Q4_0 ---------------------------------------------------------------------------

def test_q8_0_block_by_hand():
    # amax 127 makes d exactly 1, so q is x rounded: halves go away from zero (roundf), not to even.
    row = np.zeros(32, np.float32)
    row[:8] = [127, -127, 0.5, -0.5, 1.5, 2.5, -2.5, 3.49]
    t = g.quantize_q8_0(row[None, :])
    assert t.ggml_type == g.GGML_Q8_0 and t.blocks.shape == (1, 1, 34)
    assert bytes(t.blocks[0, 0, :2]) == b"\x00\x3c"  # float16 1.0, little-endian
    assert list(t.blocks[0, 0, 2:10].view(np.int8)) == [127, -127, 1, -1, 2, 3, -3, 3]
    assert not t.blocks[0, 0, 10:].any()


def test_q4_0_block_by_hand():
    # Values -8, -7.5, ..., 7.5: the largest magnitude is -8, so d = -8 / -8 = 1 and
    # q = trunc(x + 8.5), clipped to 15: q_j = (j + 1) // 2, 16 for j = 31 clips to 15.
    row = (np.arange(32, dtype=np.float32) - 16) / 2
    t = g.quantize_q4_0(row[None, :])
    assert t.ggml_type == g.GGML_Q4_0 and t.blocks.shape == (1, 1, 18)
    assert bytes(t.blocks[0, 0, :2]) == b"\x00\x3c"
    q = [min(15, (j + 1) // 2) for j in range(32)]
    # Element j in byte j's low nibble, element 16 + j in its high nibble.
    assert list(t.blocks[0, 0, 2:]) == [q[j] | q[16 + j] << 4 for j in range(16)]
    # The signed maximum: a block whose largest magnitude is positive gets a negative d.
    t = g.quantize_q4_0(-row[None, :])
    assert t.scales()[0, 0] == -1
    # All zeros (of either sign): the reference's max stays +0, so d = +0 / -8 = -0, and every q = 8.
    t = g.quantize_q4_0(np.array([[-0.0] * 16 + [0.0] * 16], np.float32))
    assert bytes(t.blocks[0, 0, :2]) == b"\x00\x80" and set(t.blocks[0, 0, 2:]) == {0x88}


def test_round_trip_within_the_formats_bounds():
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((48, 256)) * rng.uniform(0.01, 3, (48, 1))).astype(np.float32)
    a[3, 40:64] = 0  # part of a block zero, and with an outlier:
    a[5, 70] = 50.0
    a[6, 96:128] = 0  # a whole block zero

    q8 = g.quantize_q8_0(a)
    d = q8.scales().astype(np.float32)
    d_exact = np.abs(a).reshape(48, 8, 32).max(-1) / np.float32(127)
    # |x - q d| <= d / 2 with the exact d; storing d in float16 moves q d by at most 127 |d - d16|.
    bound = d_exact / 2 + 127 * np.abs(d_exact - d) + 1e-6 * d_exact
    err = np.abs(g.dequantize(q8) - a).reshape(48, 8, 32).max(-1)
    assert (err <= bound).all()
    assert err.max() > 0.3 * d_exact.max() / 2  # the bound is not loose by far
    assert (g.dequantize(q8)[6, 96:128] == 0).all()

    q4 = g.quantize_q4_0(a)
    d = q4.scales().astype(np.float32)
    blocks = a.reshape(48, 8, 32)
    first = np.abs(blocks).argmax(-1)[..., None]
    d_exact = (np.take_along_axis(blocks, first, -1) / np.float32(-8))[..., 0]
    # q - 8 is x / d rounded, so |x - (q - 8) d| <= |d| / 2, except that x / d above 7.5 (only
    # toward the negation of the signed maximum) clips to 7: up to |d| there. Storing d in
    # float16 moves (q - 8) d by at most 8 |d - d16|.
    ratio = np.divide(blocks, d_exact[..., None], out=np.zeros_like(blocks), where=d_exact[..., None] != 0)
    allowed = np.where(ratio > 7.5, 1.0, 0.5) * np.abs(d_exact)[..., None] + 8 * np.abs(d_exact - d)[..., None]
    err = np.abs(g.dequantize(q4).reshape(48, 8, 32) - blocks)
    assert (err <= allowed + 1e-6 * np.abs(d_exact)[..., None]).all()
    # The value of largest magnitude is exact but for d's float16 rounding.
    np.testing.assert_allclose(np.take_along_axis(g.dequantize(q4).reshape(48, 8, 32), first, -1),
                               np.take_along_axis(blocks, first, -1), rtol=1e-3)
    assert (g.dequantize(q4)[6, 96:128] == 0).all()

    # The vectorized quantizers against the reference's per-element steps, on a few rows.
    for r in range(4):
        for b in range(8):
            x = a[r, 32 * b:32 * b + 32]
            amax, smax = np.float32(0), np.float32(0)
            for v in x:  # the reference's scan: the first value of the largest magnitude
                if amax < abs(v):
                    amax, smax = abs(v), v
            d8 = np.float32(amax / np.float32(127))
            i8 = np.float32(1) / d8 if d8 else np.float32(0)
            want8 = [int(np.sign(v * i8) * np.floor(abs(float(v * i8)) + 0.5)) for v in x]
            assert list(q8.blocks[r, b, 2:].view(np.int8)) == want8
            d4 = np.float32(smax / np.float32(-8))
            i4 = np.float32(1) / d4 if d4 else np.float32(0)
            want4 = [min(15, int(np.float32(v * i4) + np.float32(8.5))) for v in x]
            assert list(q4.blocks[r, b, 2:]) == [want4[j] | want4[16 + j] << 4 for j in range(16)]
            assert q4.scales()[r, b] == np.float16(d4) and q8.scales()[r, b] == np.float16(d8)


def test_quantized_file(tmp_path):
    d = 64  # rows of 64 and 256 values: whole blocks
    w, config, vocab, merges = tiny_gpt2(d)
    write_dir(tmp_path / "hf", w, config, vocab, merges)
    out = str(tmp_path / "m.gguf")
    for outtype, qtype, ftype in (("q8_0", g.GGML_Q8_0, 7), ("q4_0", g.GGML_Q4_0, 2)):
        g.convert(str(tmp_path / "hf"), out, outtype=outtype)
        raw = open(out, "rb").read()
        _, meta, t = g.read_gguf(out)
        assert meta["general.file_type"] == ftype
        quantized = {n for n, a in t.items() if isinstance(a, g.QuantizedTensor)}
        assert quantized == {"token_embd.weight"} | {f"blk.{i}.{m}.weight" for i in range(2)
                                                      for m in ("attn_qkv", "attn_output", "ffn_up", "ffn_down")}
        assert all(t[n].ggml_type == qtype for n in quantized)
        assert t["position_embd.weight"].dtype == np.float32  # as llama.cpp's converter keeps it
        assert all(t[n].dtype == np.float32 for n in t if n not in quantized)
        # The ggml type id and the dims in the tensor info: find the name, read what follows.
        name = b"blk.1.ffn_down.weight"
        at = raw.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
        n_dims, cols, rows, ttype = struct.unpack_from("<IQQI", raw, at)
        assert (n_dims, cols, rows, ttype) == (2, 4 * d, d, qtype)
        assert t["blk.1.ffn_down.weight"].nbytes == d * (4 * d // 32) * g.BLOCK_BYTES[qtype]
        # What the file holds is the quantizer's bytes of the transposed Conv1D weight.
        src = w["transformer.h.1.mlp.c_proj.weight"].T.astype(np.float32)
        np.testing.assert_array_equal(t["blk.1.ffn_down.weight"].blocks, g.QUANTIZERS[outtype](src).blocks)
        for a in t.values():  # quantized tensors too start on the 32-byte alignment
            assert (a.blocks if isinstance(a, g.QuantizedTensor) else a).ctypes.data % 32 == 0

    g.convert(str(tmp_path / "hf"), out, outtype="q4_0", token_embd_type="q8_0")
    _, _, t = g.read_gguf(out)
    assert t["token_embd.weight"].ggml_type == g.GGML_Q8_0 and t["blk.0.ffn_up.weight"].ggml_type == g.GGML_Q4_0


def test_rows_not_whole_blocks_stay_f16(tmp_path):
    d = 8  # rows of 8 (and 32 for ffn_down): only ffn_down's rows are whole blocks
    w, config, vocab, merges = tiny_gpt2(d)
    write_dir(tmp_path / "hf", w, config, vocab, merges)
    out = str(tmp_path / "m.gguf")
    g.convert(str(tmp_path / "hf"), out, outtype="q8_0")
    _, meta, t = g.read_gguf(out)
    assert meta["general.file_type"] == 7
    assert t["blk.0.ffn_down.weight"].ggml_type == g.GGML_Q8_0
    for n in ("token_embd.weight", "blk.0.attn_qkv.weight", "blk.0.ffn_up.weight", "blk.0.attn_output.weight"):
        assert t[n].dtype == np.float16
    np.testing.assert_array_equal(t["blk.0.ffn_up.weight"], w["transformer.h.0.mlp.c_fc.weight"].T)
