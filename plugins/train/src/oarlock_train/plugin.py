"""Entry point of oarlock-train: registers the `oarlock train` subcommand."""

from oarlock import hookimpl

from oarlock_train import command


@hookimpl
def oarlock_register_commands(cli):
    cli.add("train", command.HELP, command.configure, command.run)
