"""Generates text from a model directory with the reference's recurrent (decode) form.

  /usr/bin/python3 reference/generate.py models/zoo/attention --prompt "And God said" --seed 7

Top-p sampling (p = 0.6 by default, as in the Extractor paper's Table 2) from a seeded generator.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from mixserve_ref.model import Model  # noqa: E402


def top_p_sample(logits, p, gen):
    probs = torch.softmax(logits.double(), -1)
    sorted_p, ids = probs.sort(descending=True)
    keep = (sorted_p.cumsum(-1) - sorted_p) < p  # smallest prefix reaching p
    sorted_p = sorted_p * keep
    choice = torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=gen)
    return int(ids[choice])


@torch.no_grad()
def generate(model, sp, prompt, max_tokens, top_p, seed):
    """Prompt + completion as text: the prompt is fed token by token through step(), then up to
    max_tokens are sampled (fewer when max_seq_len is reached or EOS is drawn)."""
    gen = torch.Generator().manual_seed(seed)
    ids = sp.encode(prompt)
    states = model.init_state(1)
    logits = None
    for pos, tok in enumerate(ids):
        logits = model.step(torch.tensor([tok]), pos, states)[0]
    out = []
    for pos in range(len(ids), min(model.cfg.max_seq_len, len(ids) + max_tokens)):
        tok = top_p_sample(logits, top_p, gen)
        out.append(tok)
        if tok == model.cfg.eos_id:
            break
        logits = model.step(torch.tensor([tok]), pos, states)[0]
    return sp.decode(ids + out)


def tokenizer_path(model_dir):
    """The model's own tokenizer.model, else the repository's (every zoo model uses that one)."""
    own = os.path.join(model_dir, "tokenizer.model")
    return own if os.path.exists(own) else os.path.join(ROOT, "models", "tokenizer.model")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--max-tokens", type=int, default=80)
    ap.add_argument("--top-p", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(2)
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=tokenizer_path(args.model_dir))
    model = Model.load_dir(args.model_dir)
    print(generate(model, sp, args.prompt, args.max_tokens, args.top_p, args.seed))


if __name__ == "__main__":
    main()
