"""Entry point of oarlock-xccl: the "mpi" and "nccl" communication backends, the
oarlock.distributed API and the `oarlock launch` command.

Nothing heavy is imported here: mpi4py loads when a process group is first
made, cupy when a GPU tensor is first communicated.
"""

from oarlock import hookimpl


@hookimpl
def oarlock_register_comm_backends(comms):
    from oarlock_xccl.mpi import MPIBackend
    from oarlock_xccl.nccl import NCCLBackend
    comms.register(MPIBackend())
    comms.register(NCCLBackend())


@hookimpl
def oarlock_register_api(api):
    from oarlock_xccl import api as public
    for name in public.__all__:
        api.export("oarlock.distributed", name, getattr(public, name))


@hookimpl
def oarlock_register_commands(cli):
    from oarlock_xccl import launch
    cli.add("launch", launch.HELP, launch.configure, launch.run)
