"""FlexCheckpoint: sharded checkpoints that load under any parallel layout (Paddle 3.2's
paddle.distributed.save_state_dict / load_state_dict), exported into oarlock.distributed.

sharded.py   ShardedWeight and the helpers that build sharded state dicts
flat.py      flattened shards (is_flattened / flattened_range) cut into the n-d boxes they cover
state.py     state dicts flattened to keys, local boxes and plain values
team.py      the ranks of a save or load and the collectives it needs
datafile.py  per-rank data files (safetensors or pickle) with an XXH3-64 checksum per tensor
layout.py    what a checkpoint directory holds; metadata; completeness; Hugging Face directories
save.py      save_state_dict (sync and async), metadata written last
pending.py   the background thread of async saves, waited for by the next save/load and at exit
aoa_syntax.py, aoa.py   the AoA statement language and its slice algebra
plan.py      who reads which file, which pieces move where (the same on every rank)
load.py      load_state_dict: read, check, exchange, stage; all or nothing across the ranks
merge.py     merge_sharded_state_dict / load_merged_state_dict: whole tensors, Hugging Face layout
paddle_format.py  Paddle 3.2's own layout (pickled N.metadata, R_N.distcp): read, and written by format="paddle"
"""

from oarlock_checkpoint.flex.load import load_state_dict
from oarlock_checkpoint.flex.merge import load_merged_state_dict, merge_sharded_state_dict
from oarlock_checkpoint.flex.pending import wait_async_save
from oarlock_checkpoint.flex.save import save_state_dict
from oarlock_checkpoint.flex.sharded import (ShardedWeight, build_sharded_state_dict, make_replicated_sharded_weight,
                                             shard_full_weight, shard_weight)

__all__ = ["ShardedWeight", "shard_weight", "shard_full_weight", "make_replicated_sharded_weight",
           "build_sharded_state_dict", "save_state_dict", "load_state_dict", "merge_sharded_state_dict",
           "load_merged_state_dict", "wait_async_save"]
