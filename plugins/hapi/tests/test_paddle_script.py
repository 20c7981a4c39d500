"""A training script written for Paddle (hapi style: paddle.Model, paddle.metric, paddle.callbacks,
paddle.io.Dataset, paddle.optimizer.lr), run unedited with `paddle` aliased to oarlock, gives what the same
script gives on real Paddle 3.2."""

from __future__ import annotations

import contextlib
import io
import textwrap

import numpy as np
import paddle  # the real Paddle, the oracle: imported before the alias is switched on

import oarlock
from oarlock.compat import paddle_alias

SCRIPT = textwrap.dedent("""
    import numpy as np
    import paddle
    from paddle.io import Dataset
    from paddle.metric import Accuracy

    class Data(Dataset):
        def __init__(self, n, seed):
            rng = np.random.RandomState(seed)
            self.x = rng.rand(n, 6).astype("float32")
            self.y = (self.x.sum(axis=1, keepdims=True) > 3).astype("int64")

        def __getitem__(self, i):
            return self.x[i], self.y[i]

        def __len__(self):
            return len(self.x)

    def main(initial):
        net = paddle.nn.Sequential(paddle.nn.Linear(6, 16), paddle.nn.ReLU(), paddle.nn.Linear(16, 2))
        net.set_state_dict({k: paddle.to_tensor(v) for k, v in initial.items()})
        scheduler = paddle.optimizer.lr.CosineAnnealingDecay(learning_rate=0.05, T_max=4)
        model = paddle.Model(net)
        model.prepare(paddle.optimizer.Adam(learning_rate=scheduler, parameters=model.parameters()),
                      paddle.nn.CrossEntropyLoss(), Accuracy())
        model.fit(Data(64, 0), Data(32, 1), batch_size=16, epochs=3, shuffle=False, verbose=0,
                  callbacks=[paddle.callbacks.LRScheduler(by_step=False, by_epoch=True),
                             paddle.callbacks.EarlyStopping(monitor="acc", patience=5)])
        result = model.evaluate(Data(32, 1), batch_size=8, verbose=0)
        return result, scheduler.last_lr, model.predict(Data(8, 2), batch_size=4, stack_outputs=True, verbose=0)
""")


def _run(initial):
    namespace = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(SCRIPT, "paddle_hapi_script.py", "exec"), namespace)
        return namespace["main"](initial)


def test_script_runs_unedited_and_agrees_with_paddle():
    paddle.seed(9)
    initial = {k: v.numpy() for k, v in paddle.nn.Sequential(paddle.nn.Linear(6, 16), paddle.nn.ReLU(),
                                                              paddle.nn.Linear(16, 2)).state_dict().items()}
    reference = _run(initial)
    with paddle_alias():
        import paddle as aliased
        assert aliased is oarlock
        ours = _run(initial)
    assert list(ours[0]) == list(reference[0]) == ["loss", "acc"]
    np.testing.assert_allclose(ours[0]["loss"], reference[0]["loss"], rtol=1e-5)
    assert ours[0]["acc"] == reference[0]["acc"]
    assert ours[1] == reference[1]
    np.testing.assert_allclose(ours[2][0], reference[2][0], rtol=1e-5, atol=1e-6)
