"""docs/api.md is generated from the registry (tools/api_docs.py): it must match what the installed
plugins register, so the page cannot drift from the code."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_api_page_matches_the_registry():
    pytest.importorskip("torch")      # the page's torch and Paddle columns come from the installed oracles
    pytest.importorskip("paddle")
    done = subprocess.run([sys.executable, "-W", "ignore", str(ROOT / "tools" / "api_docs.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_api_page_lists_every_public_name():
    import oarlock  # noqa: F401
    from oarlock.registry import default_registry
    page = (ROOT / "docs" / "api.md").read_text()
    missing = [f"{namespace}.{name}" for namespace, names in default_registry().public_api().items() for name in names
               if f"`{namespace}.{name}`" not in page]
    assert not missing, f"docs/api.md lacks {missing[:10]} (run python tools/api_docs.py)"


def test_paddle_coverage_counts_names_at_the_same_path():
    pytest.importorskip("paddle")
    sys.path.insert(0, str(ROOT / "tools"))
    import api_docs
    rows = {path: (names, missing) for path, names, missing in api_docs.coverage()}
    names, missing = rows["paddle.static"]
    assert "InputSpec" in names and "InputSpec" not in missing and "Executor" in missing   # no static graph
    names, missing = rows["paddle.Tensor"]
    assert "reshape_" not in missing and "mT" not in missing and "numel" not in missing
    assert set(missing) <= set(names)
    table = api_docs.coverage_table(api_docs.coverage())
    total = sum(len(n) for n, _ in rows.values())
    assert table[-1].startswith(f"| **all** | {total} | {total - sum(len(m) for _, m in rows.values())} |")
