"""oarlock.Model: Paddle 3.2's high-level training API (paddle.Model) over an nn.Layer, eagerly.

prepare(optimizer, loss, metrics, amp_configs) configures it; fit / evaluate / predict run epochs over a
Dataset or DataLoader with callbacks (a progress bar, checkpoints, LR scheduling by default); train_batch /
eval_batch / predict_batch run one step; save / load write and read .pdparams/.pdopt files. The logs, return
values and callback order are Paddle's (paddle/hapi/model.py).

Under a multi-rank launch, training is data parallel and evaluation gathers the ranks' outputs (steps.py).
Departures from Paddle 3.2: each pass logs into a fresh dict (Paddle's
_run_one_epoch keeps one dict in a mutable default argument, so keys of earlier runs linger in its logs); fit
clears stop_training when it starts (Paddle leaves it set, so a fit after an early stop ran one epoch only);
save(training=False) needs oarlock.jit.save from a plugin."""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass

import numpy as np

import oarlock
import oarlock.nn
from oarlock_hapi.callbacks.config import config_callbacks
from oarlock_hapi.callbacks.early_stopping import EarlyStopping
from oarlock_hapi.metrics import Metric
from oarlock_hapi.model import state
from oarlock_hapi.model.amp_config import parse_amp_configs
from oarlock_hapi.model.data import flatten, leading_dim, length_of, make_loader, to_list
from oarlock_hapi.model.steps import EagerSteps


@dataclass
class ArgSpec:
    """An input or label description when none was given (Paddle makes an InputSpec per forward argument)."""
    name: str
    shape: list
    dtype: object = "float32"


def _specs(owner, argument, specs, network, is_input):
    """Paddle's _verify_spec: given specs as a list (each with a name), or one ArgSpec per forward argument."""
    if specs is None:
        if not is_input:
            return []
        names = inspect.getfullargspec(network.forward).args[1:]
        return [ArgSpec(name=n, shape=[None]) for n in names]
    if isinstance(specs, dict):
        if is_input:
            raise TypeError(f"{owner}: argument '{argument}' must be a spec or a list of specs, got a dict")
        names = [n for n in inspect.getfullargspec(network.forward).args if n != "self"]
        specs = [specs[n] for n in names]
    out = to_list(specs)
    for i, spec in enumerate(out):
        if not hasattr(spec, "shape") or getattr(spec, "name", None) is None:
            raise ValueError(f"{owner}: argument '{argument}' must hold input specs (oarlock.static.InputSpec-like, "
                             f"with a shape and a name), got {spec!r} at position {i}")
    return out


class Model:
    """A network with its optimizer, loss and metrics; `inputs` / `labels` optionally describe the data (specs
    with shape, dtype and name, such as oarlock.static.InputSpec)."""

    def __init__(self, network, inputs=None, labels=None):
        if not isinstance(network, oarlock.nn.Layer):
            raise TypeError(f"Model(): argument 'network' must be an oarlock.nn.Layer, got {type(network).__name__}")
        self.mode = "train"
        self.network = network
        self._loss = None
        self._loss_weights = None
        self._optimizer = None
        self._metrics = []
        self._scaler = None
        self._input_info = None
        self._is_shape_inferred = False
        self._test_dataloader = None
        self._accumulate = 1
        self.stop_training = False
        self._inputs_given = inputs is not None
        self._inputs = _specs("Model()", "inputs", inputs, network, True)
        self._labels = _specs("Model()", "labels", labels, network, False)
        self._adapter = EagerSteps(self)

    # -- one batch --------------------------------------------------------------------------------------------------
    def train_batch(self, inputs, labels=None, update=True):
        """One training step; returns [loss arrays], or ([loss arrays], [metric values]) with metrics."""
        result = self._adapter.train_batch(inputs, labels, update)
        self._record_inputs()
        return result

    def eval_batch(self, inputs, labels=None):
        """One evaluation step (no gradients); returns as train_batch, or [metric values] without a loss."""
        result = self._adapter.eval_batch(inputs, labels)
        self._record_inputs()
        return result

    def predict_batch(self, inputs):
        """The network's outputs on one batch, as a list of numpy arrays."""
        result = self._adapter.predict_batch(inputs)
        self._record_inputs()
        return result

    def _record_inputs(self):
        """Keep the input shapes of the first step when no inputs were given (for save(training=False))."""
        if self._input_info is None and self._adapter.input_info is not None:
            self._input_info = self._adapter.input_info
            if not self._inputs_given:
                names = [spec.name for spec in self._inputs]
                shapes, dtypes = self._input_info
                self._inputs = [ArgSpec(name=n, shape=s, dtype=d) for n, s, d in zip(names, shapes, dtypes)]
                self._is_shape_inferred = True

    # -- configuration ----------------------------------------------------------------------------------------------
    def prepare(self, optimizer=None, loss=None, metrics=None, amp_configs=None):
        """Set the optimizer (needed to train), the loss (a Layer or callable taking outputs then labels), the
        metrics (Metric instances) and the AMP configuration ('O1', 'O2' or a dict with 'level' and GradScaler /
        auto_cast arguments)."""
        if loss is not None and not isinstance(loss, oarlock.nn.Layer) and not callable(loss):
            raise TypeError(f"Model.prepare(): argument 'loss' must be an oarlock.nn.Layer or a callable, "
                            f"got {type(loss).__name__}")
        metrics = to_list(metrics)
        for metric in metrics:
            if not isinstance(metric, Metric):
                raise TypeError(f"Model.prepare(): argument 'metrics' must hold oarlock.metric.Metric instances, "
                                f"got {type(metric).__name__} (is not sub class of Metric)")
        level, custom, scaler = parse_amp_configs(amp_configs)
        self._optimizer = optimizer
        self._loss = loss
        self._metrics = metrics
        self._adapter.amp_level, self._adapter.amp_custom_lists, self._adapter.amp_configs = level, custom, scaler
        if level == "O2" and optimizer is not None:
            self.network, self._optimizer = oarlock.amp.decorate(models=self.network, optimizers=optimizer,
                                                                 level="O2")
        self._scaler = None

    def parameters(self, *args, **kwargs):
        """The network's parameters."""
        return self.network.parameters(*args, **kwargs)

    def summary(self, input_size=None, dtype=None):
        """oarlock.summary of the network for `input_size` (default: the shapes of the inputs given to Model)."""
        if input_size is None:
            if not self._inputs_given:
                raise ValueError("Model.summary(): 'input_size' or 'self._input' must be set: give input_size, or "
                                 "inputs to Model()")
            input_size = [tuple(spec.shape) for spec in self._inputs]
            dtype = dtype or [str(spec.dtype) for spec in self._inputs]
            if len(input_size) == 1:
                input_size, dtype = input_size[0], dtype[0] if isinstance(dtype, list) else dtype
        return oarlock.summary(self.network, input_size, dtypes=dtype)

    # -- checkpoints ------------------------------------------------------------------------------------------------
    def save(self, path, training=True):
        """Write path.pdparams (and path.pdopt / path.pdscaler when there is state), or with training=False
        an inference model (through oarlock.jit.save)."""
        state.save(self, path, training)

    def load(self, path, skip_mismatch=False, reset_optimizer=False):
        """Read what save wrote (or what Paddle 3.2's Model.save wrote)."""
        state.load(self, path, skip_mismatch, reset_optimizer)

    # -- epochs -----------------------------------------------------------------------------------------------------
    def fit(self, train_data=None, eval_data=None, batch_size=1, epochs=1, eval_freq=1, log_freq=10, save_dir=None,
            save_freq=1, verbose=2, drop_last=False, shuffle=True, num_workers=0, callbacks=None,
            accumulate_grad_batches=1, num_iters=None):
        """Train for `epochs` over train_data (a Dataset, batched by `batch_size`, or a DataLoader), evaluating on
        eval_data every `eval_freq` epochs; returns None (the logs go to the callbacks)."""
        owner = "Model.fit()"
        if train_data is None:
            raise ValueError(f"{owner}: train_data must be given!")
        if isinstance(batch_size, (tuple, list)) and all(isinstance(x, int) for x in batch_size):
            if len(batch_size) != 2:
                raise ValueError(f"{owner}: batch_size length error, expected train_batch_size and "
                                 f"eval_batch_size, got {batch_size!r}")
            train_batch_size, eval_batch_size = batch_size
        elif isinstance(batch_size, int) and not isinstance(batch_size, bool):
            train_batch_size = eval_batch_size = batch_size
        else:
            raise TypeError(f"{owner}: argument 'batch_size' must be an int or a [train, eval] pair of ints, "
                            f"got {batch_size!r}")
        if not isinstance(eval_freq, int) or isinstance(eval_freq, bool) or eval_freq < 1:
            raise ValueError(f"{owner}: argument 'eval_freq' must be an int >= 1, got {eval_freq!r}")
        if not isinstance(accumulate_grad_batches, int) or accumulate_grad_batches < 1:
            raise ValueError(f"{owner}: argument 'accumulate_grad_batches' must be an int >= 1, "
                             f"got {accumulate_grad_batches!r}")
        train_loader = make_loader(owner, "train_data", train_data, train_batch_size, shuffle, drop_last, num_workers)
        eval_loader = (None if eval_data is None else
                       make_loader(owner, "eval_data", eval_data, eval_batch_size, num_workers=num_workers))
        do_eval = eval_loader is not None
        self._test_dataloader = eval_loader
        self._accumulate = accumulate_grad_batches
        steps = length_of(train_loader)
        self.num_iters = num_iters
        if num_iters is not None and isinstance(num_iters, int) and isinstance(steps, int):
            if num_iters <= 0:
                raise ValueError(f"{owner}: num_iters must be greater than 0, got {num_iters}")
            epochs = num_iters // steps + 1
            steps = min(num_iters, steps)
        cbks = config_callbacks(callbacks, model=self, epochs=epochs, steps=steps, log_freq=log_freq,
                                save_freq=save_freq, save_dir=save_dir, verbose=verbose, metrics=self._metrics_name(),
                                owner=owner)
        if any(isinstance(k, EarlyStopping) for k in cbks) and not do_eval:
            warnings.warn("EarlyStopping needs validation data.", stacklevel=2)
        self.stop_training = False
        logs = {}
        cbks.on_begin("train")
        for epoch in range(epochs):
            cbks.on_epoch_begin(epoch)
            logs = self._run_one_epoch(train_loader, cbks, "train")
            cbks.on_epoch_end(epoch, logs)
            if do_eval and epoch % eval_freq == 0:
                cbks.on_begin("eval", {"steps": length_of(eval_loader), "metrics": self._metrics_name()})
                eval_logs = self._run_one_epoch(eval_loader, cbks, "eval")
                cbks.on_end("eval", eval_logs)
            if self.stop_training:
                break
        cbks.on_end("train", logs)
        self._test_dataloader = None

    def evaluate(self, eval_data, batch_size=1, log_freq=10, verbose=2, num_workers=0, callbacks=None,
                 num_iters=None):
        """One pass over eval_data; returns {'loss': [last batch's loss], metric name: accumulated value}."""
        owner = "Model.evaluate()"
        eval_loader = make_loader(owner, "eval_data", eval_data, batch_size, num_workers=num_workers)
        self._test_dataloader = eval_loader
        cbks = config_callbacks(callbacks, model=self, log_freq=log_freq, verbose=verbose,
                                metrics=self._metrics_name(), owner=owner)
        eval_steps = length_of(eval_loader)
        self.num_iters = num_iters
        if num_iters is not None and isinstance(num_iters, int) and isinstance(eval_steps, int):
            if num_iters <= 0:
                raise ValueError(f"{owner}: num_iters must be greater than 0, got {num_iters}")
            eval_steps = min(num_iters, eval_steps)
            self.num_iters = eval_steps
        cbks.on_begin("eval", {"steps": eval_steps, "metrics": self._metrics_name()})
        logs = self._run_one_epoch(eval_loader, cbks, "eval")
        cbks.on_end("eval", logs)
        self._test_dataloader = None
        return {k: logs[k] for k in self._metrics_name()}

    def predict(self, test_data, batch_size=1, num_workers=0, stack_outputs=False, verbose=1, callbacks=None):
        """The network's outputs over test_data: a list with one entry per output, each a list of per-batch
        arrays (stack_outputs=False) or one array stacked over batches (stack_outputs=True)."""
        owner = "Model.predict()"
        test_loader = make_loader(owner, "test_data", test_data, batch_size, num_workers=num_workers)
        self._test_dataloader = test_loader
        cbks = config_callbacks(callbacks, model=self, verbose=verbose, owner=owner)
        logs = {"steps": length_of(test_loader)}
        cbks.on_begin("predict", logs)
        logs, outputs = self._run_one_epoch(test_loader, cbks, "predict")
        outputs = list(zip(*outputs))
        if stack_outputs:
            outputs = [np.vstack(outs) for outs in outputs]
        self._test_dataloader = None
        cbks.on_end("predict", logs)
        return outputs

    def _run_one_epoch(self, data_loader, callbacks, mode):
        """One pass of `mode` over the loader, calling the batch hooks; returns the logs (and the outputs for
        predict). The logged loss is the last batch's; metrics are accumulated over the pass."""
        logs, outputs = {}, []
        n_inputs = len(self._inputs)
        total = length_of(data_loader)
        for step, data in enumerate(data_loader):
            data = flatten(data)
            batch_size = leading_dim(data[0])
            callbacks.on_batch_begin(mode, step, logs)
            if mode != "predict":
                args = [data[:n_inputs], data[n_inputs:]]
                if mode == "train":
                    args.append((step + 1) % self._accumulate == 0 or step + 1 == total)
                outs = getattr(self, mode + "_batch")(*args)
                if self._metrics and self._loss:
                    values = [[float(loss) for loss in outs[0]]]
                elif self._loss:
                    values = [[float(loss) for loss in outs]]
                else:
                    values = []
                for metric in self._metrics:
                    values.extend(to_list(metric.accumulate()))
                logs.update(zip(self._metrics_name(), values))
            else:
                outputs.append(self.predict_batch(data[:n_inputs]))
            logs["step"] = step
            merged = self._adapter.merge_count.get(mode + "_batch", 0)
            logs["batch_size"] = (batch_size * self._adapter.nranks if mode == "train" or merged <= 0 else merged)
            callbacks.on_batch_end(mode, step, logs)
            if getattr(self, "num_iters", None) is not None:
                self.num_iters -= 1
                if self.num_iters <= 0:
                    self.stop_training = True
                    del self.num_iters
                    break
        for metric in self._metrics:
            metric.reset()
        return (logs, outputs) if mode == "predict" else logs

    def _metrics_name(self):
        names = ["loss"] if self._loss else []
        for metric in self._metrics:
            names.extend(to_list(metric.name()))
        return names
