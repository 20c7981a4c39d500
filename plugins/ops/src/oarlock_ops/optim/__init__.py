"""Optimizers, gradient clipping and learning-rate schedulers (placeholder until filled in)."""


def register_api(api):
    pass
