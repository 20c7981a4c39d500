"""(being written) ops of this family."""


def register(ops):
    """Register this family's ops."""
