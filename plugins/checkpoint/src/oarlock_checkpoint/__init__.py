"""oarlock-checkpoint: the checkpoint formats behind oarlock.save / oarlock.load.

pickle_format.py  "pickle", the default: paddle.save/paddle.load semantics (.pdparams, .pdopt, .pdtensor, .pkl)
paddle_layout.py  what paddle.load does to the object of a file paddle.save wrote (names, tables, split params)
paddle_save.py    what paddle.save writes for an object (the default layout of "pickle": Paddle 3.2 reads it)
safetensors.py    "safetensors" (.safetensors), written and read directly; also save_file / load_file /
                  load_metadata for use without oarlock.save
flex/             FlexCheckpoint: sharded, re-shardable checkpoints (oarlock.distributed.save_state_dict, ...)
plugin.py         registers the formats (oarlock_register_checkpoint_formats) and exports FlexCheckpoint
                  into oarlock.distributed (oarlock_register_api)
"""

from oarlock_checkpoint import pickle_format, safetensors

__all__ = ["pickle_format", "safetensors"]
