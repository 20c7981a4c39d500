"""The façade against real torch, API by API: functions and Tensor methods called from torch code (a module
imported through the proxy), nn.Module semantics, nn layers and functional with the same weights,
autograd.Function, the optimizers, and torch.utils.data. Oracle: the installed torch, same inputs."""

from __future__ import annotations

import numpy as np
import oarlock
import pytest

TOL = 1e-6
RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4, 5)).astype("float32")
Y = RNG.standard_normal((3, 4, 5)).astype("float32")
MASK = X > 0.3
IDX = RNG.integers(0, 4, (3, 2, 5))

# (name, call) pairs: call(fw, x, y) with fw the torch module (real or façade); x, y tensors of X and Y
FUNCTIONS = [
    ("max(dim)", lambda t, x, y: t.max(x, 1)), ("min(dim, keepdim)", lambda t, x, y: t.min(x, -1, keepdim=True)),
    ("max(x, y)", lambda t, x, y: t.max(x, y)), ("sort", lambda t, x, y: t.sort(x, dim=1, descending=True)),
    ("median(dim)", lambda t, x, y: t.median(x, 1)), ("median()", lambda t, x, y: t.median(x)),
    ("split(size)", lambda t, x, y: t.split(x, 3, dim=2)), ("split(sizes)", lambda t, x, y: t.split(x, [1, 3], 1)),
    ("chunk", lambda t, x, y: t.chunk(x, 3, dim=1)), ("tensor_split", lambda t, x, y: t.tensor_split(x, 3, dim=2)),
    ("gather", lambda t, x, y: t.gather(x, 1, t.tensor(IDX))),
    ("scatter", lambda t, x, y: t.scatter(x, 1, t.tensor(IDX), y)),
    ("scatter_add", lambda t, x, y: t.scatter_add(x, 1, t.tensor(IDX), y)),
    ("index_select", lambda t, x, y: t.index_select(x, 2, t.tensor([4, 0, 2]))),
    ("where(c, x, y)", lambda t, x, y: t.where(x > 0, x, y)), ("where(c)", lambda t, x, y: t.where(x > 0.5)),
    ("var", lambda t, x, y: t.var(x, 1)), ("std(correction=0)", lambda t, x, y: t.std(x, dim=2, correction=0)),
    ("var_mean", lambda t, x, y: t.var_mean(x, 1, keepdim=True)), ("norm", lambda t, x, y: t.norm(x, dim=-1)),
    ("norm(p=1)", lambda t, x, y: t.norm(x, p=1)), ("cumprod", lambda t, x, y: t.cumprod(x, dim=1)),
    ("einsum", lambda t, x, y: t.einsum("bij,bkj->bik", x, y)), ("einsum(list)", lambda t, x, y: t.einsum(
        "bij,bij->b", [x, y])), ("einsum(0-d)", lambda t, x, y: t.einsum("bij,->bji", x, y[0, 0, 0])),
    ("cat", lambda t, x, y: t.cat([x, y], dim=1)), ("stack", lambda t, x, y: t.stack((x, y), dim=-1)),
    ("clamp", lambda t, x, y: t.clamp(x, min=-0.5, max=0.5)), ("fmod", lambda t, x, y: t.fmod(x, 0.3)),
    ("softmax", lambda t, x, y: t.softmax(x, dim=1)), ("logsumexp", lambda t, x, y: t.logsumexp(x, dim=1)),
    ("topk", lambda t, x, y: t.topk(x, 2, dim=-1)), ("cumsum", lambda t, x, y: t.cumsum(x, dim=2)),
    ("tril", lambda t, x, y: t.tril(x, diagonal=-1)), ("outer", lambda t, x, y: t.outer(x[0, 0], y[0, 0])),
    ("broadcast_tensors", lambda t, x, y: t.broadcast_tensors(x, y[:1])),
    ("meshgrid", lambda t, x, y: t.meshgrid(x[0, 0], y[0, 0, :3], indexing="ij")),
    ("take_along_dim", lambda t, x, y: t.take_along_dim(x, t.tensor(IDX), dim=1)),
    ("masked_fill", lambda t, x, y: t.masked_fill(x, t.tensor(MASK), -1.0)),
    ("full(int)", lambda t, x, y: t.full((2, 3), 7)), ("arange", lambda t, x, y: t.arange(2, 11, 3)),
    ("arange(float)", lambda t, x, y: t.arange(0.0, 1.0, 0.25)), ("linspace", lambda t, x, y: t.linspace(-1, 1, 7)),
    ("eye", lambda t, x, y: t.eye(3, 4)), ("tensor(ints)", lambda t, x, y: t.tensor([[1, 2], [3, 4]])),
    ("zeros_like", lambda t, x, y: t.zeros_like(x, dtype=t.float64)),
    ("full_like", lambda t, x, y: t.full_like(x, 2.5)),
    ("unique", lambda t, x, y: t.unique(t.tensor(IDX))), ("arctan", lambda t, x, y: t.arctan(x)),
    ("broadcast_shapes", lambda t, x, y: t.broadcast_shapes((3, 1, 5), (4, 1))),
]

# Tensor methods called from torch code: (name, args builder)
METHODS = [
    ("max", lambda t: (1,)), ("min", lambda t: (2, True)), ("sort", lambda t: (-1, True)), ("median", lambda t: (1,)),
    ("split", lambda t: (2, 1)), ("numel", lambda t: ()), ("size", lambda t: ()), ("size", lambda t: (-1,)),
    ("view", lambda t: (3, -1)), ("view", lambda t: ((5, 12),)), ("reshape", lambda t: (-1, 5)),
    ("transpose", lambda t: (0, 2)), ("permute", lambda t: (2, 0, 1)), ("expand", lambda t: (2, 3, 4, 5)),
    ("repeat", lambda t: (1, 2, 1)), ("unsqueeze", lambda t: (1,)), ("flatten", lambda t: (1,)),
    ("masked_fill", lambda t: (t.tensor(MASK), 0.0)), ("contiguous", lambda t: ()), ("float", lambda t: ()),
    ("double", lambda t: ()), ("type_as", lambda t: (t.zeros(1, dtype=t.float64),)), ("to", lambda t: (t.float64,)),
    ("unbind", lambda t: (1,)), ("gather", lambda t: (1, t.tensor(IDX))), ("index_select", lambda t: (
        2, t.tensor([1, 3]))), ("where", lambda t: (t.tensor(MASK), 0.0)), ("std", lambda t: (1,)),
    ("var", lambda t: (2, False, True)), ("norm", lambda t: (2, -1)), ("softmax", lambda t: (-1,)),
    ("chunk", lambda t: (2, 1)), ("unfold", lambda t: (2, 3, 1)), ("movedim", lambda t: (0, -1)),
    ("new_zeros", lambda t: ((2, 2),)), ("new_tensor", lambda t: ([1.0, 2.0],)), ("clamp_min", lambda t: (0.1,)),
    ("addcmul", lambda t: (t.ones(5), t.ones(5))), ("amax", lambda t: ((0, 2),)), ("type", lambda t: (t.float64,)),
    ("stride", lambda t: ()), ("dim", lambda t: ()), ("nelement", lambda t: ()),
    ("log_softmax", lambda t: (1,)), ("cumprod", lambda t: (2,)), ("select", lambda t: (1, -1)),
]


def _compare(tools, expected, got, what):
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected), (what, got)
        if hasattr(expected, "_fields"):
            assert tuple(expected._fields) == tuple(got._fields), what
        for e, g in zip(expected, got):
            _compare(tools, e, g, what)
    elif isinstance(expected, tools.torch.Tensor):
        assert isinstance(got, oarlock.Tensor), (what, type(got))
        assert str(expected.dtype).replace("torch.", "") == got.dtype.name, (what, expected.dtype, got.dtype)
        assert tools.rel(expected, got) <= TOL, what
    else:
        assert expected == got, (what, expected, got)


@pytest.mark.parametrize("name,call", FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_functions_match_torch(proxy_tools, name, call):
    torch, ft = proxy_tools.torch, proxy_tools.ft
    _compare(proxy_tools, call(torch, torch.tensor(X), torch.tensor(Y)), call(ft, ft.tensor(X), ft.tensor(Y)), name)


def test_tensor_methods_match_torch_for_torch_code(proxy_tools, torch_code):
    """Methods whose Paddle meaning differs (max(1) -> values only, split(2) -> 2 pieces, numel() -> Tensor)
    get torch's meaning when torch code calls them, and keep Paddle's for oarlock code."""
    torch, ft = proxy_tools.torch, proxy_tools.ft
    for name, args in METHODS:
        expected = getattr(torch.tensor(X), name)(*args(torch))
        got = torch_code.call(ft.tensor(X), name, *args(ft))
        if name in ("size", "stride"):
            expected, got = tuple(expected) if not isinstance(expected, int) else expected, got
        _compare(proxy_tools, expected, got, name)
    assert torch_code.attr(ft.tensor(X), "shape") == (3, 4, 5) and ft.tensor(X).shape == [3, 4, 5]
    x = ft.tensor(X)
    assert isinstance(x.max(1), oarlock.Tensor) and len(x.split(2, 1)) == 2 and isinstance(x.numel(), oarlock.Tensor)
    assert x.size == 60 and type(x.size) is int   # oarlock code: Paddle's plain int; torch code: callable
    assert torch_code.call(x, "size") == (3, 4, 5) and torch_code.call(x, "size", -1) == 5


def test_in_place_and_legacy_methods(proxy_tools, torch_code):
    torch, ft = proxy_tools.torch, proxy_tools.ft
    for name, args in [("add_", lambda t: (t.ones(5), )), ("add_", lambda t: (2.0, t.ones(5))),
                       ("sub_", lambda t: (t.ones(5),)), ("mul_", lambda t: (1.5,)),
                       ("addcmul_", lambda t: (t.ones(5), t.full((5,), 2.0))),
                       ("addcdiv_", lambda t: (-0.5, t.ones(5), t.full((5,), 4.0))),
                       ("lerp_", lambda t: (t.ones(5), 0.3)), ("clamp_", lambda t: (-0.2, 0.2)),
                       ("masked_fill_", lambda t: (t.tensor(MASK), 9.0)), ("zero_", lambda t: ())]:
        a, b = torch.tensor(X), ft.tensor(X)
        getattr(a, name)(*args(torch))
        torch_code.call(b, name, *args(ft))
        assert proxy_tools.rel(a, b) <= TOL, name
    a, b = torch.tensor(X), ft.tensor(X)
    a.add_(torch.ones(5), alpha=torch.tensor(0.5))
    torch_code.call(b, "add_", ft.ones(5), alpha=ft.tensor(0.5))
    assert proxy_tools.rel(a, b) <= TOL
    assert isinstance(ft.FloatTensor(2, 3), ft.FloatTensor) and ft.LongTensor([1, 2]).dtype == ft.int64
    assert torch_code.call(ft.tensor(X), "type") == "torch.FloatTensor"
    assert torch_code.attr(ft.tensor(X), "is_sparse") is False and callable(ft.tensor(X).is_sparse)


def test_dtypes_devices_and_generators(proxy_tools):
    torch, ft = proxy_tools.torch, proxy_tools.ft
    x = ft.ones(2, 3)
    assert x.dtype == ft.float32 and ft.float is ft.float32 and ft.long is ft.int64
    assert ft.get_default_dtype() == ft.float32
    assert ft.device("cpu") == x.device and isinstance(x.device, ft.device) and x.device.type == "cpu"
    assert ft.tensor([1, 2]).dtype == ft.int64 and ft.tensor([1.0]).dtype == ft.float32
    assert ft.tensor(True).dtype == ft.bool
    assert ft.finfo(ft.float32).eps == torch.finfo(torch.float32).eps
    g1, g2 = ft.Generator().manual_seed(3), ft.Generator().manual_seed(3)
    assert np.array_equal(ft.randn(4, generator=g1).numpy(), ft.randn(4, generator=g2).numpy())
    ft.manual_seed(5)
    a = ft.rand(3)
    ft.manual_seed(5)
    assert np.array_equal(a.numpy(), ft.rand(3).numpy()) and ft.initial_seed() == 5
    with ft.no_grad():
        assert not ft.is_grad_enabled()
        with ft.enable_grad():
            assert ft.is_grad_enabled()
    with ft.inference_mode():
        y = ft.ones(2, requires_grad=True) * 2
    assert y.requires_grad is False
    assert not ft.cuda.is_available() and ft.cuda.device_count() == 0 and not ft.backends.mps.is_available()


def test_module_semantics(proxy_tools):
    torch, ft = proxy_tools.torch, proxy_tools.ft

    def build(nn):
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(5, 6)
                self.norm = nn.LayerNorm(6)
                self.register_buffer("scale", nn.Parameter(torch.ones(1)).data * 0 + 2 if nn is torch.nn
                                     else ft.ones(1) * 2)
                self.register_buffer("cache", ft.zeros(1) if nn is ft.nn else torch.zeros(1), persistent=False)
                self.extra = None
                self.extra = nn.ModuleList([nn.Linear(6, 6), nn.GELU()])
                self.heads = nn.ModuleDict({"a": nn.Linear(6, 2), "b": nn.Sequential(nn.Linear(6, 3), nn.Tanh())})
                self.gains = nn.ParameterList([nn.Parameter(ft.ones(2) if nn is ft.nn else torch.ones(2))])

            def forward(self, x):
                h = self.norm(self.proj(x)) * self.scale
                for layer in self.extra:
                    h = layer(h)
                return self.heads["a"](h) * self.gains[0], self.heads["b"](h)
        return Block()

    mt, mo = build(torch.nn), build(ft.nn)
    assert [n for n, _ in mt.named_modules()] == [n for n, _ in mo.named_modules()]
    assert [n for n, _ in mt.named_parameters()] == [n for n, _ in mo.named_parameters()]
    assert list(mt.state_dict()) == list(mo.state_dict())   # "cache" is not persistent on either side
    assert [n for n, _ in mt.named_buffers()] == [n for n, _ in mo.named_buffers()]
    assert mo.proj.weight.shape == [6, 5] and isinstance(mo, oarlock.nn.Layer)
    proxy_tools.copy_weights(mt, mo)
    xs = RNG.standard_normal((2, 5)).astype("float32")
    outs_t, outs_o = mt(torch.tensor(xs)), mo(ft.tensor(xs))
    for a, b in zip(outs_t, outs_o):
        assert proxy_tools.rel(a, b) <= TOL
    (outs_t[0].sum() + outs_t[1].pow(2).sum()).backward()
    (outs_o[0].sum() + outs_o[1].pow(2).sum()).backward()
    grads_o = dict(mo.named_parameters())
    for n, p in mt.named_parameters():
        assert proxy_tools.rel(p.grad, grads_o[n].grad) <= 1e-5, n
    assert mo.eval() is mo and not mo.heads["b"][1].training and mo.train().training
    assert mo.get_submodule("heads.b.0") is mo.heads["b"][0]
    seen = []
    mo.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "Block" and "Linear" in seen
    result = mo.load_state_dict({k: v for k, v in mo.state_dict().items() if k != "scale"}, strict=False)
    assert result.missing_keys == ["scale"] and result.unexpected_keys == []
    mo.zero_grad()
    assert all(p.grad is None for p in mo.parameters())
    mo.to(ft.float64)
    assert mo.proj.weight.dtype == ft.float64 and mo.scale.dtype == ft.float64
    with pytest.raises(RuntimeError, match="size mismatch for proj.weight"):
        mo.load_state_dict({**mo.state_dict(), "proj.weight": ft.zeros(5, 6)})


LAYERS = [
    ("Linear", lambda nn: nn.Linear(5, 4), (2, 3, 5)), ("Linear(no bias)", lambda nn: nn.Linear(5, 4, bias=False),
                                                         (3, 5)),
    ("Embedding", lambda nn: nn.Embedding(10, 4, padding_idx=0), None),
    ("LayerNorm", lambda nn: nn.LayerNorm(5, eps=1e-3), (2, 3, 5)), ("RMSNorm", lambda nn: nn.RMSNorm(5), (2, 5)),
    ("GroupNorm", lambda nn: nn.GroupNorm(2, 4), (2, 4, 5)),
    ("Conv1d", lambda nn: nn.Conv1d(4, 3, 3, padding=1, bias=False), (2, 4, 5)),
    ("Conv2d", lambda nn: nn.Conv2d(4, 2, (3, 2), stride=(1, 2), groups=2), (2, 4, 5, 6)),
    ("GELU(tanh)", lambda nn: nn.GELU(approximate="tanh"), (2, 5)), ("SiLU", lambda nn: nn.SiLU(), (2, 5)),
    ("Mish", lambda nn: nn.Mish(), (2, 5)), ("Softplus", lambda nn: nn.Softplus(beta=2.0), (2, 5)),
    ("GLU", lambda nn: nn.GLU(dim=-1), (2, 6)), ("LeakyReLU", lambda nn: nn.LeakyReLU(0.2), (2, 5)),
    ("PReLU", lambda nn: nn.PReLU(), (2, 5)), ("Hardswish", lambda nn: nn.Hardswish(), (2, 5)),
    ("Softmax", lambda nn: nn.Softmax(dim=0), (3, 5)), ("Flatten", lambda nn: nn.Flatten(), (2, 3, 5)),
    ("Unflatten", lambda nn: nn.Unflatten(1, (2, 3)), (2, 6)), ("Bilinear", None, None),
    ("BatchNorm1d", lambda nn: nn.BatchNorm1d(4), (6, 4, 5)), ("BatchNorm2d", lambda nn: nn.BatchNorm2d(
        3, momentum=None), (2, 3, 4, 5)), ("ConvTranspose1d", lambda nn: nn.ConvTranspose1d(4, 6, 3, stride=2,
                                                                                            groups=2), (2, 4, 5)),
    ("ConvTranspose2d", lambda nn: nn.ConvTranspose2d(3, 2, (2, 3), padding=1, output_padding=(0, 1), stride=2),
     (2, 3, 4, 5)), ("Upsample", lambda nn: nn.Upsample(scale_factor=2, mode="nearest"), (2, 3, 4, 5)),
]


@pytest.mark.parametrize("name,make,shape", LAYERS, ids=[entry[0] for entry in LAYERS])
def test_layers_match_torch(proxy_tools, name, make, shape):
    torch, ft = proxy_tools.torch, proxy_tools.ft
    if make is None:
        mt, mo = torch.nn.Bilinear(3, 4, 2), ft.nn.Bilinear(3, 4, 2)
        proxy_tools.copy_weights(mt, mo)
        a, b = RNG.standard_normal((5, 3)).astype("float32"), RNG.standard_normal((5, 4)).astype("float32")
        assert proxy_tools.rel(mt(torch.tensor(a), torch.tensor(b)), mo(ft.tensor(a), ft.tensor(b))) <= TOL
        return
    mt, mo = make(torch.nn), make(ft.nn)
    assert [(n, list(p.shape)) for n, p in mt.named_parameters()] == [(n, p.shape) for n, p in mo.named_parameters()]
    proxy_tools.copy_weights(mt, mo)
    if shape is None:
        xt, xo = torch.tensor(IDX[0]), ft.tensor(IDX[0])
    else:
        data = RNG.standard_normal(shape).astype("float32")
        xt, xo = torch.tensor(data, requires_grad=True), ft.tensor(data, requires_grad=True)
    yt, yo = mt(xt), mo(xo)
    assert proxy_tools.rel(yt, yo) <= TOL
    w = RNG.standard_normal(tuple(yt.shape)).astype("float32")
    (yt * torch.tensor(w)).sum().backward()
    (yo * ft.tensor(w)).sum().backward()
    if shape is not None:
        assert proxy_tools.rel(xt.grad, xo.grad) <= 1e-5
    for (n, p), (_, q) in zip(mt.named_parameters(), mo.named_parameters()):
        assert proxy_tools.rel(p.grad, q.grad) <= 1e-5, n
    for (n, b), (_, c) in zip(mt.state_dict().items(), mo.state_dict().items()):   # running statistics
        assert proxy_tools.rel(b, c) <= TOL, n
    mt.eval()
    mo.eval()
    if shape is not None:
        assert proxy_tools.rel(mt(xt), mo(xo)) <= TOL


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_matches_torch(proxy_tools, batch_first):
    torch, ft = proxy_tools.torch, proxy_tools.ft
    mt, mo = (fw.nn.MultiheadAttention(8, 2, batch_first=batch_first) for fw in (torch, ft))
    assert list(mt.state_dict()) == list(mo.state_dict())
    proxy_tools.copy_weights(mt, mo)
    q, kv = RNG.standard_normal((5, 3, 8)).astype("float32"), RNG.standard_normal((7, 3, 8)).astype("float32")
    if batch_first:
        q, kv = q.transpose(1, 0, 2).copy(), kv.transpose(1, 0, 2).copy()
    pad = np.zeros((3, 7), bool)
    pad[1, 5:] = True
    causal = np.triu(np.ones((5, 7), bool), 1)
    results = []
    for fw, m in ((torch, mt), (ft, mo)):
        query = fw.tensor(q, requires_grad=True)
        out, weights = m(query, fw.tensor(kv), fw.tensor(kv), key_padding_mask=fw.tensor(pad),
                         attn_mask=fw.tensor(causal))
        (out * fw.tensor(np.linspace(-1, 1, 120, dtype="float32").reshape(tuple(out.shape)))).sum().backward()
        results.append((out, weights, query.grad))
    for a, b in zip(*results):
        assert proxy_tools.rel(a, b) <= 1e-5
    for (n, p), (_, g) in zip(mt.named_parameters(), mo.named_parameters()):
        assert proxy_tools.rel(p.grad, g.grad) <= 1e-5, n


FUNCTIONAL = [
    ("linear", lambda F, t, x, y: F.linear(x, y[0], y[0, :, 0])),
    ("scaled_dot_product_attention", lambda F, t, x, y: F.scaled_dot_product_attention(x, y, x)),
    ("sdpa(causal)", lambda F, t, x, y: F.scaled_dot_product_attention(x, y, y, is_causal=True, scale=0.3)),
    ("sdpa(bool mask)", lambda F, t, x, y: F.scaled_dot_product_attention(x, y, y, attn_mask=t.tensor(MASK[0, :, :4]))),
    ("sdpa(float mask)", lambda F, t, x, y: F.scaled_dot_product_attention(x, y, y, attn_mask=y[0, :, :4])),
    ("cross_entropy", lambda F, t, x, y: F.cross_entropy(x, t.tensor(IDX[:, 0]), label_smoothing=0.1)),
    ("cross_entropy(ignore)", lambda F, t, x, y: F.cross_entropy(x[:, :, 0], t.tensor([1, -100, 3]))),
    ("cross_entropy(probs)", lambda F, t, x, y: F.cross_entropy(x, F.softmax(y, dim=1), reduction="sum")),
    ("pad", lambda F, t, x, y: F.pad(x, (1, 2, 0, 1), value=0.5)), ("pad(crop)", lambda F, t, x, y: F.pad(x, (-1, 1))),
    ("pad(reflect)", lambda F, t, x, y: F.pad(x, (2, 1), mode="reflect")),
    ("normalize", lambda F, t, x, y: F.normalize(x, dim=-1)), ("layer_norm", lambda F, t, x, y: F.layer_norm(
        x, (5,), y[0, 0], y[0, 1])), ("gelu", lambda F, t, x, y: F.gelu(x)),
    ("softmax", lambda F, t, x, y: F.softmax(x, dim=1)), ("log_softmax", lambda F, t, x, y: F.log_softmax(x, -1)),
    ("mse_loss", lambda F, t, x, y: F.mse_loss(x, y)), ("l1_loss", lambda F, t, x, y: F.l1_loss(x, y, reduction="sum")),
    ("smooth_l1_loss", lambda F, t, x, y: F.smooth_l1_loss(x, y, beta=0.5)),
    ("bce_with_logits", lambda F, t, x, y: F.binary_cross_entropy_with_logits(x, t.sigmoid(y))),
    ("kl_div", lambda F, t, x, y: F.kl_div(F.log_softmax(x, -1), F.softmax(y, -1), reduction="batchmean")),
    ("one_hot", lambda F, t, x, y: F.one_hot(t.tensor(IDX[0, 0]), 6)), ("glu", lambda F, t, x, y: F.glu(x[..., :4])),
    ("embedding", lambda F, t, x, y: F.embedding(t.tensor(IDX[0]), y[0])),
    ("cosine_similarity", lambda F, t, x, y: F.cosine_similarity(x, y, dim=-1)),
    ("logsigmoid", lambda F, t, x, y: F.logsigmoid(x)), ("softplus", lambda F, t, x, y: F.softplus(x, beta=2)),
    ("dropout(eval)", lambda F, t, x, y: F.dropout(x, 0.5, training=False)),
    ("pairwise_distance", lambda F, t, x, y: F.pairwise_distance(x, y)),
    ("gaussian_nll_loss", lambda F, t, x, y: F.gaussian_nll_loss(x, y, y.abs() + 0.1)),
    ("batch_norm(train)", lambda F, t, x, y: F.batch_norm(x, t.zeros(4), t.ones(4), y[0, :, 0], None, True)),
]


@pytest.mark.parametrize("name,call", FUNCTIONAL, ids=[f[0] for f in FUNCTIONAL])
def test_functional_matches_torch(proxy_tools, name, call):
    torch, ft = proxy_tools.torch, proxy_tools.ft
    xt, yt = torch.tensor(X, requires_grad=True), torch.tensor(Y, requires_grad=True)
    xo, yo = ft.tensor(X, requires_grad=True), ft.tensor(Y, requires_grad=True)
    out_t, out_o = call(torch.nn.functional, torch, xt, yt), call(ft.nn.functional, ft, xo, yo)
    _compare(proxy_tools, out_t, out_o, name)
    if out_t.dtype.is_floating_point:
        w = RNG.standard_normal(tuple(out_t.shape)).astype("float32")
        (out_t * torch.tensor(w)).sum().backward()
        (out_o * ft.tensor(w)).sum().backward()
        for a, b in ((xt, xo), (yt, yo)):
            if a.grad is not None:
                assert proxy_tools.rel(a.grad, b.grad) <= 1e-5, name


def test_autograd_function_with_ctx(proxy_tools):
    torch, ft = proxy_tools.torch, proxy_tools.ft

    def make(fw):
        class ScaledCube(fw.autograd.Function):
            @staticmethod
            def forward(ctx, x, scale, y):
                ctx.save_for_backward(x, y)
                ctx.scale = scale
                ctx.flags = tuple(ctx.needs_input_grad)
                return x ** 3 * scale + y

            @staticmethod
            def backward(ctx, grad):
                x, y = ctx.saved_tensors
                return grad * 3 * x ** 2 * ctx.scale, None, grad if ctx.needs_input_grad[2] else None

        return ScaledCube

    flags = {}
    for fw, key in ((torch, "t"), (ft, "o")):
        x, y = fw.tensor(X, requires_grad=True), fw.tensor(Y)
        fn = make(fw)
        out = fn.apply(x, 2.0, y)
        out.sum().backward()
        flags[key] = (out, x.grad)
    assert proxy_tools.rel(flags["t"][0], flags["o"][0]) <= TOL and proxy_tools.rel(flags["t"][1], flags["o"][1]) <= TOL
    x = ft.tensor(X, requires_grad=True)
    g, = ft.autograd.grad((x ** 2).sum(), x)
    assert proxy_tools.rel(torch.tensor(2 * X), g) <= TOL


@pytest.mark.parametrize("name,options", [("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True,
                                                    "weight_decay": 0.01}),
                                           ("Adam", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1}),
                                           ("AdamW", {"lr": 0.01, "betas": (0.8, 0.9)})])
def test_optimizers_match_torch(proxy_tools, name, options):
    torch, ft = proxy_tools.torch, proxy_tools.ft
    mt, mo = torch.nn.Linear(5, 3), ft.nn.Linear(5, 3)
    proxy_tools.copy_weights(mt, mo)
    opt_t, opt_o = getattr(torch.optim, name)(mt.parameters(), **options), getattr(ft.optim, name)(
        mo.parameters(), **options)
    sched_t = torch.optim.lr_scheduler.CosineAnnealingLR(opt_t, T_max=5)
    sched_o = ft.optim.lr_scheduler.CosineAnnealingLR(opt_o, T_max=5)
    for _ in range(4):
        for m, opt, sched, fw in ((mt, opt_t, sched_t, torch), (mo, opt_o, sched_o, ft)):
            opt.zero_grad()
            ((m(fw.tensor(X[0])) - fw.tensor(Y[0, :, :3])) ** 2).mean().backward()
            opt.step()
            sched.step()
    assert abs(opt_t.param_groups[0]["lr"] - opt_o.param_groups[0]["lr"]) < 1e-12
    for (n, p), (_, q) in zip(mt.named_parameters(), mo.named_parameters()):
        assert proxy_tools.rel(p, q) <= 1e-5, n
    state = opt_o.state_dict()
    assert sorted(state["state"]) == [0, 1] and state["param_groups"][0]["params"] == [0, 1]


def test_data_utilities_match_torch(proxy_tools):
    torch, ft = proxy_tools.torch, proxy_tools.ft
    dt = torch.utils.data.TensorDataset(torch.tensor(X), torch.tensor(IDX[:, 0]))
    do = ft.utils.data.TensorDataset(ft.tensor(X), ft.tensor(IDX[:, 0]))
    batches_t = list(torch.utils.data.DataLoader(dt, batch_size=2))
    batches_o = list(ft.utils.data.DataLoader(do, batch_size=2))
    assert len(batches_t) == len(batches_o) == 2
    for bt, bo in zip(batches_t, batches_o):
        for a, b in zip(bt, bo):
            _compare(proxy_tools, a, b, "batch")

    class Pairs(ft.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.full(2, i, np.float32), "y": i, "name": f"s{i}"}

    batches = list(ft.utils.data.DataLoader(Pairs(), batch_size=2, drop_last=True, shuffle=True))
    assert len(batches) == 2 and batches[0]["x"].shape == [2, 2] and batches[0]["y"].dtype == ft.int64
    left, right = ft.utils.data.random_split(Pairs(), [3, 2], generator=ft.Generator().manual_seed(1))
    assert sorted([left[i]["y"] for i in range(3)] + [right[i]["y"] for i in range(2)]) == [0, 1, 2, 3, 4]
    # the samplers and dataset algebra (oarlock.io's under torch's signatures) against torch's
    for lib in (torch, ft):
        data = lib.utils.data
        both = data.TensorDataset(lib.arange(5)) + data.TensorDataset(lib.arange(3))
        parts = data.random_split(both, [0.5, 0.25, 0.25], generator=lib.Generator().manual_seed(0))
        drawn = list(data.RandomSampler(both, replacement=True, num_samples=4))
        seen = (len(both), int(both[6][0]), isinstance(both, data.Dataset), [len(p) for p in parts],
                isinstance(parts[0], data.Subset), list(data.BatchSampler(data.SequentialSampler(both), 3, False)),
                len(data.BatchSampler(range(8), 3, True)), sorted(data.SubsetRandomSampler([4, 7, 9])),
                len(drawn), all(0 <= i < 8 for i in drawn))
        if lib is torch:
            expected = seen
    assert seen == expected


def test_save_and_load_round_trip(proxy_tools, tmp_path):
    ft = proxy_tools.ft
    model = ft.nn.Sequential(ft.nn.Linear(3, 4), ft.nn.BatchNorm1d(4))
    opt = ft.optim.Adam(model.parameters(), lr=0.1)
    model(ft.randn(5, 3)).sum().backward()
    opt.step()
    ft.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": 3}, tmp_path / "ckpt.pt")
    loaded = ft.load(tmp_path / "ckpt.pt", map_location="cpu")
    assert loaded["step"] == 3 and list(loaded["model"]) == list(model.state_dict())
    for key, value in model.state_dict().items():
        assert np.array_equal(loaded["model"][key].numpy(), value.numpy()) and loaded["model"][key].dtype == value.dtype
    clone = ft.nn.Sequential(ft.nn.Linear(3, 4), ft.nn.BatchNorm1d(4))
    clone.load_state_dict(loaded["model"])
    x = ft.randn(2, 3)
    assert np.array_equal(clone.eval()(x).numpy(), model.eval()(x).numpy())
    assert np.array_equal(loaded["opt"]["state"][0]["exp_avg"].numpy(), opt.state_dict()["state"][0]["exp_avg"].numpy())


@pytest.mark.parametrize("kind,options", [("LSTM", dict(num_layers=2, bidirectional=True)),
                                          ("GRU", dict(batch_first=True)), ("RNN", dict(nonlinearity="relu"))])
def test_recurrent_layers_match_torch(proxy_tools, kind, options):
    torch, ft = proxy_tools.torch, proxy_tools.ft
    mt, mo = getattr(torch.nn, kind)(5, 4, **options), getattr(ft.nn, kind)(5, 4, **options)
    assert [(n, list(p.shape)) for n, p in mt.named_parameters()] == [(n, p.shape) for n, p in mo.named_parameters()]
    proxy_tools.copy_weights(mt, mo)
    data = RNG.standard_normal((3, 6, 5)).astype("float32")
    results = []
    for fw, m in ((torch, mt), (ft, mo)):
        x = fw.tensor(data, requires_grad=True)
        out, state = m(x)
        states = state if isinstance(state, tuple) else (state,)
        (out.sum() + sum(s.pow(2).sum() for s in states)).backward()
        results.append([out, *states, x.grad])
    for a, b in zip(*results):
        assert proxy_tools.rel(a, b) <= 1e-5
    for (n, p), (_, q) in zip(mt.named_parameters(), mo.named_parameters()):
        assert proxy_tools.rel(p.grad, q.grad) <= 1e-5, n


def test_oarlock_code_keeps_paddles_plain_size():
    """With the torch methods installed on oarlock.Tensor, oarlock code still reads Paddle's `x.size` as a plain
    int: an int subclass is no Python scalar to the dispatcher (oarlock.take's `index + x.size` failed after
    the proxy had been used in the same process)."""
    from oarlock_torch_proxy import tensor_methods
    tensor_methods.install()
    x = oarlock.arange(6, dtype="float32").reshape([2, 3])
    assert type(x.size) is int and x.size == 6
    np.testing.assert_array_equal((oarlock.to_tensor([1, -1]) + x.size).numpy(), [7, 5])
    np.testing.assert_array_equal(oarlock.take(x, oarlock.to_tensor([-1, 2])).numpy(), [5.0, 2.0])


def test_oarlock_code_keeps_paddles_index_methods():
    """Paddle's x.index_select(index, dim=1) / x.gather(index, axis=...) from oarlock code keep Paddle's meaning
    with the torch methods installed (a `dim=` keyword alone once sent them to torch's signature)."""
    from oarlock_torch_proxy import tensor_methods
    tensor_methods.install()
    x = oarlock.arange(6, dtype="float32").reshape([2, 3])
    index = oarlock.to_tensor([2, 0])
    np.testing.assert_array_equal(x.index_select(index, dim=1).numpy(), [[2.0, 0.0], [5.0, 3.0]])
    np.testing.assert_array_equal(x.index_select(index=index, dim=1).numpy(), [[2.0, 0.0], [5.0, 3.0]])
    np.testing.assert_array_equal(x.gather(oarlock.to_tensor([1]), axis=0).numpy(), [[3.0, 4.0, 5.0]])
