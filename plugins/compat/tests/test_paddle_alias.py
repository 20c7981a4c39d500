"""The paddle alias: `import paddle...` gives oarlock's modules while it is on, the real Paddle after."""

import importlib
import sys
import textwrap

import pytest

import oarlock
from oarlock.compat import disable_paddle_alias, enable_paddle_alias, paddle_alias, paddle_alias_enabled


def test_submodules_are_the_oarlock_modules():
    with paddle_alias():
        import paddle
        import paddle.nn.functional as F
        from paddle.distributed import fleet
        assert paddle is oarlock
        assert F is importlib.import_module("oarlock.nn.functional")
        assert fleet is importlib.import_module("oarlock.distributed.fleet")
        assert paddle.nn.Linear is oarlock.nn.Linear
    assert not paddle_alias_enabled()
    assert "paddle.nn.functional" not in sys.modules or sys.modules["paddle.nn.functional"] is not F


def test_unmodified_source_runs(tmp_path, monkeypatch):
    (tmp_path / "paddle_user_code.py").write_text(textwrap.dedent("""
        import paddle
        import paddle.nn as nn
        import paddle.nn.functional as F

        class Net(nn.Layer):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 2)

            def forward(self, x):
                return F.relu(self.fc(x))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    with paddle_alias():
        module = importlib.import_module("paddle_user_code")
        out = module.Net()(oarlock.ones([4, 3]))
    assert isinstance(out, oarlock.Tensor) and out.shape == [4, 2]
    sys.modules.pop("paddle_user_code", None)


def test_missing_module_names_both_names():
    with paddle_alias(), pytest.raises(ModuleNotFoundError, match=r"'paddle\.no_such_part'.*'oarlock\.no_such_part'"):
        importlib.import_module("paddle.no_such_part")


def test_real_paddle_comes_back():
    real = pytest.importorskip("paddle")
    assert real is not oarlock
    enable_paddle_alias()
    enable_paddle_alias()  # twice is harmless
    try:
        import paddle
        assert paddle is oarlock
    finally:
        disable_paddle_alias()
    import paddle
    assert paddle is real
