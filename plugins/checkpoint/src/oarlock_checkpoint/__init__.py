"""oarlock-checkpoint: the checkpoint formats behind oarlock.save / oarlock.load.

pickle_format.py  "pickle", the default: paddle.save/paddle.load semantics (.pdparams, .pdopt, .pdtensor, .pkl)
safetensors.py    "safetensors" (.safetensors), written and read directly; also save_file / load_file /
                  load_metadata for use without oarlock.save
plugin.py         registers both through the oarlock_register_checkpoint_formats hook
"""

from oarlock_checkpoint import pickle_format, safetensors

__all__ = ["pickle_format", "safetensors"]
