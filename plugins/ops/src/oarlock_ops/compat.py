"""(being written) oarlock.compat: torch-style functions."""


def register_api(api):
    """Export this module's public names."""
