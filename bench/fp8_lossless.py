"""Is FP8 training lossless? The GPT of `oarlock train` trained --steps steps (default 500, the command's
default run) with every Linear in FP8 (oarlock.incubate.fp8, --fp8 of the command) against bf16 autocast
(oarlock.amp.auto_cast(dtype="bfloat16"), O1), --seeds seeds each (default 3).

Modes: bf16 (the baseline), blockwise (DeepSeek-V3's recipe: Float8BlockScaling) and delayed (TransformerEngine's
DelayedScaling, HYBRID formats); --modes picks some. Each run evaluates on the whole validation split every
--eval-every steps in its own precision (the bf16 runs under auto_cast, the FP8 runs through their Fp8Linear
layers). The verdict for an FP8 mode: where the mean of its final validation losses lies against the spread
[min, max] of the bf16 runs' final validation losses (within, below or above); lossless when not above.

Writes to --out: results.json (every run's validation curve and train losses), table.md (the table the README
shows) and fp8_lossless.png (validation loss against step, one line per run). On the CPU FP8 is emulated in
numpy (exact e4m3/e5m2 rounding), several times slower than float32: the 9 default runs take hours on 2 cores;
--jobs N runs N of them at once. `--steps 20 --seeds 1 --eval-every 10` is a smoke run.

    python bench/fp8_lossless.py --jobs 3
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import time

MODES = ("bf16", "blockwise", "delayed")


def run(mode: str, seed: int, steps: int, eval_every: int) -> dict:
    import oarlock
    from oarlock_train.corpus import build_corpus
    from oarlock_train.trainer import TrainConfig, Trainer

    cfg = TrainConfig(steps=steps, seed=seed, warmup=min(100, steps // 20), fp8=None if mode == "bf16" else mode)
    trainer = Trainer(cfg, build_corpus(cfg.seq_len))
    precision = (lambda: oarlock.amp.auto_cast(dtype="bfloat16")) if mode == "bf16" else None
    if precision is not None:
        model = trainer.model

        def forward(tokens, startend_row_indices=None):
            with precision():
                return model(tokens, startend_row_indices)
        trainer.wrapped = forward
    valid, start = [], time.perf_counter()
    for step in range(1, steps + 1):
        trainer.train_step()
        if step % eval_every == 0 or step == steps:
            if precision is not None:
                with precision():
                    loss = trainer.evaluate()
            else:
                loss = trainer.evaluate()
            valid.append((step, loss))
            print(f"{mode} seed {seed}: step {step}, validation loss {loss:.4f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    return {"mode": mode, "seed": seed, "valid": valid, "train": trainer.history.train,
            "seconds": time.perf_counter() - start}


def verdicts(results: list[dict]) -> dict:
    """For each FP8 mode: its final validation losses against the bf16 spread."""
    final = {}
    for r in results:
        final.setdefault(r["mode"], []).append(r["valid"][-1][1])
    out = {}
    if "bf16" not in final:
        return out
    low, high = min(final["bf16"]), max(final["bf16"])
    for mode, losses in final.items():
        if mode == "bf16":
            continue
        mean = sum(losses) / len(losses)
        place = "within" if low <= mean <= high else ("below (better than every bf16 run)" if mean < low
                                                     else "ABOVE (worse than every bf16 run)")
        out[mode] = {"mean": mean, "place": place, "lossless": mean <= high,
                     "seeds_not_above": sum(v <= high for v in losses), "seeds": len(losses)}
    return out


def table(results: list[dict]) -> str:
    rows = ["| mode | seed | final validation loss (nats/byte) | minutes |", "|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (MODES.index(r["mode"]), r["seed"])):
        rows.append(f"| {r['mode']} | {r['seed']} | {r['valid'][-1][1]:.4f} | {r['seconds'] / 60:.1f} |")
    final = [r["valid"][-1][1] for r in results if r["mode"] == "bf16"]
    lines = ["\n".join(rows)]
    if final:
        lines.append(f"bf16 spread: [{min(final):.4f}, {max(final):.4f}]")
    for mode, v in verdicts(results).items():
        lines.append(f"{mode}: mean {v['mean']:.4f}, {v['place']} the bf16 spread; {v['seeds_not_above']}/"
                     f"{v['seeds']} seeds at or below the worst bf16 run; lossless: {v['lossless']}")
    return "\n\n".join(lines) + "\n"


def plot(results: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"bf16": "tab:blue", "blockwise": "tab:red", "delayed": "tab:green"}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        steps, losses = zip(*r["valid"])
        ax.plot(steps, losses, color=colors[r["mode"]], alpha=0.8,
                label=f"{r['mode']} seed {r['seed']}")
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/byte)")
    ax.set_title("GPT: FP8 recipes against bf16 autocast")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--fp8-seeds", type=int, default=None,
                        help="seeds of the FP8 modes (default --seeds): fewer for a quicker first look")
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of bf16,blockwise,delayed")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (processes)")
    parser.add_argument("--out", default="fp8-lossless-out")
    parser.add_argument("--reuse", metavar="RESULTS_JSON", default=None,
                        help="an earlier run's results.json: its (mode, seed) runs are taken, not run again")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"argument --modes: {unknown}; accepted: {', '.join(MODES)}")
    os.makedirs(args.out, exist_ok=True)
    fp8_seeds = args.seeds if args.fp8_seeds is None else args.fp8_seeds
    jobs = [(m, s, args.steps, args.eval_every) for m in modes
            for s in range(args.seeds if m == "bf16" else fp8_seeds)]
    earlier = []
    if args.reuse:   # the runs are deterministic per (mode, seed, steps): an earlier one is as good as a new one
        with open(args.reuse) as fh:
            earlier = [r for r in json.load(fh) if r["mode"] in modes]
        done = {(r["mode"], r["seed"]) for r in earlier}
        jobs = [job for job in jobs if (job[0], job[1]) not in done]
    jobs.sort(key=lambda job: job[0] == "bf16")       # the slow FP8 runs first
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = earlier + (list(pool.map(run, *zip(*jobs))) if jobs else [])
    with open(os.path.join(args.out, "results.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    text = table(results)
    with open(os.path.join(args.out, "table.md"), "w") as fh:
        fh.write(text)
    plot(results, os.path.join(args.out, "fp8_lossless.png"))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
