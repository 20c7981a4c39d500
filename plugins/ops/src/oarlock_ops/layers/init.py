"""(being written) oarlock.nn.init."""

EXPORTS: dict = {}
