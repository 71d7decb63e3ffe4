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
