"""Obtain PaddleFormers for the LLM tests, without its heavy optional dependencies.

PaddleFormers 0.4.0 is the newest release whose Llama / Qwen2 / Qwen3 modeling code runs on Paddle 3.2 (1.x
imports `paddle.nn.functional.swiglu`, which arrived in Paddle 3.3). Its install requirements pull in
datasets, transformers, modelscope, scikit-learn, visualdl, tiktoken, triton, ... which the modeling code
never imports, so the package is installed with `pip install --no-deps --target <cache>` together with the few
light packages its import path really uses (colorlog, tqdm, omegaconf + antlr4, huggingface_hub < 1.0, and
requests / PyYAML / filelock and friends when the environment lacks them).

One module is stubbed, and only because it is a hard import of a download helper the tests never call:
`aistudio_sdk.file_download.model_file_download` (downloads weights from Baidu AI Studio; the real package
drags in psutil, prettytable and more). The stub raises if it is ever called.

The cache directory is $OARLOCK_TEST_CACHE (default ~/.cache/oarlock-tests); a second run reuses it. When pip
cannot obtain the packages (no network, no index) `obtain()` returns None and the caller skips with the reason.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

PADDLEFORMERS = "paddleformers==0.4.0"
ALWAYS = ["colorlog", "tqdm", "omegaconf==2.3.0", "antlr4-python3-runtime==4.9.3", "huggingface_hub<1.0"]
# (distribution, module) installed only when the environment lacks the module
IF_MISSING = [("requests", "requests"), ("urllib3", "urllib3"), ("idna", "idna"), ("certifi", "certifi"),
              ("charset_normalizer", "charset_normalizer"), ("PyYAML", "yaml"), ("filelock", "filelock"),
              ("fsspec", "fsspec"), ("packaging", "packaging"), ("typing_extensions", "typing_extensions"),
              ("ml_dtypes", "ml_dtypes"), ("safetensors", "safetensors")]

STUB_INIT = '"""Stub of aistudio_sdk for the oarlock PaddleFormers tests (see tests/paddleformers/pf_install.py)."""\n'
STUB_DOWNLOAD = '''"""Stub: the tests build models from configs and never download from AI Studio."""


def model_file_download(*args, **kwargs):
    raise RuntimeError("aistudio_sdk is stubbed in the oarlock PaddleFormers tests: downloads are not available")
'''


def _requirements() -> list[str]:
    return [PADDLEFORMERS] + ALWAYS + [dist for dist, module in IF_MISSING if importlib.util.find_spec(module) is None]


def cache_root() -> str:
    return os.environ.get("OARLOCK_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "oarlock-tests")


def _write_stubs(target: str) -> None:
    package = os.path.join(target, "aistudio_sdk")
    os.makedirs(package, exist_ok=True)
    with open(os.path.join(package, "__init__.py"), "w") as f:
        f.write(STUB_INIT)
    with open(os.path.join(package, "file_download.py"), "w") as f:
        f.write(STUB_DOWNLOAD)


def obtain() -> tuple[str | None, str]:
    """(directory to put on sys.path, "") when PaddleFormers is available, else (None, why not)."""
    requirements = _requirements()
    key = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    target = os.path.join(cache_root(), f"paddleformers-0.4.0-{key}")
    if os.path.isdir(os.path.join(target, "paddleformers")):
        return target, ""
    os.makedirs(cache_root(), exist_ok=True)
    staging = tempfile.mkdtemp(prefix="paddleformers-", dir=cache_root())
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
           "--target", staging] + requirements
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        return None, f"pip could not run: {exc}"
    if proc.returncode != 0 or not os.path.isdir(os.path.join(staging, "paddleformers")):
        shutil.rmtree(staging, ignore_errors=True)
        return None, f"pip install {' '.join(requirements)} failed: {(proc.stderr or proc.stdout)[-500:]}"
    _write_stubs(staging)
    try:
        os.rename(staging, target)   # atomic: a concurrent run either wins or finds it there
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return target, ""
