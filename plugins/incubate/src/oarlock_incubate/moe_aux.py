"""paddle.incubate.nn.functional.cal_aux_loss: the MoE load-balancing loss, as Paddle 3.2 computes it (its
math_cal_aux_loss reference in cal_aux_loss.py, used on XPU, and the checks of CalAuxLossInferMeta; the
GPU kernel computes the same).

    seqlen = sum(dispatch_tokens_mask) if given, else sum(tokens_mask) if given, else numel(gate_prob) / E;
    seqlen = max(seqlen, clip_min)
    ce = (dispatch_mask summed over tokens when 2-D) / seqlen        (no gradient)
    me = sum(gate_prob, axis=0) / seqlen
    l_aux = sum(me * ce) * num_experts, divided by moe_k when use_group
With dispatch_tokens_mask and tokens_mask both given and gate_prob's token count differing from
dispatch_tokens_mask's, scale = seqlen / max(sum(tokens_mask), clip_min) and l_aux's value becomes
l_aux * scale while its gradient stays that of the unscaled loss (forward the global figure, backward the local
one). Returns (l_aux 0-D, seqlen_float 0-D, ce [E]), all in gate_prob's dtype; gate_prob gets the gradient."""

from __future__ import annotations

import oarlock

FUNCTIONS = ("cal_aux_loss",)
_NAME = "cal_aux_loss()"


def _check(gate_prob, dispatch_mask, tokens_mask, dispatch_tokens_mask):
    for arg, value in (("gate_prob", gate_prob), ("dispatch_mask", dispatch_mask)):
        if not isinstance(value, oarlock.Tensor):
            raise TypeError(f"{_NAME}: argument '{arg}' must be a Tensor; got {type(value).__name__}")
    if gate_prob.ndim != 2 or gate_prob.shape[0] < gate_prob.shape[1] or gate_prob.shape[1] > 1024:
        raise ValueError(f"{_NAME}: argument 'gate_prob' has shape {list(gate_prob.shape)}; accepted: 2-D [tokens, "
                         "experts] with tokens >= experts and at most 1024 experts")
    if dispatch_mask.ndim not in (1, 2) or dispatch_mask.shape[-1] != gate_prob.shape[1]:
        raise ValueError(f"{_NAME}: argument 'dispatch_mask' has shape {list(dispatch_mask.shape)}; accepted: "
                         f"[experts] or [tokens, experts] with experts = {gate_prob.shape[1]}")
    if str(dispatch_mask.dtype).split(".")[-1] != "int64":
        raise TypeError(f"{_NAME}: argument 'dispatch_mask' has dtype {dispatch_mask.dtype}; accepted: int64")
    if tokens_mask is not None and (not isinstance(tokens_mask, oarlock.Tensor) or tokens_mask.ndim != 1
                                    or tokens_mask.shape[0] != gate_prob.shape[0]):
        got = list(tokens_mask.shape) if isinstance(tokens_mask, oarlock.Tensor) else type(tokens_mask).__name__
        raise ValueError(f"{_NAME}: argument 'tokens_mask' = {got}; accepted: None or a 1-D Tensor of "
                         f"{gate_prob.shape[0]} tokens")
    if dispatch_tokens_mask is not None and (not isinstance(dispatch_tokens_mask, oarlock.Tensor)
                                             or dispatch_tokens_mask.ndim != 1
                                             or str(dispatch_tokens_mask.dtype).split(".")[-1] != "bool"):
        got = (f"{list(dispatch_tokens_mask.shape)} {dispatch_tokens_mask.dtype}"
               if isinstance(dispatch_tokens_mask, oarlock.Tensor) else type(dispatch_tokens_mask).__name__)
        raise ValueError(f"{_NAME}: argument 'dispatch_tokens_mask' = {got}; accepted: None or a 1-D bool Tensor")


def cal_aux_loss(gate_prob, dispatch_mask, tokens_mask, dispatch_tokens_mask, num_experts, use_group, moe_k,
                 clip_min, name=None):
    """(l_aux, seqlen_float, ce): the load-balancing loss of the module docstring."""
    _check(gate_prob, dispatch_mask, tokens_mask, dispatch_tokens_mask)
    dtype = gate_prob.dtype
    scale = None
    if dispatch_tokens_mask is not None:
        seqlen = dispatch_tokens_mask.astype(dtype).sum()
        if tokens_mask is not None and gate_prob.shape[0] != dispatch_tokens_mask.shape[0]:
            scale = seqlen / oarlock.clip(tokens_mask.astype(dtype).sum(), min=float(clip_min))
    elif tokens_mask is not None:
        seqlen = tokens_mask.astype(dtype).sum()
    else:
        seqlen = oarlock.to_tensor(gate_prob.size / num_experts, dtype=dtype)
    seqlen = oarlock.clip(seqlen, min=float(clip_min)).detach()
    counts = dispatch_mask.sum(axis=0) if dispatch_mask.ndim == 2 else dispatch_mask
    ce = (counts.astype(dtype) / seqlen).detach()
    me = gate_prob.sum(axis=0) / seqlen
    l_aux = (me * ce).sum() * float(num_experts)
    if use_group:
        l_aux = l_aux / float(moe_k)
    if scale is not None:   # forward the global figure, backward the local one
        l_aux = l_aux + (scale.detach() - 1.0) * l_aux.detach()
    return l_aux, seqlen, ce
