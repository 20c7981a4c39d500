"""Stage 3 ('p_g_os') FlexCheckpoints with flattened shards, run by each rank: argv mode folder out.json.

The model (Linear 5->7 whose weight of 35 elements is padded in 4 pieces, a kept-whole LayerNorm,
Linear 7->3, Linear 3->2 whose 2-element bias leaves ranks 2 and 3 empty pieces) trains with AdamW
(weight decay) on a seeded regression batch; under p_g_os each of 4 ranks takes a quarter of it.

Mode "save" (4 ranks): train 3 steps under p_g_os, save model.sharded_state_dict() and
optimizer.sharded_state_dict(...) into folder/p3; the whole tensors of every entry (each rank's flat
range gathered through raw mpi4py) go to folder/p3.npz; 2 more steps give the uninterrupted losses
(folder/p3.json). Checks that the entries are flattened ranges of the pieces (views of the pieces the
optimizer updates), kept-whole parameters replicated.
Mode "single" (one plain process): the plain model and AdamW load folder/p3 bit for bit (folder/p3.npz)
and train the 2 more steps: the uninterrupted losses (rtol 1e-5). Then it saves its state into
folder/s1 (folder/s1.npz, whole tensors) and records the loss of one more step.
Mode "load" (4 ranks): a fresh p_g_os model (other weights) and AdamW load folder/s1 in place: every
flat range, replicated tensor and step count bit for bit; the full weights gathered from the pieces
(what the recompute uses) bit for bit; one more step gives the single process's loss.

{check: [failures]} goes to out.json (rank 0; results travel through raw mpi4py).
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import numpy as np
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.distributed.sharding import group_sharded_parallel
from oarlock.plugin_api import array_of

SAVE_AT, MORE, BATCH = 3, 2, 8
RTOL = 1e-5
CHECKS = {"save": ["train_and_save", "flat_entries", "views_of_pieces", "kept_whole_replicated"],
          "single": ["load_single", "resume_single", "save_single"],
          "load": ["load_p_g_os", "gathered_weights", "resume_p_g_os"]}


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.ln, self.fc2, self.fc3 = nn.Linear(5, 7), nn.LayerNorm(7), nn.Linear(7, 3), nn.Linear(3, 2)

    def forward(self, x):
        return self.fc3(F.tanh(self.fc2(self.ln(F.gelu(self.fc1(x))))))


def build(seed: int) -> tuple:
    model = Net()
    rng = np.random.default_rng(seed)
    for p in model.parameters():
        p.set_value((rng.standard_normal(p.shape) * 0.5).astype("float32"))
    return model, oarlock.optimizer.AdamW(learning_rate=0.05, parameters=model.parameters(), weight_decay=0.1,
                                          epsilon=1e-6)


def data() -> tuple:
    rng = np.random.default_rng(5)
    return rng.standard_normal((BATCH, 5)).astype("float32"), rng.standard_normal((BATCH, 2)).astype("float32")


def step(model, opt, rank: int, size: int) -> float:
    """One step on this rank's slice of the batch; the loss averaged over the ranks (the whole batch's)."""
    x, y = data()
    mine = slice(rank * BATCH // size, (rank + 1) * BATCH // size)
    loss = F.mse_loss(model(oarlock.to_tensor(x[mine])), oarlock.to_tensor(y[mine]))
    loss.backward()
    opt.step()
    opt.clear_grad()
    return MPI.COMM_WORLD.allreduce(float(loss)) / size if size > 1 else float(loss)


def wrap_p_g_os(model, opt):
    model, opt, _ = group_sharded_parallel(model, opt, "p_g_os", segment_size=0, exclude_layer=["LayerNorm"])
    return model, opt


def state_dicts(model, opt) -> dict:
    msd = model.sharded_state_dict()
    return {**msd, **opt.sharded_state_dict(msd)}


def local_values(weight) -> np.ndarray:
    return np.array(weight.local_tensor.numpy())


def whole(entries: dict) -> dict:
    """{key: the whole tensor} from every rank's entries: flat ranges gathered in rank order (a collective)."""
    out = {}
    for key in sorted(entries):
        weight = entries[key]
        if not weight.is_flattened:
            out[key] = local_values(weight)
            continue
        parts = MPI.COMM_WORLD.allgather((weight.flattened_range.start, local_values(weight)))
        flat = np.concatenate([values for _, values in sorted(parts, key=lambda p: p[0])])
        out[key] = flat.reshape(weight.global_shape)
    return out


def same_bits(failures: list, what: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape or got.dtype != want.dtype or got.tobytes() != want.tobytes():
        failures.append(f"{what}: got {got!r}, expected {want!r} bit for bit")


def close(failures: list, what: str, got, want) -> None:
    if not np.allclose(got, want, rtol=RTOL, atol=0):
        failures.append(f"{what}: {got} != {want} (rtol {RTOL})")


def compare_loaded(failures: list, entries: dict, saved, what: str) -> None:
    """Every entry holds its part of the saved whole tensors exactly."""
    if sorted(entries) != sorted(saved.files):
        failures.append(f"{what}: keys {sorted(entries)} != saved {sorted(saved.files)}")
    for key, weight in entries.items():
        if key not in saved.files:
            continue
        want = saved[key]
        if weight.is_flattened:
            rng = weight.flattened_range
            want = want.reshape(-1)[rng.start:rng.stop]
        same_bits(failures, f"{what} {key}", local_values(weight), want)


# -- modes ----------------------------------------------------------------------------------------------------
def run_save(folder: str, failures: dict) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    model, opt = wrap_p_g_os(*build(seed=0))
    for _ in range(SAVE_AT):
        step(model, opt, rank, size)
    msd = model.sharded_state_dict()
    osd = opt.sharded_state_dict(msd)
    dist.save_state_dict(msd, os.path.join(folder, "p3", "model"))
    dist.save_state_dict(osd, os.path.join(folder, "p3", "opt"))
    saved = whole({**msd, **osd})
    if rank == 0:
        np.savez(os.path.join(folder, "p3.npz"), **saved)
    losses = [step(model, opt, rank, size) for _ in range(MORE)]
    if rank == 0:
        with open(os.path.join(folder, "p3.json"), "w") as f:
            json.dump(losses, f)

    def address(tensor):
        return array_of(tensor).__array_interface__["data"][0]

    by_start = {address(p): p for p in model.pieces()}
    flat = {k: w for k, w in {**msd, **osd}.items() if w.is_flattened}
    expect_flat = {f"{layer}.{name}{suffix}" for layer in ("fc1", "fc2", "fc3") for name in ("weight", "bias")
                   for suffix in ("", ".moment1_0", ".moment2_0")}
    if set(flat) != expect_flat:
        failures["flat_entries"].append(f"flattened entries {sorted(flat)} != {sorted(expect_flat)}")
    for key, w in flat.items():
        numel = int(np.prod(w.global_shape))
        length = -(-numel // size)
        start = min(rank * length, numel)
        if (w.flattened_range.start, w.flattened_range.stop) != (start, min(start + length, numel)) or \
                w.local_shape != w.global_shape or any(w.global_offset):
            failures["flat_entries"].append(f"{key}: {w!r}, expected the range [{start}, "
                                            f"{min(start + length, numel)}) of the whole box")
    if rank >= 2 and msd["fc3.bias"].flattened_range.start != msd["fc3.bias"].flattened_range.stop:
        failures["flat_entries"].append(f"fc3.bias on rank {rank} should be an empty range: {msd['fc3.bias']!r}")
    for key in ("fc1.weight", "fc2.weight", "fc3.bias"):
        piece = by_start.get(address(msd[key].local_tensor))
        if piece is None:
            failures["views_of_pieces"].append(f"{key}: its local tensor does not start where a piece does")
            continue
        moment = osd[f"{key}.moment1_0"].local_tensor
        if address(moment) != address(opt._state[id(piece)]["moment1"]) or \
                (moment.size and not np.shares_memory(array_of(moment), array_of(opt._state[id(piece)]["moment1"]))):
            failures["views_of_pieces"].append(f"{key}: moment1_0 is not a view of the piece's moment")
    for key in ("ln.weight", "ln.bias"):
        w = msd[key]
        if w.is_flattened or w.local_shape != (7,) or w.local_tensor is not model.ln.weight and key == "ln.weight":
            failures["kept_whole_replicated"].append(f"{key}: {w!r} should be the whole kept parameter")
        if osd[f"{key}.moment1_0"].is_flattened:
            failures["kept_whole_replicated"].append(f"{key}.moment1_0 should be replicated")


def run_single(folder: str, failures: dict) -> None:
    model, opt = build(seed=1)   # other weights: everything must come from the checkpoint
    msd = model.sharded_state_dict()
    osd = opt.sharded_state_dict(msd)
    dist.load_state_dict(msd, os.path.join(folder, "p3", "model"))
    dist.load_state_dict(osd, os.path.join(folder, "p3", "opt"))
    compare_loaded(failures["load_single"], {**msd, **osd}, np.load(os.path.join(folder, "p3.npz")), "one process")
    with open(os.path.join(folder, "p3.json")) as f:
        want = json.load(f)
    close(failures["resume_single"], "losses after loading", [step(model, opt, 0, 1) for _ in range(MORE)], want)
    dist.save_state_dict(msd, os.path.join(folder, "s1", "model"))
    dist.save_state_dict(osd, os.path.join(folder, "s1", "opt"))
    np.savez(os.path.join(folder, "s1.npz"), **whole({**msd, **osd}))
    with open(os.path.join(folder, "s1.json"), "w") as f:
        json.dump({"next_loss": step(model, opt, 0, 1), "weights": list(model.state_dict())}, f)


def run_load(folder: str, failures: dict) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    model, opt = wrap_p_g_os(*build(seed=2))
    for _ in range(1):   # a state to overwrite: steps taken, moments non-zero
        step(model, opt, rank, size)
    msd = model.sharded_state_dict()
    osd = opt.sharded_state_dict(msd)
    dist.load_state_dict(msd, os.path.join(folder, "s1", "model"))
    dist.load_state_dict(osd, os.path.join(folder, "s1", "opt"))
    saved = np.load(os.path.join(folder, "s1.npz"))
    compare_loaded(failures["load_p_g_os"], {**msd, **osd}, saved, f"p_g_os rank {rank}")
    full = model.state_dict()   # gathered from the pieces, as the recompute gathers them
    for key, value in full.items():
        same_bits(failures["gathered_weights"], f"gathered {key}", np.array(value.numpy()), saved[key])
    with open(os.path.join(folder, "s1.json")) as f:
        want = json.load(f)["next_loss"]
    close(failures["resume_p_g_os"], "the loss of one more step", [step(model, opt, rank, size)], [want])


def main(mode: str, folder: str, out: str) -> None:
    if mode != "single":
        dist.init_parallel_env()
    failures = {name: [] for name in CHECKS[mode]}
    try:
        {"save": run_save, "single": run_single, "load": run_load}[mode](folder, failures)
    except Exception:
        failures[CHECKS[mode][0]].append(traceback.format_exc())
    gathered = MPI.COMM_WORLD.gather(failures, root=0)
    if MPI.COMM_WORLD.rank == 0:
        merged = {name: [f"rank {r}: {f}" for r, report in enumerate(gathered) for f in report[name]]
                  for name in CHECKS[mode]}
        with open(out, "w") as f:
            json.dump({"size": MPI.COMM_WORLD.size, "failures": merged}, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
