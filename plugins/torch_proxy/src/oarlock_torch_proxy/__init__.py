"""oarlock-torch-proxy: run libraries written for PyTorch on oarlock, unchanged.

`oarlock.compat.enable_torch_proxy(scope={"einops", "x_transformers"})` (or `with oarlock.compat.torch_proxy(
scope=...):`) makes `import torch` inside those libraries give a torch-shaped façade over oarlock; outside the
scope a real torch, if installed, stays the real one in the same process.

Layout:
- hook.py: the import hook. A meta-path finder wraps the loader of every module in the scope so the module
  runs with a private `__builtins__` whose `__import__` maps `torch[.X]` to the façade modules, which live
  under their own names (oarlock_torch_proxy.facade[.X]); see its docstring for why this keeps both torches.
- facade/: the `torch` façade package (torch, torch.nn, .nn.functional, .nn.init, .autograd, .optim,
  .utils.data, .cuda, .amp, .linalg, ...).
- tensor_methods.py: the one tensor type. Façade tensors are oarlock Tensors; torch's methods are put on
  oarlock.Tensor, and the few whose meaning clashes with Paddle's (`x.max(1)`, `x.split(2)`) are resolved by
  who calls (code imported under the proxy gets torch's meaning).
- missing.py: a torch name the façade lacks raises NotImplementedError naming it and the caller's file:line.
"""
