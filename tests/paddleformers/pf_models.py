"""Run PaddleFormers' Llama / Qwen2 / Qwen3 on one framework and save what the tests compare.

    python pf_models.py paddle  OUTDIR PADDLEFORMERS_DIR   # real Paddle 3.2: initialises, saves the weights
    python pf_models.py oarlock OUTDIR PADDLEFORMERS_DIR   # `paddle` aliased to oarlock: loads those weights

The same code runs on both sides (the oarlock side through oarlock.compat.enable_paddle_alias(), so
PaddleFormers' sources run unedited). Each case builds a tiny model, and saves to OUTDIR/<case>.npz: the
logits and loss of a training-mode forward with labels (two positions ignored, one padded position masked),
the gradient of every parameter after loss.backward(), and for the base cases the tokens and scores of
PaddleFormers' own greedy `generate` (eval mode, KV cache). Runs in a subprocess because PaddleFormers
monkey-patches Tensor methods on import (paddle_patch.py), which must not leak into the test process.
"""

from __future__ import annotations

import os
import sys

import numpy as np

VOCAB, HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, MAX_POS = 128, 64, 128, 2, 4, 2, 64
BATCH, SEQ, PROMPT, NEW_TOKENS = 2, 8, 4, 5

# case -> (model family, variant); variants change only how the model runs, never its weights
CASES = {
    "llama": ("llama", "base"),
    "llama_recompute": ("llama", "recompute"),
    "llama_fused_rope": ("llama", "fused_rope"),
    "qwen2": ("qwen2", "base"),
    "qwen2_recompute": ("qwen2", "recompute"),
    "qwen2_fused": ("qwen2", "fused"),
    "qwen3": ("qwen3", "base"),
}


def _config(family, variant, on_oarlock):
    from paddleformers.transformers import LlamaConfig, Qwen2Config, Qwen3Config
    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[family]
    extra = {"head_dim": HIDDEN // HEADS} if family == "qwen3" else {}
    config = cls(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
                 num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=MAX_POS,
                 dtype="float32", **extra)
    if variant == "recompute":
        config.recompute = True
        config.recompute_granularity = "full"
    # incubate's fused_rms_norm_ext / swiglu / FusedLinear on oarlock; Paddle 3.2 has no CPU kernels for the
    # first and last, so its side runs PaddleFormers' unfused layers, which the fused run must match
    if variant == "fused" and on_oarlock:
        config.fuse_rms_norm = config.fuse_swiglu = config.fuse_linear = True
    return config


def _model(family, config):
    from paddleformers.transformers import LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM
    cls = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "qwen3": Qwen3ForCausalLM}[family]
    return cls(config)


def _widen(paddle, model):
    """Weights of a wider spread than the 0.02 initialisation (norm scales around 1), so that greedy decoding
    of the tiny models does not repeat one token."""
    rng = np.random.RandomState(7)
    for name, p in model.named_parameters():
        noise = rng.standard_normal(p.shape).astype("float32")
        p.set_value(paddle.to_tensor(1.0 + 0.1 * noise if "norm" in name else 0.3 * noise))


def _inputs():
    rng = np.random.RandomState(0)
    ids = rng.randint(0, VOCAB, size=[BATCH, SEQ]).astype("int64")
    labels = rng.randint(0, VOCAB, size=[BATCH, SEQ]).astype("int64")
    labels[0, 0] = labels[1, 3] = -100          # ignored positions
    mask = np.ones([BATCH, SEQ], dtype="int64")
    mask[1, 0] = 0                              # a left-padded position
    return ids, labels, mask


def _spy(module_name, attr, calls):
    """Count the calls of `module_name.attr` (the recompute / fused-rope entry a variant must go through)."""
    import importlib
    module = importlib.import_module(module_name)
    original = getattr(module, attr)

    def counted(*args, **kwargs):
        calls.append(attr)
        return original(*args, **kwargs)
    setattr(module, attr, counted)
    return lambda: setattr(module, attr, original)


def run_case(paddle, case, outdir, on_oarlock):
    family, variant = CASES[case]
    weights_file = os.path.join(outdir, f"weights_{family}.npz")
    config = _config(family, variant, on_oarlock)
    paddle.seed(1234)
    model = _model(family, config)
    if on_oarlock:
        stored = np.load(weights_file)
        model.set_state_dict({name: paddle.to_tensor(stored[name]) for name in stored.files})
    elif variant == "base":
        _widen(paddle, model)
        np.savez(weights_file, **{name: t.numpy() for name, t in model.state_dict().items()})
    else:
        stored = np.load(weights_file)
        model.set_state_dict({name: paddle.to_tensor(stored[name]) for name in stored.files})
    if variant == "recompute" and family == "llama":
        model.llama.enable_recompute = True     # what PaddleFormers' Trainer sets
    if variant == "fused_rope" and on_oarlock:
        # PaddleFormers keeps config.use_fused_rope only on a GPU build, so it is switched on per attention
        # layer (what the config does there): attention then calls incubate's fused_rotary_position_embedding.
        # Paddle 3.2 has no CPU kernel for it, so the Paddle side runs the unfused rotate_half formula, which
        # the fused oarlock run must match.
        for layer in model.llama.layers:
            layer.self_attn.use_fused_rope = True
    calls = []
    restore = lambda: None      # noqa: E731
    if variant == "recompute":
        restore = _spy(f"paddleformers.transformers.{family}.modeling", "recompute", calls)
    if variant == "fused_rope" and on_oarlock:
        restore = _spy("paddleformers.transformers.llama.fusion_ops", "fused_rotary_position_embedding", calls)
    if variant == "fused" and on_oarlock:
        undo = [_spy("paddleformers.nn.norm", "fused_rms_norm_ext", calls),
                _spy("paddleformers.nn.mlp", "fused_swiglu", calls)]
        restore = lambda: [u() for u in undo]   # noqa: E731
    ids, labels, mask = _inputs()
    model.train()
    loss, logits = model(input_ids=paddle.to_tensor(ids), labels=paddle.to_tensor(labels),
                         attention_mask=paddle.to_tensor(mask), return_dict=False)[:2]
    loss.backward()
    restore()
    result = {"loss": loss.numpy(), "logits": logits.numpy(), "spied_calls": np.array(len(calls)),
              "fused_linear_layers": np.array(sum(type(m).__name__ == "FusedLinear" for m in model.sublayers()))}
    for name, p in model.named_parameters():
        if p.grad is not None:
            result["grad/" + name] = p.grad.numpy()
    if variant == "base":
        model.eval()
        with paddle.no_grad():
            tokens, scores = model.generate(input_ids=paddle.to_tensor(ids[:, :PROMPT]), max_new_tokens=NEW_TOKENS,
                                            decode_strategy="greedy_search", use_cache=True)
        result["tokens"], result["scores"] = tokens.numpy(), scores.numpy()
    np.savez(os.path.join(outdir, f"{case}.npz"), **result)


def main(framework, outdir, paddleformers_dir):
    on_oarlock = framework == "oarlock"
    if on_oarlock:
        import oarlock.compat
        oarlock.compat.enable_paddle_alias()
    sys.path.insert(0, paddleformers_dir)
    import paddle
    failures = {}
    for case in CASES:       # base cases first: they write the weights the variants load
        try:
            run_case(paddle, case, outdir, on_oarlock)
        except Exception as exc:   # recorded per case, so one failing model does not hide the others
            import traceback
            failures[case] = "".join(traceback.format_exception(exc))[-20000:]
    for case, text in failures.items():
        with open(os.path.join(outdir, f"{case}.error.txt"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main(*sys.argv[1:4])
