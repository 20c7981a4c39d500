"""PaddleFormers' Llama with tensor parallelism (mp_degree 2), run by each rank of `oarlock launch -n 2`:

    python -m oarlock.cli launch -n 2 pf_tp_job.py PADDLE_OUTDIR PADDLEFORMERS_DIR OUTDIR

With `paddle` aliased to oarlock, fleet.init builds the model-parallel group and PaddleFormers builds its
tensor-parallel layers (fleet's ColumnParallelLinear / RowParallelLinear / VocabParallelEmbedding, its
parallel lm head and cross entropy). Each rank loads its slice of the weights real Paddle initialised in one
process (pf_models.py's Llama), runs the same training-mode forward and backward, and saves its loss, logits and
gradients (its slices) to OUTDIR/rank<k>.npz; test_paddleformers_llms.py compares them with Paddle's slices."""

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
    config = pf_models._config("llama", "base", True)
    config.tensor_parallel_degree, config.tensor_parallel_rank = size, rank
    paddle.seed(1234)
    model = LlamaForCausalLM(config)
    full = np.load(os.path.join(paddle_dir, "weights_llama.npz"))
    model.set_state_dict({name: paddle.to_tensor(_slice(full[name], t.shape, rank, size))
                          for name, t in model.state_dict().items()})
    ids, labels, mask = pf_models._inputs()
    model.train()
    loss, logits = model(input_ids=paddle.to_tensor(ids), labels=paddle.to_tensor(labels),
                         attention_mask=paddle.to_tensor(mask), return_dict=False)[:2]
    loss.backward()
    result = {"loss": loss.numpy(), "logits": logits.numpy()}
    for name, p in model.named_parameters():
        if p.grad is not None:
            result["grad/" + name] = p.grad.numpy()
            result["distributed/" + name] = np.array(bool(p.is_distributed))
    np.savez(os.path.join(outdir, f"rank{rank}.npz"), **result)


if __name__ == "__main__":
    main(*sys.argv[1:4])
