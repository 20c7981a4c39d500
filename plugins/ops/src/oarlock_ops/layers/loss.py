"""Placeholder: loss layers (filled in by their owner). EXPORTS maps a namespace to the classes to export."""

EXPORTS: dict = {}
