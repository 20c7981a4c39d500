"""Real PyTorch libraries from the package registry, unmodified, through the proxy: their README examples (and
einops' own test suite) run on the façade and against the real torch in the same process, with the same weights
and inputs; outputs, input gradients and parameter gradients (or the parameters after optimizer steps) agree
within 1e-5 relative. The figures are in README.md ("### Torch proxy")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TOL = 1e-5
SCRIPTS = Path(__file__).parent / "scripts"


def _report(library, errors):
    """Print the figure the README's table quotes (seen with pytest -s)."""
    print(f"\ntorch-proxy result: {library}: max relative error {max(errors):.1e} over {len(errors)} comparisons")


def _inputs(rng, *shapes):
    return [rng.standard_normal(s).astype("float32") for s in shapes]


def _run_both(tools, fn_real, fn_proxy, arrays):
    """fn(*tensors) on both sides with gradients on every input; the loss weighs each output element by a fixed
    random number (a norm-preserving op such as a rotation would give sum(out**2) no gradient). Returns the
    largest relative difference of the outputs and the input gradients."""
    torch, ft = tools.torch, tools.ft
    ins_t = [torch.tensor(a, requires_grad=True) for a in arrays]
    ins_o = [ft.tensor(a, requires_grad=True) for a in arrays]
    out_t, out_o = fn_real(*ins_t), fn_proxy(*ins_o)
    out_t = out_t if isinstance(out_t, (tuple, list)) else (out_t,)
    out_o = out_o if isinstance(out_o, (tuple, list)) else (out_o,)
    rng = np.random.default_rng(99)
    weights = [rng.standard_normal(tuple(o.shape)).astype("float32") for o in out_t]
    sum(((o * torch.tensor(w)).sum() for o, w in zip(out_t, weights)), torch.zeros(())).backward()
    sum(((o * ft.tensor(w)).sum() for o, w in zip(out_o, weights)), ft.zeros(())).backward()
    errors = [tools.rel(a, b) for a, b in zip(out_t, out_o)]
    errors += [tools.rel(a.grad, b.grad) for a, b in zip(ins_t, ins_o)]
    return max(errors)


def _param_grads_error(tools, model_t, model_o):
    """The parameter gradients as one vector (matched by torch's parameter names): max |difference| over the
    largest |gradient|. Per tensor, a gradient that is a near-cancelling sum (hyper-connection mixing weights)
    carries float32 rounding of its much larger terms, so the whole vector is the scale."""
    named_o = dict(model_o.named_parameters())
    assert set(named_o) == {n for n, _ in model_t.named_parameters()}
    pairs = [(p.grad, named_o[n].grad) for n, p in model_t.named_parameters() if p.grad is not None]
    worst = max(float(np.abs(a.numpy() - b.numpy()).max()) for a, b in pairs)
    scale = max(float(np.abs(a.numpy()).max()) for a, _ in pairs)
    return worst / scale


# ------------------------------------------------------------------------------------------------ einops
def test_einops_own_test_suite():
    """einops ships its tests; they check the torch backend against numpy. Run unmodified with the proxy on
    everywhere (einops looks for "torch" in sys.modules). Deselected: the two torch.compile tests (they
    configure torch._dynamo, which the façade does not have)."""
    pytest.importorskip("einops")
    env = {**os.environ, "EINOPS_TEST_BACKENDS": "torch"}
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "pytest_through_proxy.py"), "*", "--", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-c", os.devnull, "--assert=plain", "--pyargs", "einops.tests",
         "-k", "not test_torch_compile_with_dynamic_shape and not test_torch_compile_for_functions"],
        capture_output=True, text=True, env=env, cwd=os.path.dirname(sys.executable), timeout=300)
    tail = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    summary = re.search(r"(\d+) passed", result.stdout)
    assert summary and int(summary.group(1)) >= 55 and not re.search(r"\d+ failed", result.stdout), tail


def test_einops_readme_examples(proxy_tools):
    pair = proxy_tools.load_both("einops", {"einops"}, also=["einops.layers.torch"])
    torch, ft = proxy_tools.torch, proxy_tools.ft
    layers_t, layers_o = pair.sub_real["einops.layers.torch"], pair.sub_proxy["einops.layers.torch"]
    rng = np.random.default_rng(0)
    (images,) = _inputs(rng, (6, 3, 8, 10))

    def examples(e):
        def run(x):
            return (e.rearrange(x, "b c h w -> b h w c"), e.rearrange(x, "b c (h h2) (w w2) -> b (c h2 w2) h w",
                                                                          h2=2, w2=2),
                    e.reduce(x, "b c (h h2) (w w2) -> b h w c", "max", h2=2, w2=2),
                    e.reduce(x, "b c h w -> b c", "mean"), e.repeat(x, "b c h w -> b c (h 2) (w k)", k=3),
                    e.einsum(x, x, "b c h w, b d h w -> b c d"),
                    e.pack([x, e.reduce(x, "b c h w -> b c", "sum")], "b *")[0])
        return run

    errors = [_run_both(proxy_tools, examples(pair.real), examples(pair.proxy), [images])]

    # einops.layers.torch inside a model, as the README's "layers" section builds one
    def model(nn, layers):
        return nn.Sequential(layers.Rearrange("b c (h h2) (w w2) -> b h w (c h2 w2)", h2=2, w2=2),
                             nn.Linear(12, 16), layers.Reduce("b h w c -> b c", "mean"),
                             layers.EinMix("b c -> b k", weight_shape="c k", bias_shape="k", c=16, k=4))

    model_t, model_o = model(torch.nn, layers_t), model(ft.nn, layers_o)
    proxy_tools.copy_weights(model_t, model_o)
    errors += [_run_both(proxy_tools, model_t, model_o, [images]), _param_grads_error(proxy_tools, model_t, model_o)]
    _report("einops README", errors)
    assert max(errors) <= TOL, errors


# ----------------------------------------------------------------------------------- rotary-embedding-torch
def test_rotary_embedding_torch_readme_examples(proxy_tools):
    pytest.importorskip("rotary_embedding_torch")
    pair = proxy_tools.load_both("rotary_embedding_torch", {"rotary_embedding_torch", "einops"})
    rng = np.random.default_rng(1)
    q, k = _inputs(rng, (1, 8, 64, 64), (1, 8, 64, 64))
    errors = []
    for options in ({"dim": 32}, {"dim": 32, "use_xpos": True}, {"dim": 32, "interpolate_factor": 2.0}):
        emb_t, emb_o = pair.real.RotaryEmbedding(**options), pair.proxy.RotaryEmbedding(**options)
        proxy_tools.copy_weights(emb_t, emb_o)
        if options.get("use_xpos"):
            errors.append(_run_both(proxy_tools, emb_t.rotate_queries_and_keys, emb_o.rotate_queries_and_keys, [q, k]))
        else:
            errors.append(_run_both(proxy_tools, lambda a, b, e=emb_t: (e.rotate_queries_or_keys(a),
                                                                       e.rotate_queries_or_keys(b)),
                                    lambda a, b, e=emb_o: (e.rotate_queries_or_keys(a), e.rotate_queries_or_keys(b)),
                                    [q, k]))
            one_q = q[:, :, :1]   # the KV-cache example: one query against cached keys
            errors.append(_run_both(proxy_tools, emb_t.rotate_queries_with_cached_keys,
                                    emb_o.rotate_queries_with_cached_keys, [one_q, k]))
    # axial rotary embeddings (video): frequencies for 4 x 8 x 6 positions, applied to q
    emb_t = pair.real.RotaryEmbedding(dim=16, freqs_for="pixel", max_freq=256)
    emb_o = pair.proxy.RotaryEmbedding(dim=16, freqs_for="pixel", max_freq=256)
    proxy_tools.copy_weights(emb_t, emb_o)
    (video,) = _inputs(rng, (1, 4, 8, 6, 64))
    errors.append(_run_both(proxy_tools, lambda x: pair.real.apply_rotary_emb(emb_t.get_axial_freqs(4, 8, 6), x),
                            lambda x: pair.proxy.apply_rotary_emb(emb_o.get_axial_freqs(4, 8, 6), x), [video]))
    # learned frequencies: the parameter's gradient too
    emb_t = pair.real.RotaryEmbedding(dim=32, learned_freq=True)
    emb_o = pair.proxy.RotaryEmbedding(dim=32, learned_freq=True)
    proxy_tools.copy_weights(emb_t, emb_o)
    errors.append(_run_both(proxy_tools, emb_t.rotate_queries_or_keys, emb_o.rotate_queries_or_keys, [q]))
    errors.append(_param_grads_error(proxy_tools, emb_t, emb_o))
    _report("rotary-embedding-torch", errors)
    assert max(errors) <= TOL, " ".join(f"{e:.2e}" for e in errors)


# ----------------------------------------------------------------------------------------- local-attention
def test_local_attention_readme_examples(proxy_tools):
    pytest.importorskip("local_attention")
    scope = {"local_attention", "einops", "hyper_connections"}
    pair = proxy_tools.load_both("local_attention", scope)
    torch, ft = proxy_tools.torch, proxy_tools.ft
    rng = np.random.default_rng(2)
    q, k, v = _inputs(rng, (2, 4, 256, 32), (2, 4, 256, 32), (2, 4, 256, 32))
    mask = np.ones((2, 256), bool)
    mask[1, 200:] = False
    options = dict(dim=32, window_size=64, causal=True, look_backward=1, look_forward=0, dropout=0.0,
                   exact_windowsize=False)
    attn_t, attn_o = pair.real.LocalAttention(**options), pair.proxy.LocalAttention(**options)
    proxy_tools.copy_weights(attn_t, attn_o)
    errors = [_run_both(proxy_tools, lambda *a: attn_t(*a, mask=torch.tensor(mask)),
                        lambda *a: attn_o(*a, mask=ft.tensor(mask)), [q, k, v])]
    options = dict(dim=32, window_size=64, causal=False, look_backward=1, look_forward=1, autopad=True,
                   exact_windowsize=True)
    attn_t, attn_o = pair.real.LocalAttention(**options), pair.proxy.LocalAttention(**options)
    errors.append(_run_both(proxy_tools, attn_t, attn_o, [q[:, :, :230], k[:, :, :230], v[:, :, :230]]))

    model_options = dict(num_tokens=256, dim=32, depth=2, local_attn_window_size=32, max_seq_len=128, causal=True)
    model_t, model_o = pair.real.LocalTransformer(**model_options), pair.proxy.LocalTransformer(**model_options)
    proxy_tools.copy_weights(model_t, model_o)
    tokens = rng.integers(0, 256, (2, 128))
    logits_t, logits_o = model_t(torch.tensor(tokens)), model_o(ft.tensor(tokens))
    errors.append(proxy_tools.rel(logits_t, logits_o))
    logits_t.logsumexp(-1).sum().backward()
    logits_o.logsumexp(-1).sum().backward()
    errors.append(_param_grads_error(proxy_tools, model_t, model_o))
    _report("local-attention", errors)
    assert max(errors) <= TOL, " ".join(f"{e:.2e}" for e in errors)


# ------------------------------------------------------------------------------------ optimizer libraries
def _train_both(tools, make_opt_t, make_opt_o, steps=4, create_graph=False, dtype="float32"):
    """A small MLP trained a few steps on each side with the library's optimizer (closure form); returns the
    largest relative difference of the parameters afterwards."""
    torch, ft = tools.torch, tools.ft
    rng = np.random.default_rng(3)
    x, y = (a.astype(dtype) for a in _inputs(rng, (16, 5), (16, 3)))
    model_t = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(
        getattr(torch, dtype))
    model_o = ft.nn.Sequential(ft.nn.Linear(5, 8), ft.nn.Tanh(), ft.nn.Linear(8, 3)).to(getattr(ft, dtype))
    tools.copy_weights(model_t, model_o)
    for model, opt, fw in ((model_t, make_opt_t(model_t.parameters()), torch),
                           (model_o, make_opt_o(model_o.parameters()), ft)):
        xs, ys = fw.tensor(x), fw.tensor(y)
        for _ in range(steps):
            def closure(model=model, opt=opt, xs=xs, ys=ys):
                opt.zero_grad()
                loss = ((model(xs) - ys) ** 2).mean()
                loss.backward(create_graph=create_graph)
                return loss
            opt.step(closure)
    named_o = dict(model_o.named_parameters())
    return max(tools.rel(p, named_o[n]) for n, p in model_t.named_parameters())


def test_lion_pytorch_readme_example(proxy_tools):
    pytest.importorskip("lion_pytorch")
    pair = proxy_tools.load_both("lion_pytorch", {"lion_pytorch"})
    errors = []
    for options in ({"lr": 1e-2, "weight_decay": 1e-2}, {"lr": 1e-2, "weight_decay": 1e-2,
                                                          "decoupled_weight_decay": True}):
        errors.append(_train_both(proxy_tools, lambda p, o=options: pair.real.Lion(p, **o),
                                  lambda p, o=options: pair.proxy.Lion(p, **o)))
    _report("lion-pytorch", errors)
    assert max(errors) <= TOL, errors


def test_adam_atan2_pytorch_readme_example(proxy_tools):
    pytest.importorskip("adam_atan2_pytorch")
    pair = proxy_tools.load_both("adam_atan2_pytorch", {"adam_atan2_pytorch"})
    errors = {}
    for name, options in (("AdamAtan2", {"lr": 1e-2, "weight_decay": 0.1}), ("AdamAtan2", {"regen_reg_rate": 0.1}),
                          ("AdoptAtan2", {"lr": 1e-2}), ("AdamAtan2ClipGrok", {"lr": 1e-2})):
        errors[f"{name}{options}"] = _train_both(
            proxy_tools, lambda p, n=name, o=options: getattr(pair.real, n)(p, **o),
            lambda p, n=name, o=options: getattr(pair.proxy, n)(p, **o))
    _report("adam-atan2-pytorch", list(errors.values()))
    assert max(errors.values()) <= TOL, errors


def _same_rademacher_draws(monkeypatch, tools):
    """Adahessian draws random +-1 vectors with torch.randint_like; the two frameworks' generators differ, so
    both sides get the same draws (one seeded numpy stream each), the only change made to either side."""
    for framework, to_tensor in ((tools.torch, tools.torch.tensor), (tools.ft, tools.ft.tensor)):
        rng = np.random.default_rng(5)

        def randint_like(p, low=0, high=None, rng=rng, to_tensor=to_tensor, **kwargs):
            return to_tensor(rng.integers(low, high, tuple(p.shape)).astype(str(p.dtype).split(".")[-1]))

        monkeypatch.setattr(framework, "randint_like", randint_like)


def test_torch_optimizer_readme_usage(proxy_tools, monkeypatch):
    """torch-optimizer's README: `optim.<Name>(model.parameters(), lr=...)` then `step()`, for each of its
    optimizers (Lookahead wraps one; Adahessian needs backward(create_graph=True) and random draws; Shampoo
    raises matrices to -1/4 through an SVD and Adahessian divides by Hessian-diagonal estimates, which torch's
    multi-threaded float32 sums make vary by ~1e-5 from run to run: those two run in float64)."""
    pytest.importorskip("torch_optimizer")
    pair = proxy_tools.load_both("torch_optimizer", {"torch_optimizer", "pytorch_ranger"})
    special = {"Lookahead", "Adahessian", "Shampoo"}
    names = [n for n in pair.real.__all__ if isinstance(getattr(pair.real, n), type) and n not in special]
    assert len(names) >= 25
    errors = {name: _train_both(proxy_tools, getattr(pair.real, name), getattr(pair.proxy, name)) for name in names}
    errors["Lookahead(Yogi)"] = _train_both(proxy_tools, lambda p: pair.real.Lookahead(pair.real.Yogi(p)),
                                            lambda p: pair.proxy.Lookahead(pair.proxy.Yogi(p)))
    errors["Shampoo(float64)"] = _train_both(proxy_tools, pair.real.Shampoo, pair.proxy.Shampoo, dtype="float64")
    _same_rademacher_draws(monkeypatch, proxy_tools)
    errors["Adahessian(float64)"] = _train_both(proxy_tools, pair.real.Adahessian, pair.proxy.Adahessian,
                                                create_graph=True, dtype="float64")
    _report(f"torch-optimizer ({len(errors)} optimizers)", list(errors.values()))
    bad = {n: e for n, e in errors.items() if not e <= TOL}
    assert not bad, bad


# ------------------------------------------------------------------------------------------- x-transformers
def test_x_transformers_readme_examples(proxy_tools):
    """x-transformers' README: a GPT-style decoder (TransformerWrapper + Decoder) with its AutoregressiveWrapper
    loss, an encoder with rotary embeddings / GLU feed-forwards / RMSNorm, and the XTransformer
    encoder-decoder; logits, losses and every parameter gradient against torch. Not run: padding masks, whose
    einx.where call fails inside einx's own graph tracer on the façade (a known gap)."""
    pytest.importorskip("x_transformers")
    scope = {"x_transformers", "einops", "einx", "torch_einops_utils", "hyper_connections"}
    pair = proxy_tools.load_both("x_transformers", scope)
    torch, ft = proxy_tools.torch, proxy_tools.ft
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, 64, (2, 16))
    errors = []

    def compare(build, run):
        model_t, model_o = build(pair.real), build(pair.proxy)
        proxy_tools.copy_weights(model_t, model_o)
        out_t, out_o = run(model_t, torch), run(model_o, ft)
        errors.append(proxy_tools.rel(out_t, out_o))
        w = rng.standard_normal(tuple(out_t.shape)).astype("float32")
        (out_t * torch.tensor(w)).sum().backward()
        (out_o * ft.tensor(w)).sum().backward()
        errors.append(_param_grads_error(proxy_tools, model_t, model_o))

    def gpt(x):
        return x.TransformerWrapper(num_tokens=64, max_seq_len=16, attn_layers=x.Decoder(dim=32, depth=2, heads=4))

    compare(gpt, lambda m, fw: m(fw.tensor(tokens)))
    compare(lambda x: x.AutoregressiveWrapper(gpt(x)), lambda m, fw: m(fw.tensor(tokens)))
    compare(lambda x: x.TransformerWrapper(num_tokens=64, max_seq_len=16, attn_layers=x.Encoder(
                dim=32, depth=2, heads=4, rotary_pos_emb=True, ff_glu=True, use_rmsnorm=True)),
            lambda m, fw: m(fw.tensor(tokens)))
    compare(lambda x: x.XTransformer(dim=32, enc_num_tokens=64, enc_depth=1, enc_heads=4, enc_max_seq_len=16,
                                     dec_num_tokens=64, dec_depth=1, dec_heads=4, dec_max_seq_len=16,
                                     tie_token_emb=True),
            lambda m, fw: m(fw.tensor(tokens), fw.tensor(tokens[:, ::-1].copy())))
    _report("x-transformers", errors)
    assert max(errors) <= TOL, " ".join(f"{e:.2e}" for e in errors)


# ----------------------------------------------------------------------------------- vector-quantize-pytorch
def test_vector_quantize_pytorch_readme_examples(proxy_tools):
    """vector-quantize-pytorch's README quantizers in training mode: VectorQuantize (EMA codebook), ResidualVQ,
    FSQ, LFQ and SimVQ; quantized outputs, indices, losses, the input gradient (straight-through) and the
    codebook buffers after the EMA update, against torch."""
    pytest.importorskip("vector_quantize_pytorch")
    scope = {"vector_quantize_pytorch", "einops", "einx", "torch_einops_utils"}
    pair = proxy_tools.load_both("vector_quantize_pytorch", scope)
    torch, ft = proxy_tools.torch, proxy_tools.ft
    rng = np.random.default_rng(6)
    errors = []
    for name, options, dim in (("VectorQuantize", dict(dim=32, codebook_size=64, decay=0.8, commitment_weight=1.0),
                                32),
                               ("ResidualVQ", dict(dim=32, num_quantizers=3, codebook_size=64), 32),
                               ("FSQ", dict(levels=[8, 5, 5, 5]), 4), ("LFQ", dict(codebook_size=256, dim=32), 32),
                               ("SimVQ", dict(dim=32, codebook_size=64), 32)):
        model_t, model_o = getattr(pair.real, name)(**options), getattr(pair.proxy, name)(**options)
        proxy_tools.copy_weights(model_t, model_o)
        (x,) = _inputs(rng, (2, 16, dim))
        outs = []
        for model, fw in ((model_t, torch), (model_o, ft)):
            xin = fw.tensor(x, requires_grad=True)
            out = model(xin)
            quantized = out[0]
            weights = np.linspace(-1, 1, int(np.prod(tuple(quantized.shape))), dtype="float32")
            loss = (quantized * fw.tensor(weights.reshape(tuple(quantized.shape)))).sum()
            for extra in out[2:]:
                if extra is not None and extra.dtype.is_floating_point:
                    loss = loss + extra.sum()
            loss.backward()
            outs.append((out, xin.grad, model.state_dict()))
        (out_t, grad_t, state_t), (out_o, grad_o, state_o) = outs
        errors += [proxy_tools.rel(a, b) for a, b in zip(out_t, out_o) if a is not None and hasattr(a, "shape")]
        errors.append(proxy_tools.rel(grad_t, grad_o))
        errors += [proxy_tools.rel(state_t[k], state_o[k]) for k in state_t]
    _report("vector-quantize-pytorch", errors)
    assert max(errors) <= TOL, " ".join(f"{e:.2e}" for e in errors)
