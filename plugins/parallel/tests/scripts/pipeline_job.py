"""Pipeline parallelism on 2 ranks (pp_degree 2), checked against the same PipelineLayer run as one plain model in
the same process (num_stages=1: every layer, the same per-layer seeds, so the same weights).

argv: out.json. The model is a small MLP whose stages pass what Paddle lets them pass: a dict holding the
activations, a float mask and int64 ids (both stop_gradient), or a tuple (activations, ids). Each check builds
a PipelineLayer over the two stages and a PipelineParallel (fleet.distributed_model) and compares per-step
losses, final weights, gradients and eval outputs with the one-process model trained by plain SGD on the whole
batch. Bad input must give the same clear error on both ranks; the last check makes stage 1 refuse what stage 0
sends: stage 1 names itself and what arrived, stage 0 is released by the watchdog naming its stage (the job runs
with a short OARLOCK_COLLECTIVE_TIMEOUT, and that check comes last since the timed-out group is unusable).

Results travel to rank 0 through raw mpi4py (scripts/_checks.py), which writes the JSON report to argv[1].
"""

from __future__ import annotations

import copy
import functools
import sys
import traceback

import numpy as np
from _checks import close, expect_error, registry, run_checks

import oarlock
import oarlock.nn as nn
from oarlock.distributed import fleet
from oarlock.distributed.fleet.meta_parallel import (LayerDesc, PipelineLayer, PipelineParallel,
                                                     SharedLayerDesc)

CHECKS, check = registry()
close = functools.partial(close, rtol=1e-5, atol=1e-6)
BATCH, MBS, ACC, LR, STEPS = 4, 2, 2, 0.1, 3
CTX: dict = {}


class Encode(nn.Layer):
    """x -> {"h": activations, "mask": a float mask (stop_gradient), "ids": int64 ids (argmax of each row)}."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)

    def forward(self, x):
        mask = (x[:, :1] > 0).astype("float32")
        return {"h": oarlock.tanh(self.fc(x)), "mask": mask,
                "ids": oarlock.argmax(x, axis=1)}


class Mix(nn.Layer):
    """The dict -> the dict with h mixed and scaled by (1 + mask)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, d):
        return {**d, "h": oarlock.tanh(self.fc(d["h"])) * (1 + d["mask"])}


class ToTuple(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, d):
        return oarlock.tanh(self.fc(d["h"])), d["ids"]


class Head(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, t):
        h, ids = t
        return self.fc(h) + ids.astype("float32")[:, None] * 0.01


class Plain(nn.Layer):
    """Expects a Tensor: stage 1 of the mismatched model."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        if not isinstance(x, oarlock.Tensor):
            raise TypeError(f"Plain.forward() takes a Tensor, got {type(x).__name__}")
        return self.fc(x)


class Tied(nn.Layer):
    """An embedding-like weight used at both ends: x @ W at the start, h @ W^T at the end."""

    def __init__(self):
        super().__init__()
        self.weight = self.create_parameter([4, 8])

    def forward(self, x):
        return oarlock.tanh(oarlock.matmul(x, self.weight))


def tied_out(layer, h):
    return oarlock.matmul(h, layer.weight, transpose_y=True)


def mse(out, y):
    return ((out - y) ** 2).mean()


def l1(out, y):
    return (out - y).abs().mean()


DESCS = [LayerDesc(Encode), LayerDesc(Mix), LayerDesc(ToTuple), LayerDesc(Head)]
TIED = [SharedLayerDesc("w", Tied), LayerDesc(nn.Linear, 8, 8), LayerDesc(nn.Tanh),
        SharedLayerDesc("w", Tied, tied_out)]


def batch(step: int, rows: int = BATCH):
    rng = np.random.default_rng(step)
    return (oarlock.to_tensor(rng.standard_normal((rows, 4)).astype("float32")),
            oarlock.to_tensor(rng.standard_normal((rows, 4)).astype("float32")))


def strategy(**pipeline):
    s = copy.deepcopy(CTX["strategy"])
    s.pipeline_configs = {"micro_batch_size": MBS, "accumulate_steps": ACC, **pipeline}
    return s


def pipeline(descs, seg="uniform", loss_fn=mse, clip=None, **pipeline_configs):
    """(PipelineParallel, its optimizer) over the 2 stages, with SGD (and `clip`) through fleet."""
    hcg = CTX["hcg"]
    layer = PipelineLayer(descs, topology=hcg.topology(), loss_fn=loss_fn, seg_method=seg)
    optimizer = oarlock.optimizer.SGD(learning_rate=LR, parameters=layer.parameters(), grad_clip=clip)
    model = PipelineParallel(layer, hcg, strategy(**pipeline_configs))
    return model, fleet.distributed_optimizer(optimizer)


def single(descs, loss_fn=mse, clip=None, steps=STEPS):
    """The one-process model trained on the whole batches: (layer, per-step losses)."""
    layer = PipelineLayer(descs, num_stages=1, loss_fn=loss_fn)
    optimizer = oarlock.optimizer.SGD(learning_rate=LR, parameters=layer.parameters(), grad_clip=clip)
    losses = []
    for step in range(steps):
        x, y = batch(step)
        loss = loss_fn(layer(x), y)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses.append(float(loss))
    return layer, losses


def compare_weights(failures, what, model, reference):
    """Every parameter this stage built equals the one-process model's layer of the same index."""
    for index, built in own_layers(model._layers).items():
        want = reference.run_function[index]
        for (name, got), (_, ref) in zip(built.named_parameters(), want.named_parameters()):
            close(failures, f"{what}: layer {index} {name}", got, ref)


def own_layers(layer) -> dict:
    return {layer._start_poss[0] + i: f for i, f in enumerate(layer.run_function) if isinstance(f, nn.Layer)}


def train(model, optimizer, steps=STEPS, **kwargs):
    return [model.train_batch(list(batch(step)), optimizer, **kwargs) for step in range(steps)]


@check
def segmentation_and_stages(failures):
    """Paddle's uniform split of 4 layers over 2 stages is [0, 2, 4]; each rank builds only its layers, with the
    weights of the one-process build (per-layer seeds); get_stage_from_index."""
    hcg = CTX["hcg"]
    layer = PipelineLayer(DESCS, topology=hcg.topology(), loss_fn=mse)
    reference = PipelineLayer(DESCS, num_stages=1, loss_fn=mse)
    stage = hcg.get_stage_id()
    if layer.segment_parts != [0, 2, 4] or [layer.get_stage_from_index(i) for i in range(4)] != [0, 0, 1, 1]:
        failures.append(f"segments {layer.segment_parts}")
    if sorted(own_layers(layer)) != [2 * stage, 2 * stage + 1] or layer.get_num_virtual_stages() != 1:
        failures.append(f"stage {stage} built layers {sorted(own_layers(layer))}")
    for index, built in own_layers(layer).items():
        for (name, got), (_, want) in zip(built.named_parameters(), reference.run_function[index].named_parameters()):
            close(failures, f"layer {index} {name}", got, want)


@check
def dict_between_stages(failures):
    """Stage 0 sends a dict (activations, a stop_gradient float mask, int64 ids), with both schedules: per-step
    losses and the weights after training equal the one-process model's; the loss reaches both stages."""
    reference, want = single(DESCS)
    for mode in ("1F1B", "FThenB"):
        model, optimizer = pipeline(DESCS, schedule_mode=mode)
        losses = train(model, optimizer)
        close(failures, f"{mode} losses", [float(v) for v in losses], want)
        if any(list(v.shape) != [] for v in losses):
            failures.append(f"{mode}: loss shapes {[v.shape for v in losses]}")
        compare_weights(failures, mode, model, reference)


@check
def tuple_between_stages(failures):
    """Split [0, 3, 4]: stage 0 sends a tuple (activations, int64 ids); equal losses and weights."""
    reference, want = single(DESCS)
    model, optimizer = pipeline(DESCS, seg=[0, 3, 4])
    close(failures, "losses", [float(v) for v in train(model, optimizer)], want)
    compare_weights(failures, "tuple", model, reference)


@check
def split_backward_with_weight_actions(failures):
    """A schedule that splits backward ("B": input gradients, then "W": weight gradients, deferred) gives the
    losses and weights of one process: the executor runs what a zero-bubble style schedule asks."""
    from oarlock_parallel.pipeline_schedules import Action
    orders = {0: ["F0", "F1", "B0", "B1", "W1", "W0"], 1: ["F0", "B0", "W0", "F1", "B1", "W1"]}
    reference, want = single(DESCS)
    model, optimizer = pipeline(DESCS)
    actions = [Action(a[0], int(a[1])) for a in orders[CTX["hcg"].get_stage_id()]]
    model._schedule = lambda what: (model._check_actions(actions, what), actions)[1]
    close(failures, "losses", [float(v) for v in train(model, optimizer)], want)
    compare_weights(failures, "B/W split", model, reference)


@check
def forward_backward_pipeline_leaves_the_step(failures):
    """forward_backward_pipeline (Paddle's train_batch without the optimizer) returns the loss and leaves in each
    parameter the one-process gradient of the whole batch, the weights unchanged; get_static_scheduler gives
    Paddle's 1F1B string for the stage."""
    x, y = batch(0)
    reference = PipelineLayer(DESCS, num_stages=1)
    loss = mse(reference(x), y)
    loss.backward()
    model, _ = pipeline(DESCS)
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    close(failures, "loss", float(model.forward_backward_pipeline([x, y])), float(loss))
    for index, built in own_layers(model._layers).items():
        for (name, got), (_, want) in zip(built.named_parameters(), reference.run_function[index].named_parameters()):
            close(failures, f"layer {index} {name} gradient", got.grad, want.grad)
    for key, value in model.state_dict().items():
        close(failures, f"{key} unchanged", value, before[key])
    want_schedule = {0: "f0;f1;b0;b1;", 1: "f0;b0;f1;b1;"}[CTX["hcg"].get_stage_id()]
    if model.get_static_scheduler() != want_schedule:
        failures.append(f"static schedule {model.get_static_scheduler()!r}, want {want_schedule!r}")


@check
def micro_batch_losses_and_several_loss_fns(failures):
    """return_micro_batch_loss gives [accumulate_steps] losses (each micro-batch's loss / acc, Paddle's
    convention); with loss_fn=[mse, l1] train_batch returns both and backward starts from loss_fn_idx."""
    x, y = batch(0)
    reference = PipelineLayer(DESCS, num_stages=1)
    out = reference(x)
    per_micro = [float(mse(out[i * MBS:(i + 1) * MBS], y[i * MBS:(i + 1) * MBS])) / ACC for i in range(ACC)]
    model, optimizer = pipeline(DESCS)
    got = model.train_batch([x, y], optimizer, return_micro_batch_loss=True)
    close(failures, "micro-batch losses", got, per_micro)
    reference, want = single(DESCS, loss_fn=l1, steps=2)
    model, optimizer = pipeline(DESCS, loss_fn=[mse, l1])
    for step in range(2):
        both = model.train_batch(list(batch(step)), optimizer, loss_fn_idx=1)
        if not isinstance(both, list) or len(both) != 2:
            failures.append(f"two loss_fn: got {both!r}")
            return
        close(failures, f"step {step} l1 loss", float(both[1]), want[step])
    compare_weights(failures, "loss_fn_idx=1", model, reference)


@check
def eval_batch_matches_forward(failures):
    """eval_batch: without compute_loss the last stage returns each micro-batch's output of the one-process
    forward; with it, both stages get the one-process loss; no gradient is left behind."""
    x, y = batch(7)
    reference = PipelineLayer(DESCS, num_stages=1, loss_fn=mse)
    want = reference(x)
    model, _ = pipeline(DESCS)
    outputs = model.eval_batch([x, y])
    if model.is_pipeline_last_stage():
        if len(outputs) != ACC:
            failures.append(f"{len(outputs)} outputs")
        for i, out in enumerate(outputs):
            close(failures, f"output of micro-batch {i}", out, want[i * MBS:(i + 1) * MBS])
    close(failures, "eval loss", float(model.eval_batch([x, y], compute_loss=True)), float(mse(want, y)))
    if any(p.grad is not None for p in model.parameters()):
        failures.append("eval_batch left gradients")


@check
def shared_layer_across_stages(failures):
    """A SharedLayerDesc on stages 0 and 1 (tied weight): the copy of stage 1, spoiled before wrapping, is
    broadcast from stage 0; its gradients are summed over both stages, and global-norm clipping (which bites:
    clip_norm 0.05) counts it once, so losses and the shared weight equal the one-process tied model's on both
    ranks; is_firstly_shared marks the first copy only."""
    hcg = CTX["hcg"]
    clip = nn.ClipGradByGlobalNorm(0.05)
    reference, want = single(TIED, clip=nn.ClipGradByGlobalNorm(0.05))
    layer = PipelineLayer(TIED, topology=hcg.topology(), loss_fn=mse)
    shared = layer.shared_layers["w"].weight
    if shared.is_firstly_shared != (hcg.get_stage_id() == 0):
        failures.append(f"is_firstly_shared {shared.is_firstly_shared} on stage {hcg.get_stage_id()}")
    if hcg.get_stage_id() == 1:
        shared.set_value(oarlock.zeros_like(shared))
    optimizer = oarlock.optimizer.SGD(learning_rate=LR, parameters=layer.parameters(), grad_clip=clip)
    model = fleet.distributed_model(layer)
    close(failures, "shared weight after wrapping", shared, reference_init(TIED))
    losses = train(model, fleet.distributed_optimizer(optimizer))
    close(failures, "losses", [float(v) for v in losses], want)
    close(failures, "shared weight after training", shared, reference.shared_layers["w"].weight)


def reference_init(descs):
    return PipelineLayer(descs, num_stages=1).shared_layers["w"].weight


@check
def bad_input_fails_on_every_rank(failures):
    """A batch that is not micro_batch_size x accumulate_steps rows (only stage 0's inputs: stage 1, whose labels
    are fine, raises too), a missing loss function, an optimizer that fleet did not wrap, an unknown schedule and
    a split that leaves a stage empty: the same clear error on both ranks, no hang."""
    hcg = CTX["hcg"]
    model, optimizer = pipeline(DESCS)
    x, y = batch(0, rows=5)
    expect_error(failures, "batch of 5 rows", ValueError,
                 ["train_batch()", "data[0] (the inputs) has 5 rows", "micro_batch_size (2) x accumulate_steps (2)"],
                 lambda: model.train_batch([x, batch(0)[1]], optimizer))
    expect_error(failures, "no loss_fn", ValueError, ["loss_fn_idx=0 names no loss function"],
                 lambda: pipeline(DESCS, loss_fn=None)[0].train_batch(list(batch(0)), optimizer))
    plain = oarlock.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    expect_error(failures, "plain optimizer", TypeError, ["train_batch()", "HybridParallelOptimizer"],
                 lambda: model.train_batch(list(batch(0)), plain))
    expect_error(failures, "unknown schedule", ValueError, ["schedule_mode", "'ZigZag'", "FThenB"],
                 lambda: pipeline(DESCS, schedule_mode="ZigZag"))
    expect_error(failures, "empty stage", ValueError, ["PipelineLayer()", "leaves pipeline stage 1 without a layer"],
                 lambda: PipelineLayer(DESCS[:2], topology=hcg.topology(), seg_method=[0, 2, 2]))
    expect_error(failures, "uniform over too few layers", ValueError, ["leaves pipeline stage 0 without a layer"],
                 lambda: PipelineLayer(DESCS[:1], topology=hcg.topology()))
    losses = train(model, optimizer, steps=1)      # still usable after the refused batch
    close(failures, "a good step after the errors", float(losses[0]), single(DESCS, steps=1)[1][0])


@check
def mismatched_stages_fail_on_every_rank(failures):
    """Stage 1's first layer takes a Tensor but stage 0 sends a dict: stage 1 raises naming itself and what
    arrived; stage 0, waiting for the output gradient, is released by the watchdog naming both stages."""
    hcg = CTX["hcg"]
    model, optimizer = pipeline([LayerDesc(Encode), LayerDesc(Plain)])
    call = functools.partial(model.train_batch, list(batch(0)), optimizer)
    if hcg.get_stage_id() == 1:
        expect_error(failures, "stage 1", TypeError,
                     ["pipeline stage 1, layers [1, 2), cannot run micro-batch 0 on what stage 0 sent",
                      "{'h': Tensor[2, 8] float32, 'mask': Tensor[2, 1] float32, 'ids': Tensor[2] int64}",
                      "Plain.forward() takes a Tensor, got dict"], call)
    else:
        expect_error(failures, "stage 0", oarlock.distributed.CollectiveTimeoutError,
                     ["pipeline stage 0, rank 0 waited too long for the output gradient of micro-batch 0 from "
                      "pipeline stage 1, rank 1"], call)


def main(out):
    setup = None
    try:
        s = fleet.DistributedStrategy()
        s.hybrid_configs = {"dp_degree": 1, "mp_degree": 1, "pp_degree": 2}
        s.pipeline_configs = {"micro_batch_size": MBS, "accumulate_steps": ACC}
        fleet.init(is_collective=True, strategy=s)
        CTX.update(hcg=fleet.get_hybrid_communicate_group(), strategy=s)
    except Exception:
        setup = traceback.format_exc()
    run_checks(CHECKS, out, setup_error=setup)


if __name__ == "__main__":
    main(sys.argv[1])
