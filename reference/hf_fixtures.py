"""Fixtures from Hugging Face transformers itself: a tiny random GPT-2 and a tiny random RWKV-4,
saved in their own safetensors format with the logits transformers computes for a token sequence.
The C++ engine loads these directories directly and must reproduce the logits
(tests/engine/test_hf_import.cc). Needs `transformers` (run on the GPU host, where it is installed;
the models run on its CPU):

  python3 reference/hf_fixtures.py --out tests/golden_hf
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mixserve_ref import safetensors_io  # noqa: E402


def gpt2(out):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=97, n_positions=48, n_embd=32, n_layer=2, n_head=4, n_inner=None,
                     activation_function="gelu_new", bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # random, not the tiny init, so every term matters
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def rwkv4(out):
    from transformers import RwkvConfig, RwkvForCausalLM
    cfg = RwkvConfig(vocab_size=97, context_length=48, hidden_size=32, num_hidden_layers=2,
                     attention_hidden_size=32, intermediate_size=64, rescale_every=0, tie_word_embeddings=False)
    torch.manual_seed(1)
    model = RwkvForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "time_mix" in name:
                p.uniform_(0, 1)
            elif "time_decay" in name:
                p.normal_(-0.5, 1.0)
            else:
                p.normal_(0, 0.3)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/golden_hf")
    args = ap.parse_args()
    import transformers
    g = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, 97, (1, 24), generator=g)
    for name, make in (("gpt2", gpt2), ("rwkv4", rwkv4)):
        path = os.path.join(args.out, name)
        model = make(path)
        model.save_pretrained(path, safe_serialization=True)
        with torch.no_grad():
            logits = model(tokens).logits[0].float()
        safetensors_io.save({"tokens": tokens[0].to(torch.int32), "logits": logits},
                            os.path.join(path, "expected.safetensors"),
                            {"transformers": transformers.__version__, "torch": torch.__version__})
        for f in ("generation_config.json",):
            if os.path.exists(os.path.join(path, f)):
                os.remove(os.path.join(path, f))
        print(name, "->", path, sorted(os.listdir(path)), "logits", tuple(logits.shape))


if __name__ == "__main__":
    main()
