"""The op test table: one module per op family, each exporting SPECS, a list of OpSpec.

Every op a plugin registers must appear here (tests/test_op_table.py fails
otherwise). Each spec says how to make inputs, the float64 numpy reference,
which dtypes the op accepts, and whether it is differentiable.
"""

from op_specs.base import ALL, ALL_REAL, FLOATS, INTS, Case, In, OpSpec  # noqa: F401


def all_specs():
    import importlib
    import pkgutil
    import op_specs
    specs = {}
    for info in pkgutil.iter_modules(op_specs.__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"op_specs.{info.name}")
        for spec in module.SPECS:
            if spec.op in specs:
                raise ValueError(f"op {spec.op!r} has two specs (op_specs.{info.name} and another module)")
            specs[spec.op] = spec
    return specs
