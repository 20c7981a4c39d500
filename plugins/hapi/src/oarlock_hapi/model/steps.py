"""One step of each kind on a batch, eagerly (Paddle's DynamicGraphAdapter, one process): forward, loss,
backward and optimizer update for training (with AMP when prepared with amp_configs), forward, loss and
metrics for evaluation, forward only for prediction. Results come back as numpy arrays, as Paddle returns them."""

from __future__ import annotations

import oarlock
import oarlock.amp
from oarlock_hapi.model.data import as_tensor, to_list, to_numpy


def input_info(inputs):
    """(shapes, dtypes) of a step's numpy/Tensor inputs, the input signature Model records; None otherwise."""
    shapes, dtypes = [], []
    for x in inputs:
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            return None
        shapes.append(list(x.shape))
        dtypes.append(x.dtype)
    return shapes, dtypes


class EagerSteps:
    """The batch steps of one Model; holds the AMP level and settings prepare() chose."""

    def __init__(self, model):
        self.model = model
        self.input_info = None
        self.amp_level = "O0"
        self.amp_configs = {}
        self.amp_custom_lists = {}
        self.merge_count = {}   # Paddle's multi-rank evaluation bookkeeping: always empty on one process

    def _inputs(self, inputs):
        inputs = [as_tensor(x) for x in to_list(inputs)]
        self.input_info = input_info(inputs)
        return inputs

    def _update_metrics(self, outputs, labels):
        results = []
        for metric in self.model._metrics:
            computed = metric.compute(*(to_list(outputs) + labels))
            results.append(metric.update(*[to_numpy(m) for m in to_list(computed)]))
        return results

    def _losses(self, owner, outputs, labels):
        if self.model._loss is None:
            raise RuntimeError(f"{owner}: the model has no loss; pass loss= to Model.prepare()")
        return to_list(self.model._loss(*(to_list(outputs) + labels)))

    def train_batch(self, inputs, labels=None, update=True):
        model = self.model
        if not model._optimizer:
            raise RuntimeError("Model.train_batch(): model not ready, please call `model.prepare()` first "
                               "with an optimizer")
        model.network.train()
        model.mode = "train"
        inputs = self._inputs(inputs)
        labels = [as_tensor(label) for label in to_list(labels)]
        amp = self.amp_level != "O0"
        if amp and model._scaler is None:   # created once, on the first step
            model._scaler = oarlock.amp.GradScaler(**self.amp_configs)
        with oarlock.amp.auto_cast(enable=amp, level=self.amp_level, **self.amp_custom_lists):
            outputs = model.network(*inputs)
        losses = self._losses("Model.train_batch()", outputs, labels)
        final_loss = losses[0]
        for loss in losses[1:]:
            final_loss = final_loss + loss
        if amp:
            scaled = model._scaler.scale(final_loss)
            scaled.backward()
            if update:
                model._scaler.minimize(model._optimizer, scaled)
                model.network.clear_gradients()
        else:
            final_loss.backward()
            if update:
                model._optimizer.minimize(final_loss)
                model.network.clear_gradients()
        metrics = self._update_metrics(outputs, labels)
        losses = [to_numpy(loss) for loss in losses]
        return (losses, metrics) if metrics else losses

    def eval_batch(self, inputs, labels=None):
        model = self.model
        model.network.eval()
        model.mode = "eval"
        inputs = self._inputs(inputs)
        labels = [as_tensor(label) for label in to_list(labels)]
        with oarlock.no_grad():
            outputs = model.network(*inputs)
            losses = self._losses("Model.eval_batch()", outputs, labels) if model._loss else None
            metrics = self._update_metrics(outputs, labels)
        if losses is not None:
            losses = [to_numpy(loss) for loss in losses]
            return (losses, metrics) if metrics else losses
        return metrics

    def predict_batch(self, inputs):
        model = self.model
        model.network.eval()
        model.mode = "test"
        inputs = self._inputs(inputs)
        with oarlock.no_grad():
            outputs = model.network(*inputs)
        return [to_numpy(o) for o in to_list(outputs)]
