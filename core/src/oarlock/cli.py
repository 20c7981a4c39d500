"""The `oarlock` command: `oarlock plugins` lists plugins; plugins add further subcommands.

For a device that derives from another (a CUDA-like chip whose backend names "gpu" as its parent),
`oarlock plugins` also prints its kernel reuse: how many of the ops it can run use its parent's or the
generic kernels, and how many it overrides with its own.

Subcommands registered through `oarlock_register_commands` (e.g. `oarlock
train`) appear in `oarlock --help` once their plugin is installed.
"""

from __future__ import annotations

import argparse
import json
import sys


def _plugins_command(args) -> int:
    from oarlock.plugins import default_manager
    rows = default_manager().info()
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=2))
        return 0
    if not rows:
        print("no oarlock plugins installed (pip install -e plugins/cpu -e plugins/ops)")
        return 0
    for row in rows:
        if row.distribution is None and row.error:
            print(f"{row.name}: FAILED TO LOAD: {row.error}")
            continue
        dist = f"{row.distribution} {row.version}" if row.distribution else "registered in code"
        print(f"{row.name}  ({dist})")
        print(f"    hooks:   {', '.join(row.hooks) or '-'}")
        print(f"    devices: {', '.join(_describe_device(name) for name in row.devices) or '-'}")
        print(f"    kernels: {row.kernels}")
        if row.comms:
            print(f"    comms:   {', '.join(_describe_comm(name) for name in row.comms)}")
        for strategy in row.strategies:
            print(f"    parallel strategy: {strategy}")
        for entry in row.reuse:
            print(f"    reuse:   {describe_reuse(entry)}")
            for problem in entry["problems"]:
                print(f"    WARNING: {entry['device']}: {problem}")
        if row.error:
            print(f"    ERROR:   {row.error}")
    return 0


def describe_reuse(entry: dict) -> str:
    """'metax_gpu: 201 of 205 kernels reused from gpu (98.0%), 4 overridden' (an entry of PluginInfo.reuse)."""
    total = entry["total"]
    rate = f"{100.0 * entry['reused'] / total:.1f}%" if total else "n/a"
    return (f"{entry['device']}: {entry['reused']} of {total} kernels reused from {entry['parent']} ({rate}), "
            f"{entry['overridden']} overridden")


def _describe_device(device_type: str) -> str:
    """ "gpu", or with the reason when its library or hardware is missing."""
    from oarlock.registry import default_registry
    usable, reason = default_registry().backends[device_type].available()
    return device_type if usable else f"{device_type} (unavailable: {reason})"


def _describe_comm(name: str) -> str:
    """ "mpi (cpu)", or with the reason when the library or device is missing."""
    from oarlock.registry import default_registry
    comm = default_registry().comms[name]
    usable, reason = comm.available() if hasattr(comm, "available") else (True, "")
    return f"{name} ({', '.join(comm.device_types)}" + ("" if usable else f"; unavailable: {reason}") + ")"


def build_parser() -> argparse.ArgumentParser:
    from oarlock.registry import default_registry
    parser = argparse.ArgumentParser(prog="oarlock", description="oarlock: a plugin-based deep-learning framework")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    plugins = sub.add_parser("plugins", help="list installed plugins: distribution, version, hooks, devices, "
                                             "kernel count, and how many kernels each derived device reuses")
    plugins.add_argument("--json", action="store_true", help="print the listing as JSON")
    plugins.set_defaults(run=_plugins_command)
    for name, (help_text, configure, run, _plugin) in sorted(default_registry().commands.items()):
        command = sub.add_parser(name, help=help_text, description=help_text)
        configure(command)
        command.set_defaults(run=run)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
