"""One step of each kind on a batch, eagerly (Paddle's DynamicGraphAdapter): forward, loss, backward and
optimizer update for training (with AMP when prepared with amp_configs), forward, loss and metrics for
evaluation, forward only for prediction. Results come back as numpy arrays, as Paddle returns them.

Launched on several ranks (oarlock launch / mpiexec), training runs through oarlock.DataParallel (gradients
averaged over the ranks) and evaluation gathers every rank's outputs and labels before the metrics, cutting the
padding DistributedBatchSampler added to the last batch, so metrics cover the dataset once, as in Paddle."""

from __future__ import annotations

import oarlock
import oarlock.amp
import oarlock.distributed
import oarlock.io
from oarlock_hapi.model.data import as_tensor, to_list, to_numpy
from oarlock_hapi.ranks import world_size


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
        self.nranks = world_size()
        # samples gathered so far in this pass, and in the last batch (padding cut), per mode
        self.merge_count = {"eval_total": 0, "test_total": 0, "eval_batch": 0, "test_batch": 0}
        self.ddp_model = None
        if self.nranks > 1:
            oarlock.distributed.init_parallel_env()
            self.ddp_model = oarlock.DataParallel(model.network)

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
        network = self.ddp_model if self.ddp_model is not None else model.network
        with oarlock.amp.auto_cast(enable=amp, level=self.amp_level, **self.amp_custom_lists):
            outputs = network(*inputs)
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
            if self.nranks > 1:
                outputs, labels = self._gather(to_list(outputs), labels)
            metrics = self._update_metrics(outputs, labels)
        if losses is not None:
            losses = [to_numpy(loss) for loss in losses]
            return (losses, metrics) if metrics else losses
        return metrics

    def _gather(self, outputs, labels):
        """Every rank's outputs and labels, concatenated in rank order; the padding of the pass's last batch
        (DistributedBatchSampler repeats samples to even the ranks out) is cut off."""
        outputs = [_all_gather(o) for o in outputs]
        labels = [_all_gather(label) for label in labels]
        loader = self.model._test_dataloader
        if isinstance(loader, oarlock.io.DataLoader):
            total = len(loader.dataset)
            samples = outputs[0].shape[0]
            done = self.merge_count[self.model.mode + "_total"]
            if done + samples >= total:
                keep = int(total - done)
                outputs = [o[:keep] for o in outputs]
                labels = [label[:keep] for label in labels]
                self.merge_count[self.model.mode + "_total"] = 0
                self.merge_count[self.model.mode + "_batch"] = keep
            else:
                self.merge_count[self.model.mode + "_total"] += samples
                self.merge_count[self.model.mode + "_batch"] = samples
        return outputs, labels

    def predict_batch(self, inputs):
        model = self.model
        model.network.eval()
        model.mode = "test"
        inputs = self._inputs(inputs)
        with oarlock.no_grad():
            outputs = model.network(*inputs)
        return [to_numpy(o) for o in to_list(outputs)]


def _all_gather(tensor):
    parts = []
    oarlock.distributed.all_gather(parts, tensor)
    return oarlock.concat(parts, axis=0)
