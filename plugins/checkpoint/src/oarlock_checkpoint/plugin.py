"""Entry point of oarlock-checkpoint: registers the "pickle" (default) and "safetensors" formats
that oarlock.save / oarlock.load dispatch to by format name or file suffix."""

from oarlock import hookimpl
from oarlock.serialization import CheckpointFormat

from oarlock_checkpoint import pickle_format, safetensors

FORMATS = (
    CheckpointFormat("pickle", save=pickle_format.save, load=pickle_format.load, suffixes=pickle_format.SUFFIXES,
                     default=True, description="paddle.save's pickle of any nested object (state dicts, optimizer "
                                               "states, tensors), which Paddle 3.2 loads; loaded safely by default"),
    CheckpointFormat("safetensors", save=safetensors.save, load=safetensors.load, suffixes=safetensors.SUFFIXES,
                     description="flat dict of tensors in the safetensors layout; no code, safe to load"),
)


@hookimpl
def oarlock_register_checkpoint_formats(formats):
    for fmt in FORMATS:
        formats.register(fmt)


# Paddle 3.2's modules of FlexCheckpoint (paddle.distributed.flex_checkpoint.dcp.*), which model code imports
# from directly; "metadata" holds the classes its pickled checkpoint metadata names
_DCP = "oarlock.distributed.flex_checkpoint.dcp"
_DCP_MODULES = {
    "sharded_weight": ("ShardedWeight", "shard_weight", "build_sharded_state_dict", "make_replicated_sharded_weight"),
    "save_state_dict": ("save_state_dict",),
    "load_state_dict": ("load_state_dict", "load_merged_state_dict", "merge_sharded_state_dict"),
    "metadata": ("Metadata", "LocalTensorMetadata", "LocalTensorIndex"),
}


@hookimpl
def oarlock_register_api(api):
    from oarlock_checkpoint import flex
    from oarlock_checkpoint.flex import paddle_format
    for name in flex.__all__:
        api.export("oarlock.distributed", name, getattr(flex, name))
    for module, names in _DCP_MODULES.items():
        source = paddle_format if module == "metadata" else flex
        for name in names:
            api.export(f"{_DCP}.{module}", name, getattr(source, name))


@hookimpl
def oarlock_register_commands(cli):
    from oarlock_checkpoint.flex import command
    cli.add("checkpoint", command.HELP, command.configure, command.run)
