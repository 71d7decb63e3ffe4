"""Trains the per-mixer zoo with the Extractor paper's protocol: the same data, batches and batch
order for every model, only the mixer differs (Table 1: AdamW lr 1e-3, betas (0.9, 0.999),
dropout 0.1, weights N(0, 0.01), biases 0; batch 64 × l = 128).

  /usr/bin/python3 reference/train.py --mixers all --steps 3000 --device cuda --parallel 12
  /usr/bin/python3 reference/train.py --mixers me --steps 200 --batch 16 --device cpu   # CPU

Needs reference/data/{train,val}.u16 (reference/data.py). Writes each model's best checkpoint (by
validation loss) to --out/<name>/ (config.json, model.safetensors in float16, tokenizer.model link)
and its learning curve to --out/<name>/train_log.json.
"""
import argparse
import copy
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mixserve_ref.config import ModelConfig  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def zoo_config(name, zoo):
    spec = zoo["models"][name]
    base = dict(zoo["base"], **spec.get("config", {}))
    base["layers"] = [dict(spec["layer"]) for _ in range(base["n_layers"])]
    return ModelConfig(**base)


class Batches:
    """Random windows of l+1 tokens; the sequence of batches depends only on the seed."""

    def __init__(self, tokens, batch, length, seed):
        self.tokens, self.batch, self.length = tokens, batch, length
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def next(self):
        starts = self.rng.integers(0, len(self.tokens) - self.length - 1, size=self.batch)
        w = np.stack([self.tokens[s:s + self.length + 1] for s in starts]).astype(np.int64)
        return torch.from_numpy(w)


def val_windows(tokens, length):
    n = (len(tokens) - 1) // length
    return torch.from_numpy(np.stack([tokens[i * length:i * length + length + 1] for i in range(n)]).astype(np.int64))


@torch.no_grad()
def evaluate(model, windows, device, batch=64):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch].to(device)
        logits = model(w[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum").item()
        count += w[:, 1:].numel()
    model.train()
    return total / count


def train_one(name, args):
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    zoo = json.load(open(args.zoo))
    cfg = zoo_config(name, zoo)
    data = os.path.join(HERE, "data")
    train_tokens = np.fromfile(os.path.join(data, "train.u16"), dtype=np.uint16)
    val = val_windows(np.fromfile(os.path.join(data, "val.u16"), dtype=np.uint16), cfg.max_seq_len)
    if args.val_windows:
        val = val[: args.val_windows]
    torch.manual_seed(args.seed)
    model = Model(cfg, dropout=args.dropout).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr,
                            betas=(0.9, 0.999), weight_decay=args.weight_decay)
    batches = Batches(train_tokens, args.batch, cfg.max_seq_len, args.data_seed)
    log = {"name": name, "config": cfg.to_dict(), "params": n_params, "steps": [], "train_loss": [],
           "val_steps": [], "val_loss": [], "command": " ".join(sys.argv), "seed": args.seed,
           "data_seed": args.data_seed, "torch": torch.__version__, "device": device_name(device),
           "batch": args.batch, "lr": args.lr, "steps_target": args.steps}
    best, best_state, start = math.inf, None, time.time()
    tokens_per_step = args.batch * cfg.max_seq_len
    step, window_loss, window_t = 0, [], time.time()
    for step in range(1, args.steps + 1):
        w = batches.next().to(device, non_blocking=True)
        logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        window_loss.append(loss.item() if step % 10 == 0 or step == 1 else None)
        elapsed = time.time() - start
        if step % args.eval_every == 0 or step == args.steps or elapsed > args.time_budget:
            vl = evaluate(model, val, device)
            log["val_steps"].append(step)
            log["val_loss"].append(vl)
            if vl < best:
                best, best_state = vl, copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
                log["best_step"] = step
        if step % args.log_every == 0 or step == args.steps:
            losses = [x for x in window_loss if x is not None]
            rate = args.log_every * tokens_per_step / max(time.time() - window_t, 1e-9)
            eta = (args.steps - step) * tokens_per_step / max(rate, 1e-9)
            log["steps"].append(step)
            log["train_loss"].append(sum(losses) / max(len(losses), 1))
            val_txt = f" val {log['val_loss'][-1]:.4f}" if log["val_loss"] else ""
            print(f"[{name:10s}] step {step:5d}/{args.steps} loss {log['train_loss'][-1]:.4f}{val_txt} "
                  f"{rate / 1e3:7.1f}k tok/s ETA {eta:5.0f}s", flush=True)
            window_loss, window_t = [], time.time()
        if elapsed > args.time_budget:
            log["stopped_by_time_budget"] = True
            print(f"[{name:10s}] time budget {args.time_budget}s reached at step {step}", flush=True)
            break
    log.update(steps_done=step, wall_s=time.time() - start, best_val_loss=best,
               best_val_ppl=math.exp(best), train_tokens=step * tokens_per_step)
    out = os.path.join(args.out, name)
    model.load_state_dict(best_state)
    tok = os.path.join(ROOT, "models", "tokenizer.model")
    model.cpu().save_dir(out, dtype=torch.float16, tokenizer=tok,
                         metadata={"mixer": name, "best_step": log.get("best_step"), "val_loss": f"{best:.4f}"})
    with open(os.path.join(out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print(f"[{name:10s}] done: best val loss {best:.4f} (ppl {math.exp(best):.1f}) at step {log.get('best_step')}, "
          f"{n_params / 1e6:.2f}M params, {log['wall_s']:.0f}s -> {out}", flush=True)
    return name, best


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mixers", default="all", help="comma list of zoo names, or all")
    ap.add_argument("--zoo", default=os.path.join(HERE, "zoo.json"))
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-seed", type=int, default=2023)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--val-windows", type=int, default=0, help="0: the whole validation set")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--time-budget", type=float, default=1e9, help="seconds per model")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=1, help="models trained at once (worker processes)")
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "zoo"))
    args = ap.parse_args()
    names = list(json.load(open(args.zoo))["models"]) if args.mixers == "all" else args.mixers.split(",")
    if args.parallel <= 1:
        results = [train_one(n, args) for n in names]
    else:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(args.parallel) as pool:
            results = pool.starmap(train_one, [(n, args) for n in names])
    for name, best in sorted(results, key=lambda r: r[1]):
        print(f"{name:12s} val loss {best:.4f} ppl {math.exp(best):7.1f}")


if __name__ == "__main__":
    main()
