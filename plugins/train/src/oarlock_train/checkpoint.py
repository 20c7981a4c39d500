"""Checkpoints of `oarlock train` in the output directory.

    model.safetensors   the model's state_dict (oarlock.save, safetensors format by suffix)
    optimizer.pdopt     the optimizer's state_dict plus the LR scheduler's under "LR_Scheduler", as Paddle does
                        (a pickle: `load` reads it with weights_only=True, so a planted file that names
                        code to run is refused with an UnpicklingError instead of running it)
    trainer.json        the step, the options, the loss history (with experts, the aux loss of every step
                        too) and oarlock's random-generator state

Each file is written under a temporary name and renamed, and trainer.json
goes last: it names the step the other two belong to, so an interrupted save
leaves the previous checkpoint readable rather than a mix of two steps.
"""

from __future__ import annotations

import dataclasses
import json
import os

import oarlock
from oarlock_train.moe_model import DEFAULT_AUX_WEIGHT
from oarlock_train.trainer import History, TrainConfig, Trainer

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pdopt"
STATE_FILE = "trainer.json"
SCHEDULER_KEY = "LR_Scheduler"


def _replace_into(out_dir, name, write):
    """write(tmp_path) then rename to name; the temporary name keeps the suffix that picks the format."""
    stem, ext = os.path.splitext(name)
    tmp = os.path.join(out_dir, f"{stem}.tmp{ext}")
    write(tmp)
    os.replace(tmp, os.path.join(out_dir, name))


def _write_json(obj):
    def write(path):
        with open(path, "w") as fh:
            json.dump(obj, fh, indent=1)
    return write


def save(trainer: Trainer, out_dir) -> None:
    """Write the checkpoint of the full model. With several ranks every rank calls it (the full state is
    gathered from their slices) and the main rank writes."""
    model_state, optimizer_state = trainer.full_state()
    if not trainer.is_main:
        return
    os.makedirs(out_dir, exist_ok=True)
    optimizer_state = dict(optimizer_state)
    optimizer_state[SCHEDULER_KEY] = trainer.scheduler.state_dict()
    state = {
        "step": trainer.step,
        "config": dataclasses.asdict(trainer.cfg),
        "rng_state": oarlock.get_rng_state(),
        "history": {"train": trainer.history.train, "valid": trainer.history.valid, "aux": trainer.history.aux},
    }
    _replace_into(out_dir, MODEL_FILE, lambda p: oarlock.save(model_state, p))
    _replace_into(out_dir, OPTIMIZER_FILE, lambda p: oarlock.save(optimizer_state, p))
    _replace_into(out_dir, STATE_FILE, _write_json(state))


def read_state(out_dir) -> dict:
    path = os.path.join(out_dir, STATE_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"--resume: no checkpoint in {os.fspath(out_dir)!r} (expected {STATE_FILE}, "
                                f"{MODEL_FILE} and {OPTIMIZER_FILE}, written by an earlier `oarlock train` "
                                f"with the same --out)")
    with open(path) as fh:
        return json.load(fh)


# Options added after checkpoints were first written, with the value the older runs had.
LEGACY_CONFIG = {"document_mask": False, "moe_experts": 0, "moe_top_k": 2, "moe_aux_weight": DEFAULT_AUX_WEIGHT,
                 "moe_expert_hidden": None, "fp8": None}


def config_mismatches(saved: dict, cfg: TrainConfig) -> list[str]:
    """'--option: checkpoint X, now Y' for every option whose value differs from the checkpoint's."""
    current = dataclasses.asdict(cfg)
    saved = {**LEGACY_CONFIG, **saved}
    out = []
    for key, value in current.items():
        if saved.get(key) == value:
            continue
        if key == "document_mask":  # the option is the negation: --no-document-mask
            out.append(f"--no-document-mask: checkpoint {not saved.get(key)!r}, now {not value!r}")
        else:
            out.append(f"--{key.replace('_', '-')}: checkpoint {saved.get(key)!r}, now {value!r}")
    return out


def load(trainer: Trainer, out_dir, state: dict | None = None) -> None:
    """Restore model, optimizer, scheduler, step, history and RNG state from out_dir into trainer (each
    rank of a parallel run takes its slices of the full weights, whatever layout wrote them)."""
    state = state or read_state(out_dir)
    model_state = oarlock.load(os.path.join(out_dir, MODEL_FILE))
    optimizer_state = dict(oarlock.load(os.path.join(out_dir, OPTIMIZER_FILE), weights_only=True))
    scheduler_state = optimizer_state.pop(SCHEDULER_KEY, None)
    trainer.load_full_state(model_state, optimizer_state)
    if scheduler_state is not None:
        trainer.scheduler.set_state_dict(scheduler_state)
    trainer.step = int(state["step"])
    trainer.history = History(train=list(state["history"]["train"]),
                              valid=[tuple(p) for p in state["history"]["valid"]],
                              aux=list(state["history"].get("aux", [])))
    oarlock.set_rng_state(state["rng_state"])
