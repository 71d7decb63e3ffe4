"""GPT-2's forward pass in float64 (numpy), the judge where mixserve's and llama.cpp's greedy
tokens differ: both compute in float32 (llama.cpp keeps K/V in float16 by default), so near-ties
can break either way; float64 on the same weights says which token is the argmax.

  logits = Gpt2F64(hf_dir).next_logits(token_ids)     # float64 logits after the last token
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gguf"))
from hf_gpt2_to_gguf import read_safetensors  # noqa: E402


class Gpt2F64:
    def __init__(self, hf_dir):
        with open(os.path.join(hf_dir, "config.json")) as f:
            self.cfg = json.load(f)
        raw = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
        self.w = {k.removeprefix("transformer."): v.astype(np.float64) for k, v in raw.items()}

    def _ln(self, x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        eps = self.cfg.get("layer_norm_epsilon", 1e-5)
        return (x - mu) / np.sqrt(var + eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def next_logits(self, ids):
        w, c = self.w, self.cfg
        n, d, heads = len(ids), c["n_embd"], c["n_head"]
        hd = d // heads
        x = w["wte.weight"][ids] + w["wpe.weight"][:n]
        causal = np.triu(np.full((n, n), -np.inf), 1)
        for i in range(c["n_layer"]):
            p = f"h.{i}."
            h = self._ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: x·W
            q, k, v = (h[:, j * d:(j + 1) * d].reshape(n, heads, hd).transpose(1, 0, 2) for j in range(3))
            s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + causal
            s = np.exp(s - s.max(-1, keepdims=True))
            o = (s / s.sum(-1, keepdims=True)) @ v
            x = x + o.transpose(1, 0, 2).reshape(n, d) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            h = self._ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
            h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))  # gelu_new
            x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        return self._ln(x[-1], "ln_f") @ w["wte.weight"].T  # tied head
