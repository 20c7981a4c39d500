"""The hook specifications plugins implement.

Registration hooks receive a registrar and call it; they return nothing. The
plugin manager calls each plugin's implementation with a registrar bound to
that plugin, so every registration is attributed to the plugin that made it
(duplicate errors name both plugins; `oarlock plugins` counts kernels).
"""

import pluggy

hookspec = pluggy.HookspecMarker("oarlock")
hookimpl = pluggy.HookimplMarker("oarlock")


@hookspec
def oarlock_register_backends(backends):
    """Add device types.

    Call ``backends.register(backend)`` with an :class:`oarlock.device.Backend`
    instance: its ``type`` is the device type name ("cpu", "gpu", "npu"), its
    ``parent`` the device type whose kernels it may reuse (a CUDA-like device
    names "gpu"), and it provides the array module, host copies, random
    generators and memory statistics.
    """


@hookspec
def oarlock_register_ops(ops):
    """Add operators, their autograd rules and their kernels.

    ``ops.define(signature, ...)`` adds an :class:`oarlock.dispatch.OpDef` and
    returns the op's callable (also ``oarlock.ops.<plugin>.<op name>``);
    ``ops.kernel(name, device=None, dtypes=None)`` decorates a kernel
    ``fn(xp, *arrays, **attrs)``. ``device=None`` registers the generic
    array-API kernel used when no device-specific kernel exists.
    """


@hookspec
def oarlock_register_api(api):
    """Export Python objects into public namespaces.

    ``api.export("oarlock.nn.functional", "relu6", fn)`` makes
    ``oarlock.nn.functional.relu6`` resolve to ``fn``. The namespace is
    "Tensor" (methods; a property object makes a property) or any dotted
    namespace under "oarlock": exporting into one creates it, so
    ``import oarlock.incubate.nn.functional`` works once a plugin exports
    there. ``api.namespace("oarlock.incubate", doc="...")`` declares a
    namespace with a docstring. Names are public: none starts with "_"
    (internal ops are ``ops.define(..., internal=True)``).
    """


@hookspec
def oarlock_register_comm_backends(comms):
    """Add collective-communication libraries (MPI, NCCL, a vendor's XCCL).

    ``comms.register(backend)``: ``backend.name`` ("mpi", "nccl") names it,
    ``backend.device_types`` lists the device types whose arrays it moves
    ("cpu"; "gpu", which CUDA-like devices inherit through their parent).
    Its methods follow NCCL's shape: unique-id creation, communicator init by
    (nranks, unique id, rank) and destroy, all_reduce, broadcast, reduce,
    all_gather, reduce_scatter, optional all_to_all, send, recv, and
    group_start/group_end; ``oarlock_xccl.CommBackend`` documents each one.
    ``oarlock.distributed`` picks the backend from a tensor's device.
    """


@hookspec
def oarlock_register_parallel_strategies(strategies):
    """Add parallel strategies (data, tensor, pipeline, sharding, sep, a vendor's own).

    ``strategies.register(strategy)``: ``strategy.name`` names it ("data"), ``strategy.description``
    says what it does in one line, ``strategy.degree_key`` is its degree in
    ``DistributedStrategy.hybrid_configs`` ("dp_degree") and ``strategy.order_key`` its name in
    ``hybrid_configs["order"]`` ("dp"). Fleet resolves the degrees a program asks for to strategies
    through this table; ``oarlock_parallel.ParallelStrategy`` documents the rest (the topology axis,
    the default degree, and how a strategy wraps a model and an optimizer).
    """


@hookspec
def oarlock_register_checkpoint_formats(formats):
    """Add save/load formats for `oarlock.save` and `oarlock.load`.

    ``formats.register(fmt)`` with an :class:`oarlock.serialization.CheckpointFormat`:
    its ``name``, the file ``suffixes`` it claims (".safetensors"), and
    ``save(obj, path, **options)`` / ``load(path, **options)``. A format with
    ``default=True`` handles paths no suffix claims.
    """


@hookspec
def oarlock_register_commands(cli):
    """Add subcommands to the ``oarlock`` command.

    ``cli.add(name, help, configure, run)``: ``configure(parser)`` adds the
    arguments to an argparse parser, ``run(args)`` runs the command and
    returns its exit status.
    """
