"""oarlock-train: the `oarlock train` command, a byte-level GPT trained on the standard library's docstrings.

Modules: corpus (data), model (the GPT), trainer (the loop), checkpoint (save and
resume), generate (sampling), progress (the progress bar), plotting (the loss
PNG), command (the options) and plugin (the entry point that registers the command).
"""
