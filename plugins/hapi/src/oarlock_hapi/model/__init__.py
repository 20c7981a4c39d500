"""oarlock.Model and its parts: data handling, batch steps, AMP settings, checkpoint files."""

from oarlock_hapi.model.model import Model

__all__ = ["Model"]
