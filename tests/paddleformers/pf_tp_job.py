"""PaddleFormers' Llama with tensor parallelism (mp_degree 2), without and with sequence parallelism, run by
each rank of `oarlock launch -n 2`:

    python -m oarlock.cli launch -n 2 pf_tp_job.py PADDLE_OUTDIR PADDLEFORMERS_DIR OUTDIR

With `paddle` aliased to oarlock, fleet.init builds the model-parallel group and PaddleFormers builds its
tensor-parallel layers (fleet's ColumnParallelLinear / RowParallelLinear / VocabParallelEmbedding, its
parallel lm head and cross entropy). Each rank loads its slice of the weights real Paddle initialised in one
process (pf_models.py's Llama), runs the same training-mode forward and backward, and saves its loss, logits and
gradients (its slices) to OUTDIR/rank<k>.npz (rank<k>_sp.npz with sequence parallelism: PaddleFormers' sequence
parallel linears, fleet's ScatterOp / GatherOp, and the allreduce hooks its Trainer registers for the replicated
norms); test_paddleformers_llms.py compares them with Paddle's slices."""

from __future__ import annotations

import os
import sys

import numpy as np


def _slice(full, local_shape, rank, size):
    """This rank's slice of `full`: split along the one axis whose size differs from the local shape."""
    if list(full.shape) == list(local_shape):
        return full
    axis = next(i for i, (a, b) in enumerate(zip(full.shape, local_shape)) if a != b)
    return np.split(full, size, axis=axis)[rank]


def main(paddle_dir, pf_dir, outdir):
    import oarlock.compat
    oarlock.compat.enable_paddle_alias()
    sys.path.insert(0, pf_dir)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import paddle
    from paddle.distributed import fleet
    import pf_models
    from paddleformers.transformers import LlamaForCausalLM

    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 2, "pp_degree": 1}
    fleet.init(is_collective=True, strategy=strategy)
    hcg = fleet.get_hybrid_communicate_group()
    rank, size = hcg.get_model_parallel_rank(), hcg.get_model_parallel_world_size()
    for sequence_parallel in (False, True):
        run(paddle, pf_models, LlamaForCausalLM, paddle_dir, outdir, rank, size, sequence_parallel)


def run(paddle, pf_models, model_class, paddle_dir, outdir, rank, size, sequence_parallel):
    config = pf_models._config("llama", "base", True)
    config.tensor_parallel_degree, config.tensor_parallel_rank = size, rank
    config.sequence_parallel = sequence_parallel
    config.seq_length = pf_models.SEQ      # sequence parallelism reshapes with the configured length
    paddle.seed(1234)
    model = model_class(config)
    full = np.load(os.path.join(paddle_dir, "weights_llama.npz"))
    model.set_state_dict({name: paddle.to_tensor(_slice(full[name], t.shape, rank, size))
                          for name, t in model.state_dict().items()})
    if sequence_parallel:   # what PaddleFormers' Trainer does: sum the replicated norms' gradients over mp
        from paddle.distributed.fleet.utils.sequence_parallel_utils import register_sequence_parallel_allreduce_hooks
        register_sequence_parallel_allreduce_hooks(model, 1, False)
    ids, labels, mask = pf_models._inputs()
    model.train()
    loss, logits = model(input_ids=paddle.to_tensor(ids), labels=paddle.to_tensor(labels),
                         attention_mask=paddle.to_tensor(mask), return_dict=False)[:2]
    loss.backward()
    sp_layers = sum(type(m).__name__ in ("ColumnSequenceParallelLinear", "RowSequenceParallelLinear")
                    for m in model.sublayers())
    result = {"loss": loss.numpy(), "logits": logits.numpy(), "sequence_parallel_layers": np.array(sp_layers)}
    for name, p in model.named_parameters():
        if p.grad is not None:
            result["grad/" + name] = p.grad.numpy()
            result["distributed/" + name] = np.array(bool(p.is_distributed))
    np.savez(os.path.join(outdir, f"rank{rank}{'_sp' if sequence_parallel else ''}.npz"), **result)


if __name__ == "__main__":
    main(*sys.argv[1:4])
