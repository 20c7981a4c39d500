"""Time one training step (forward, backward, optimizer update) in oarlock and in PyTorch CPU.

Models: (a) an MLP 784-256-10 with ReLU, batch 64, SGD (lr 0.1); (b) the GPT of `oarlock train`
(byte vocab 256, width 128, 4 layers, 4 heads, rotary embeddings), batch 16 x seq 128, AdamW; (c) a
plain small transformer written from ordinary ops in the same way in both frameworks (token and
position Embedding, pre-LayerNorm blocks, Linear q/k/v/out projections, softmax attention from two
matmuls with an additive causal mask, an exact-GELU MLP, cross-entropy; width 128, 2 layers, 4
heads, vocab 256), batch 8 x 64 tokens, AdamW.
Both frameworks start from the same weights (drawn with numpy from a fixed seed, Paddle layout,
transposed for torch's Linear) and train on the same fixed batch; the first-step losses are
printed so that you can see they agree.

Every (framework, model) pair runs in a fresh subprocess, so one framework's imports, threads and
peak memory never touch another's figures. Both use all cores (torch.set_num_threads(os.cpu_count());
numpy's BLAS uses all cores by default). ms/step is the median of --repeat timings of several steps
each, after warm-up steps (the first step also allocates the optimizer state).

Memory: "array peak" is oarlock.device.max_memory_allocated() (bytes of live arrays at peak,
weights included; torch has no CPU counter); "RSS growth" is, for both, the process's peak resident
set size (resource.getrusage ru_maxrss) minus its RSS just before the first step.

    python bench/train_step.py [--repeat 5] [--models mlp,gpt,tfm] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

MODELS = {
    # name: (steps per timing, description)
    "mlp": (40, "MLP 784-256-10, batch 64, SGD"),
    "gpt": (3, "GPT 0.86M (oarlock train), batch 16 x 128, AdamW"),
    "tfm": (10, "plain transformer 2x128, batch 8 x 64, AdamW"),
}
GPT = dict(vocab=256, width=128, layers=4, heads=4, seq=128, batch=16)
TFM = dict(vocab=256, width=128, layers=2, heads=4, seq=64, batch=8)


# -- shared: weights and data -----------------------------------------------------------------------

def make_weights(shapes: dict) -> dict:
    """Arrays for {name: shape (Paddle layout)}, drawn in sorted-name order so every worker agrees."""
    rng = np.random.default_rng(0)
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, np.float32)
        elif name.endswith("bias"):
            out[name] = np.zeros(shape, np.float32)
        else:
            out[name] = (rng.standard_normal(shape) * 0.02).astype(np.float32)
    return out


def make_batch(model: str):
    rng = np.random.default_rng(1)
    if model == "mlp":
        return rng.standard_normal((64, 784)).astype(np.float32), rng.integers(0, 10, 64)
    shape = GPT if model == "gpt" else TFM
    rows = rng.integers(0, shape["vocab"], (shape["batch"], shape["seq"] + 1))
    return rows, None


def rss_now() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def time_steps(step, number: int, repeat: int, warmup: int = 2):
    """(median seconds per step, loss of the first step, RSS growth in bytes)."""
    rss_before = rss_now()
    first = step()
    for _ in range(warmup - 1):
        step()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            step()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times), first, peak_rss() - rss_before


# -- oarlock worker ---------------------------------------------------------------------------------

def oarlock_step(model_name: str):
    import oarlock
    import oarlock.nn.functional as F
    from oarlock import nn

    if model_name == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
        x_np, y_np = make_batch("mlp")
        x, y = oarlock.to_tensor(x_np), oarlock.to_tensor(y_np)
        loss_fn = lambda: F.cross_entropy(model(x), y)
    elif model_name == "tfm":
        model = plain_transformer_class(oarlock, nn, F)(**tfm_sizes())
        opt = oarlock.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters(), weight_decay=0.01)
        rows = oarlock.to_tensor(make_batch("tfm")[0])
        loss_fn = lambda: F.cross_entropy(model(rows[:, :-1]).reshape([-1, TFM["vocab"]]), rows[:, 1:].reshape([-1]))
    else:
        from oarlock_train.model import GPT as Model, GPTConfig
        model = Model(GPTConfig(max_seq_len=GPT["seq"]))
        opt = oarlock.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters(), weight_decay=0.01)
        rows = oarlock.to_tensor(make_batch("gpt")[0])
        loss_fn = lambda: model.loss(rows)
    state = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.set_state_dict(make_weights(state))

    def step():
        loss = loss_fn()
        loss.backward()
        opt.step()
        opt.clear_grad()
        return float(loss.item())
    return step, {"array_peak": lambda: oarlock.device.max_memory_allocated(),
                  "reset": oarlock.device.reset_max_memory_allocated}


# -- torch worker -------------------------------------------------------------------------------------

def torch_step(model_name: str):
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(os.cpu_count())
    if model_name == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        opt_factory = lambda params: torch.optim.SGD(params, lr=0.1)
        x_np, y_np = make_batch("mlp")
        x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
        loss_fn = lambda: F.cross_entropy(model(x), y)
    elif model_name == "tfm":
        model = plain_transformer_class(torch, nn, F)(**tfm_sizes())
        opt_factory = lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
        rows = torch.from_numpy(make_batch("tfm")[0])
        loss_fn = lambda: F.cross_entropy(model(rows[:, :-1]).reshape(-1, TFM["vocab"]), rows[:, 1:].reshape(-1))
    else:
        model = torch_gpt_class()(**{k: GPT[k] for k in ("vocab", "width", "layers", "heads", "seq")})
        opt_factory = lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
        rows = torch.from_numpy(make_batch("gpt")[0])
        loss_fn = lambda: F.cross_entropy(model(rows[:, :-1]).reshape(-1, GPT["vocab"]), rows[:, 1:].reshape(-1))
    linear_weights = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    paddle_shapes = {k: tuple(v.shape[::-1]) if k in linear_weights else tuple(v.shape)
                     for k, v in model.state_dict().items() if not k.startswith(("rope_", "causal_"))}
    weights = make_weights(paddle_shapes)
    with torch.no_grad():
        for k, p in model.state_dict().items():
            if k in weights:
                p.copy_(torch.from_numpy(weights[k].T.copy() if k in linear_weights else weights[k]))
    opt = opt_factory(model.parameters())

    def step():
        loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.item())
    return step, {}


RMS_EPS = 1e-6  # must equal oarlock.nn.RMSNorm's default epsilon for the first-step losses to agree


def torch_gpt_class():
    """The torch twin of oarlock_train.model.GPT: same parameter names, same maths."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from oarlock_train.model import rotary_arrays

    def rotary(x, cos, sin):  # sin carries the sign, as in oarlock_train.model.rotary_tables
        half = x.shape[-1] // 2
        return x * cos + torch.cat([x[..., half:], x[..., :half]], dim=-1) * sin

    class Attention(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.heads, self.head_dim = heads, width // heads
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)

        def forward(self, x, cos, sin):
            b, t, c = x.shape
            qk, v = self.qkv(x).reshape(b, t, 3 * self.heads, self.head_dim).split([2 * self.heads, self.heads], 2)
            q, k = rotary(qk, cos, sin).split(self.heads, dim=2)
            # torch's layout is [B, H, T, D]
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, c))

    class MLP(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.fc, self.proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            return self.proj(F.silu(self.fc(x)))

    class Block(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.attn_norm, self.attn = nn.RMSNorm(width, eps=RMS_EPS), Attention(width, heads)
            self.mlp_norm, self.mlp = nn.RMSNorm(width, eps=RMS_EPS), MLP(width)

        def forward(self, x, cos, sin):
            x = x + self.attn(self.attn_norm(x), cos, sin)
            return x + self.mlp(self.mlp_norm(x))

    class TorchGPTModel(nn.Module):
        def __init__(self, vocab, width, layers, heads, seq):
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
            self.norm = nn.RMSNorm(width, eps=RMS_EPS)
            self.head = nn.Linear(width, vocab, bias=False)
            cos, sin = rotary_arrays(seq, width // heads)  # the very tables the oarlock model uses
            self.register_buffer("rope_cos", torch.from_numpy(cos), persistent=False)
            self.register_buffer("rope_sin", torch.from_numpy(sin), persistent=False)

        def forward(self, tokens):
            t = tokens.shape[1]
            cos, sin = self.rope_cos[:, :t], self.rope_sin[:, :t]
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x, cos, sin)
            return self.head(self.norm(x))

    return TorchGPTModel


def tfm_sizes() -> dict:
    return {k: TFM[k] for k in ("vocab", "width", "layers", "heads", "seq")}


def plain_transformer_class(fw, nn, F):
    """The plain transformer, written once for both frameworks: `fw` is oarlock or torch, `nn` and `F`
    its nn and nn.functional. Only spellings both accept (x.shape, x.transpose over two axes in torch,
    reshape with a list, matmul, softmax(axis=-1) / dim=-1 by position) keep it one piece of code."""
    is_torch = fw.__name__ == "torch"
    Layer = nn.Module if is_torch else nn.Layer
    swap = (lambda x: x.transpose(1, 2)) if is_torch else (lambda x: x.transpose([0, 2, 1, 3]))
    flip = (lambda x: x.transpose(-2, -1)) if is_torch else (lambda x: x.transpose([0, 1, 3, 2]))

    class Block(Layer):
        def __init__(self, width, heads):
            super().__init__()
            self.heads, self.head_dim = heads, width // heads
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.q, self.k, self.v = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)
            self.out = nn.Linear(width, width)
            self.fc, self.proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x, mask):
            b, t, c = x.shape
            h = self.ln1(x)
            q, k, v = (swap(lin(h).reshape([b, t, self.heads, self.head_dim])) for lin in (self.q, self.k, self.v))
            scores = fw.matmul(q, flip(k)) * (1.0 / math.sqrt(self.head_dim)) + mask
            y = fw.matmul(F.softmax(scores, -1), v)
            x = x + self.out(swap(y).reshape([b, t, c]))
            return x + self.proj(F.gelu(self.fc(self.ln2(x))))

    class PlainTransformer(Layer):
        def __init__(self, vocab, width, layers, heads, seq):
            super().__init__()
            self.embed, self.pos = nn.Embedding(vocab, width), nn.Embedding(seq, width)
            self.blocks = (nn.ModuleList if is_torch else nn.LayerList)([Block(width, heads) for _ in range(layers)])
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab)
            mask = np.triu(np.full((seq, seq), -np.inf, np.float32), 1)
            self.causal_mask = fw.from_numpy(mask) if is_torch else fw.to_tensor(mask)

        def forward(self, tokens):
            t = tokens.shape[1]
            positions = fw.arange(t)
            x = self.embed(tokens) + self.pos(positions)
            mask = self.causal_mask[:t, :t]
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.norm(x))

    return PlainTransformer


def worker(framework: str, model: str, repeat: int) -> dict:
    make = oarlock_step if framework == "oarlock" else torch_step
    step, extras = make(model)
    if "reset" in extras:
        extras["reset"]()
    seconds, first_loss, rss_growth = time_steps(step, MODELS[model][0], repeat)
    result = {"ms_per_step": seconds * 1e3, "first_loss": first_loss, "rss_growth": rss_growth}
    if "array_peak" in extras:
        result["array_peak"] = extras["array_peak"]()
    return result


# -- driver -----------------------------------------------------------------------------------------

def run_worker(framework: str, model: str, repeat: int):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", f"{framework}:{model}", "--repeat", str(repeat)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        if framework == "torch" and "No module named 'torch'" in proc.stderr:
            return None
        return {"error": tail[0]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MiB"


def print_table(results: dict, repeat: int) -> None:
    print(f"one training step, median of {repeat} timings after warm-up, {os.cpu_count()} CPU cores")
    header = (f"{'model':<48} {'framework':<9} {'ms/step':>9} {'vs torch':>9} {'array peak':>11} "
              f"{'RSS growth':>11} {'1st loss':>9}")
    print(header)
    print("-" * len(header))
    for model, per_fw in results.items():
        torch_ms = (per_fw.get("torch") or {}).get("ms_per_step")
        for fw, res in per_fw.items():
            if res is None:
                print(f"{MODELS[model][1]:<48} {fw:<9} not installed")
                continue
            if "error" in res:
                print(f"{MODELS[model][1]:<48} {fw:<9} FAILED: {res['error']}")
                continue
            ratio = f"{res['ms_per_step'] / torch_ms:.2f}x" if torch_ms else "-"
            print(f"{MODELS[model][1]:<48} {fw:<9} {res['ms_per_step']:>9.2f} {ratio:>9} "
                  f"{mib(res.get('array_peak')):>11} {mib(res['rss_growth']):>11} {res['first_loss']:>9.4f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timings per figure; the median is shown (default 5)")
    parser.add_argument("--models", default="mlp,gpt,tfm",
                        help="comma-separated subset of: mlp, gpt, tfm (default all three)")
    parser.add_argument("--no-torch", action="store_true", help="time oarlock only")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # FRAMEWORK:MODEL, used by the driver
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"argument --repeat: expected a positive integer, got {args.repeat}")
    if args.worker:
        framework, model = args.worker.split(":")
        print(json.dumps(worker(framework, model, args.repeat)))
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"argument --models: unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    frameworks = ["oarlock"] + ([] if args.no_torch else ["torch"])
    results = {m: {fw: run_worker(fw, m, args.repeat) for fw in frameworks} for m in models}
    print_table(results, args.repeat)
    for model, per_fw in results.items():
        losses = [r["first_loss"] for r in per_fw.values() if r and "first_loss" in r]
        if len(losses) == 2 and not math.isclose(*losses, rel_tol=1e-3):
            print(f"warning: {model}: first-step losses differ ({losses[0]:.6f} vs {losses[1]:.6f}); "
                  f"the models are not the same computation")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cpu_count": os.cpu_count(), "repeat": args.repeat, "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
