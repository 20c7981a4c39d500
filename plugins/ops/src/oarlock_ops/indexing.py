"""Placeholder: filled in by the indexing family."""


def register(ops):
    pass
