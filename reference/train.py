"""Trains the per-mixer zoo with the Extractor paper's protocol (Section 6, Table 1): the same data,
batches and batch order for every model, only the mixer differs. AdamW lr 1e-3, betas
(0.9, 0.999), weight decay 0.01 (PyTorch's default), dropout 0.1, weights N(0, 0.01), biases 0,
batch 64 windows of l = 128 tokens, constant learning rate; gradients clipped at norm 1.

  /usr/bin/python3 reference/train.py --mixers me,attention --steps 300 --batch 16   # CPU
  python3 reference/train.py --mixers all --steps 4000 --device cuda --parallel 12 --threads 1 \\
      --time-budget 400 --out models/zoo                                           # GPU

Needs reference/data/{train,val}.u16 (reference/data.py). For each model writes --out/<name>/:
the checkpoint with the best validation loss (config.json, model.safetensors in float16, a
relative tokenizer.model link) and train_log.json (curves, speed, command, seeds, versions).
"""
import argparse
import copy
import json
import math
import os
import shlex
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from mixserve_ref.config import ModelConfig  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402

TOKENIZER = os.path.join(ROOT, "models", "tokenizer.model")
EVAL_BATCH = 64  # validation windows per forward pass (any size gives the same loss)


def load_zoo(path):
    with open(path) as f:
        return json.load(f)


def zoo_config(name, zoo):
    """ModelConfig of one zoo model: the shared base, the model's overrides, its layer repeated."""
    if name not in zoo["models"]:
        raise SystemExit(f"unknown zoo model {name!r} (known: {', '.join(zoo['models'])})")
    spec = zoo["models"][name]
    base = dict(zoo["base"], **spec.get("config", {}))
    base["layers"] = [dict(spec["layer"]) for _ in range(base["n_layers"])]
    return ModelConfig(**base)


def read_tokens(data_dir, split):
    return np.fromfile(os.path.join(data_dir, f"{split}.u16"), dtype="<u2")


class Batches:
    """Random windows of length+1 tokens (inputs and shifted targets). The batch sequence depends
    only on (tokens, batch, length, seed): its own numpy generator, never torch's RNG, so every
    model sees the same batches in the same order whatever it draws for init or dropout."""

    def __init__(self, tokens, batch, length, seed):
        self.tokens, self.batch, self.length = tokens, batch, length
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def next_starts(self):
        # The last possible start is never drawn (the bound is one short); kept so that the
        # committed zoo's batch order stays reproducible.
        return self.rng.integers(0, len(self.tokens) - self.length - 1, size=self.batch)

    def next(self):
        windows = [self.tokens[s:s + self.length + 1] for s in self.next_starts()]
        return torch.from_numpy(np.stack(windows).astype(np.int64))


def val_windows(tokens, length, count=0):
    """Fixed validation windows: the val stream cut into consecutive non-overlapping windows of
    length+1 tokens; with count > 0, that many of them spread evenly over the whole stream."""
    n = (len(tokens) - 1) // length
    picks = range(n) if count <= 0 or count >= n else np.linspace(0, n - 1, count).round().astype(int)
    return torch.from_numpy(np.stack([tokens[i * length:i * length + length + 1] for i in picks]).astype(np.int64))


def lm_loss(model, windows, amp_dtype, reduction="mean"):
    if amp_dtype is None:
        logits = model(windows[:, :-1])
    else:
        with torch.autocast(device_type=windows.device.type, dtype=amp_dtype):
            logits = model(windows[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1),
                           reduction=reduction)


@torch.no_grad()
def evaluate(model, windows, device, amp_dtype=None):
    """Mean cross-entropy (nats/token) over all validation windows, dropout off."""
    model.eval()
    total = 0.0
    for i in range(0, len(windows), EVAL_BATCH):
        total += lm_loss(model, windows[i:i + EVAL_BATCH].to(device), amp_dtype, "sum").item()
    model.train()
    return total / (len(windows) * (windows.shape[1] - 1))


def lr_factor(schedule, step, steps, warmup):
    """Multiplier of the base learning rate at 1-based step (constant is the paper's)."""
    if warmup and step <= warmup:
        return step / warmup
    if schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(steps - warmup, 1)
    return 0.5 * (1 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def check_reload(model, out):
    """The saved directory must load back to exactly the float16-rounded weights: same logits."""
    reference = copy.deepcopy(model).cpu().eval()
    reference.load_state_dict({k: v.half().float() for k, v in model.state_dict().items()})
    with torch.no_grad():
        tokens = torch.arange(min(64, model.cfg.max_seq_len))[None] % model.cfg.vocab_size
        diff = (Model.load_dir(out)(tokens) - reference(tokens)).abs().max().item()
    if diff != 0.0:
        raise RuntimeError(f"{out}: reloaded logits differ from the trained model by {diff:g}")


def train_one(name, args):
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    amp_dtype = torch.bfloat16 if args.amp == "bf16" else None
    if device.type == "cuda":  # fp32 stays fp32 unless asked (the paper's precision)
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    cfg = zoo_config(name, load_zoo(args.zoo))
    train_tokens = read_tokens(args.data, "train")
    val = val_windows(read_tokens(args.data, "val"), cfg.max_seq_len, args.val_windows or args.eval_batches * EVAL_BATCH)
    if int(train_tokens.max()) >= cfg.vocab_size:
        raise SystemExit(f"{name}: token id {int(train_tokens.max())} >= vocab_size {cfg.vocab_size}")
    torch.manual_seed(args.seed)
    model = Model(cfg, dropout=args.dropout).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: lr_factor(args.lr_schedule, i + 1, args.steps, args.warmup_steps))
    batches = Batches(train_tokens, args.batch, cfg.max_seq_len, args.data_seed)
    tokens_per_step = args.batch * cfg.max_seq_len
    log = {"name": name, "config": cfg.to_dict(), "params": n_params, "steps": [], "train_loss": [],
           "val_steps": [], "val_loss": [], "command": shlex.join([sys.executable] + sys.argv),
           "seed": args.seed, "data_seed": args.data_seed, "batch": args.batch, "lr": args.lr,
           "lr_schedule": args.lr_schedule, "warmup_steps": args.warmup_steps, "weight_decay": args.weight_decay,
           "betas": [0.9, 0.999], "dropout": args.dropout, "grad_clip": 1.0, "amp": args.amp, "tf32": args.tf32,
           "steps_target": args.steps, "val_windows": len(val), "torch": torch.__version__,
           "numpy": np.__version__, "device": device_name(device), "stopped_by_time_budget": False}
    print(f"[{name:10s}] {n_params / 1e6:.2f}M params on {log['device']}, {len(val)} val windows", flush=True)

    best, best_state, best_step = math.inf, None, 0
    start = window_start = time.time()
    loss_sum, loss_count, step = torch.zeros((), device=device), 0, 0
    eval_s = window_eval_s = 0.0  # time spent evaluating, kept out of the tokens/s figures
    for step in range(1, args.steps + 1):
        loss = lm_loss(model, batches.next().to(device), amp_dtype)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_sum += loss.detach()  # summed on the device: no host sync per step
        loss_count += 1
        out_of_time = time.time() - start > args.time_budget
        last = step == args.steps or out_of_time
        val_loss = None
        if step % args.eval_every == 0 or last:
            if device.type == "cuda":
                torch.cuda.synchronize()  # queued training kernels belong to the training time
            t = time.time()
            val_loss = evaluate(model, val, device, amp_dtype)
            spent = time.time() - t
            eval_s, window_eval_s = eval_s + spent, window_eval_s + spent
            log["val_steps"].append(step)
            log["val_loss"].append(val_loss)
            if val_loss < best:
                best, best_step = val_loss, step
                best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        if step % args.log_every == 0 or last:
            now = time.time()
            rate = loss_count * tokens_per_step / max(now - window_start - window_eval_s, 1e-9)
            left = min((args.steps - step) * tokens_per_step / rate, max(args.time_budget - (now - start), 0))
            log["steps"].append(step)
            log["train_loss"].append(loss_sum.item() / loss_count)
            shown = f" val {val_loss:.4f}" if val_loss is not None else ""
            print(f"[{name:10s}] step {step:5d}/{args.steps} loss {log['train_loss'][-1]:.4f}{shown} "
                  f"{rate / 1e3:7.1f}k tok/s ETA {left:5.0f}s", flush=True)
            loss_sum, loss_count, window_start, window_eval_s = torch.zeros((), device=device), 0, now, 0.0
        if out_of_time:
            log["stopped_by_time_budget"] = True
            print(f"[{name:10s}] time budget {args.time_budget:g}s reached at step {step}", flush=True)
            break
    wall = time.time() - start
    log.update(steps_done=step, wall_s=wall, eval_s=eval_s, tokens_per_s=step * tokens_per_step / (wall - eval_s),
               train_tokens=step * tokens_per_step, best_step=best_step, best_val_loss=best,
               best_val_ppl=math.exp(best))

    out = os.path.join(args.out, name)
    model.load_state_dict(best_state)
    model.cpu().save_dir(out, dtype=torch.float16, tokenizer=TOKENIZER,
                         metadata={"mixer": name, "best_step": best_step, "val_loss": f"{best:.4f}"})
    check_reload(model, out)
    with open(os.path.join(out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
        f.write("\n")
    print(f"[{name:10s}] done: best val loss {best:.4f} (ppl {math.exp(best):.1f}) at step {best_step}, "
          f"{wall:.0f}s -> {out}", flush=True)
    return name, best


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--mixers", default="all", help="comma list of zoo model names, or all")
    ap.add_argument("--zoo", default=os.path.join(HERE, "zoo.json"), help="zoo spec (architecture per model)")
    ap.add_argument("--data", default=os.path.join(HERE, "data"), help="folder with train.u16 and val.u16")
    ap.add_argument("--out", default=os.path.join(HERE, "runs"), help="model directories go to OUT/<name>/")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-schedule", choices=("constant", "cosine", "linear"), default="constant",
                    help="decay of the learning rate over --steps (the paper: constant)")
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1, help="model initialisation (and dropout)")
    ap.add_argument("--data-seed", type=int, default=2023, help="batch order, the same for every model")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-batches", type=int, default=0,
                    help=f"validation windows = this × {EVAL_BATCH}, spread over the val stream; 0: all")
    ap.add_argument("--val-windows", type=int, default=0, help="validation windows (overrides --eval-batches)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--time-budget", type=float, default=1e9,
                    help="seconds of training per model; then it evaluates, saves and stops")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--amp", choices=("none", "bf16"), default="none", help="bf16 autocast (fp32 weights)")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls on CUDA")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads per model (per worker)")
    ap.add_argument("--parallel", type=int, default=1, help="models trained at once, one worker process each")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.eval_every < 1 or args.log_every < 1:
        ap.error("--steps, --batch, --eval-every and --log-every must be positive")
    return args


def main():
    args = parse_args()
    zoo = load_zoo(args.zoo)
    names = list(zoo["models"]) if args.mixers == "all" else args.mixers.split(",")
    for n in names:
        zoo_config(n, zoo)  # fail on a bad name or config before any worker starts
    if args.parallel <= 1:
        results = [train_one(n, args) for n in names]
    else:
        import multiprocessing as mp  # spawn: every worker gets its own CUDA context
        with mp.get_context("spawn").Pool(min(args.parallel, len(names))) as pool:
            results = pool.starmap(train_one, [(n, args) for n in names])
    for name, best in sorted(results, key=lambda r: r[1]):
        print(f"{name:12s} val loss {best:.4f} ppl {math.exp(best):7.1f}")


if __name__ == "__main__":
    main()
