"""A module of the plugin that uses another plugin's names at its top (oarlock.nn.Layer). Loaded through the
entry point, oarlock.nn.Layer is registered already ("nn" loads before "nsdemo"). Imported on its own before
anything loaded the plugins, it starts the load; this plugin's own entry point then waits until the import
is done (its package is half imported), the others register, and oarlock.nn.Layer resolves."""

import oarlock.nn as nn


class Scale(nn.Layer):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor
