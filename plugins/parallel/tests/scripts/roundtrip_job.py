"""A FlexCheckpoint round trip across parallel layouts, with the optimizer state, run by each rank.

argv: mode checkpoint_dir out.json.

Mode "parallel" (4 ranks, under `oarlock launch`): hybrid_job's model trains 3 steps under fleet with
dp2 x mp2 (AdamW, global-norm clipping), then saves model.sharded_state_dict() and
optimizer.sharded_state_dict(...) with oarlock.distributed.save_state_dict into checkpoint_dir/model and
checkpoint_dir/opt; every rank's shards are gathered through raw mpi4py into the whole saved tensors
(checkpoint_dir/saved.npz), and the run goes on 2 more steps (the uninterrupted losses,
checkpoint_dir/uninterrupted.json). Then fresh, randomly initialised models and optimizers under mp4 and
under sharding 4 (stage 1: each rank holds the state of the parameters it owns) load the checkpoint in
place: every parameter, moment and step count they hold must equal its part of the saved tensors
exactly, and 2 more steps must give the uninterrupted losses (rtol 1e-5).

Mode "single" (one plain process, after the parallel job): the plain model and AdamW load the same
checkpoint, with the same checks.

{check: [failures]} goes to out.json (rank 0; results reach it through raw mpi4py).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
from _checks import run_one, write_report
from mpi4py import MPI

import hybrid_job as hj
import oarlock.distributed as dist
from oarlock.distributed import fleet

SAVE_AT, MORE = 3, 2
LOAD_LAYOUTS = {"mp4": {"dp_degree": 1, "mp_degree": 4}, "sharding4": {"dp_degree": 1, "sharding_degree": 4}}
CHECKS = {"parallel": ["save_dp2mp2"] + [f"{kind}_{name}" for name in LOAD_LAYOUTS for kind in ("load", "resume")],
          "single": ["load_single", "resume_single"]}


def box_of(weight) -> tuple:
    return tuple(slice(o, o + n) for o, n in zip(weight.global_offset, weight.local_shape))


def gather_whole(sharded: dict, failures: list) -> dict:
    """{key: whole tensor} assembled from every rank's shards (copies, taken now)."""
    mine = [(k, w.global_shape, w.global_offset, w.local_shape, np.array(w.local_tensor.numpy(), copy=True))
            for k, w in sharded.items()]
    whole, covered = {}, {}
    for items in MPI.COMM_WORLD.allgather(mine):
        for key, shape, offset, local_shape, array in items:
            box = tuple(slice(o, o + n) for o, n in zip(offset, local_shape))
            whole.setdefault(key, np.zeros(shape, array.dtype))[box] = array
            covered.setdefault(key, np.zeros(shape, bool))[box] = True
    holes = [k for k, c in covered.items() if not c.all()]
    if holes:
        failures.append(f"the saved shards leave parts of {holes} uncovered")
    return whole


def compare_loaded(sharded: dict, saved: dict, failures: list, what: str) -> None:
    """Each held shard equals its box of the saved tensor, bit for bit."""
    for key, weight in sharded.items():
        if key not in saved:
            failures.append(f"{what}: {key} was not saved")
            continue
        got, want = weight.local_tensor.numpy(), saved[key][box_of(weight)]
        if got.dtype != want.dtype or not np.array_equal(got, want):
            failures.append(f"{what}: {key} at {list(weight.global_offset)} differs from the saved values "
                            f"(max abs diff {np.abs(got.astype('float64') - want.astype('float64')).max():.3g})")


def check_steps(opt, failures: list, what: str) -> None:
    steps = {k: v for k, v in opt.state_dict().items() if k.endswith("_step")}
    if not steps or any(v != SAVE_AT for v in steps.values()):
        failures.append(f"{what}: the optimizer's step counts after the load are {steps}, want {SAVE_AT}")


def load_both(model, opt, folder: str):
    msd = model.sharded_state_dict()
    osd = opt.sharded_state_dict(msd)
    dist.load_state_dict(msd, os.path.join(folder, "model"))
    dist.load_state_dict(osd, os.path.join(folder, "opt"))
    return msd, osd


def run_checked(report: dict, name: str, fn) -> list:
    """Runs the check fn(failures) and records its failures under `name`."""
    report[name] = run_one(fn)
    return report[name]


def parallel(folder: str, report: dict) -> None:
    comm = MPI.COMM_WORLD
    batches = hj.batches(SAVE_AT + MORE)
    result = {}

    def save(failures):
        hcg = hj.init_fleet({"dp_degree": 2, "mp_degree": 2})
        model, opt = hj.build_parallel(hcg, perturb=False)
        losses = [hj.parallel_step(model, opt, hcg, ids, labels) for ids, labels in batches[:SAVE_AT]]
        hj.close(failures, "losses before the save (one process)", losses, hj.reference_run(SAVE_AT)["losses"])
        msd = model.sharded_state_dict()
        osd = opt.sharded_state_dict(msd)
        dist.save_state_dict(msd, os.path.join(folder, "model"))
        dist.save_state_dict(osd, os.path.join(folder, "opt"))
        result["saved"] = saved = gather_whole({**msd, **osd}, failures)
        losses += [hj.parallel_step(model, opt, hcg, ids, labels) for ids, labels in batches[SAVE_AT:]]
        result["uninterrupted"] = losses
        if comm.rank == 0:
            np.savez(os.path.join(folder, "saved.npz"), **saved)
            with open(os.path.join(folder, "uninterrupted.json"), "w") as f:
                json.dump(losses, f)

    if run_checked(report, "save_dp2mp2", save):
        for name in LOAD_LAYOUTS:
            report[f"load_{name}"] = report[f"resume_{name}"] = ["the save under dp2 x mp2 failed"]
        return
    for name, degrees in LOAD_LAYOUTS.items():
        loaded = {}

        def load(failures, degrees=degrees, name=name, loaded=loaded):
            hcg = hj.init_fleet(degrees)
            model = fleet.distributed_model(hj.Net(parallel=True))
            opt = fleet.distributed_optimizer(hj.make_optimizer(model))
            msd, osd = load_both(model, opt, folder)
            compare_loaded({**msd, **osd}, result["saved"], failures, name)
            held = set().union(*comm.allgather(set(msd) | set(osd)))
            if held != set(result["saved"]):
                failures.append(f"{name}: the ranks hold {sorted(held)}, the checkpoint {sorted(result['saved'])}")
            check_steps(opt, failures, name)
            loaded.update(model=model, opt=opt, hcg=hcg)

        def resume(failures, loaded=loaded):
            if not loaded:
                raise RuntimeError("the load failed")
            losses = [hj.parallel_step(loaded["model"], loaded["opt"], loaded["hcg"], ids, labels)
                      for ids, labels in batches[SAVE_AT:]]
            hj.close(failures, "losses after the load", losses, result["uninterrupted"][SAVE_AT:])

        run_checked(report, f"load_{name}", load)
        run_checked(report, f"resume_{name}", resume)


def single(folder: str, report: dict) -> None:
    import oarlock
    with np.load(os.path.join(folder, "saved.npz")) as archive:
        saved = dict(archive)
    with open(os.path.join(folder, "uninterrupted.json")) as f:
        uninterrupted = json.load(f)
    model = hj.Net(parallel=False)
    opt = hj.make_optimizer(model)

    def load(failures):
        msd, osd = load_both(model, opt, folder)
        compare_loaded({**msd, **osd}, saved, failures, "one process")
        if set(msd) | set(osd) != set(saved):
            failures.append(f"one process holds {sorted(set(msd) | set(osd))}, the checkpoint {sorted(saved)}")
        check_steps(opt, failures, "one process")

    def resume(failures):
        losses = []
        for ids, labels in hj.batches(SAVE_AT + MORE)[SAVE_AT:]:
            loss = model(oarlock.to_tensor(ids), oarlock.to_tensor(labels))
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        hj.close(failures, "losses after the load", losses, uninterrupted[SAVE_AT:])

    if not run_checked(report, "load_single", load):
        run_checked(report, "resume_single", resume)
    else:
        report["resume_single"] = ["the load failed"]


def main(mode: str, folder: str, out: str) -> None:
    report: dict = {}
    (parallel if mode == "parallel" else single)(folder, report)
    write_report(out, CHECKS[mode], report)


if __name__ == "__main__":
    main(*sys.argv[1:4])
