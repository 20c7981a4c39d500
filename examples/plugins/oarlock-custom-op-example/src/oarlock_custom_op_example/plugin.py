"""Entry point of oarlock-custom-op-example (see pyproject.toml): registers the ops of the library setup.py
compiled into this package (_ops.so). After `pip install`, oarlock.fused_bias_relu and
oarlock.ops.custom_op_example.fused_bias_relu exist and `oarlock plugins` lists this plugin."""

from __future__ import annotations

from pathlib import Path

from oarlock import hookimpl
from oarlock_cpp_extension import register_library

LIBRARY = Path(__file__).resolve().with_name("_ops.so")


@hookimpl
def oarlock_register_ops(ops):
    register_library(ops, LIBRARY)
