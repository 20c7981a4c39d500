"""SummaryWriter with PyTorch's API (torch.utils.tensorboard.SummaryWriter), so code written for it runs
unchanged: scalars, groups of scalars, histograms, text and hyperparameters, written as TensorBoard event
files under log_dir. View them with `tensorboard --logdir DIR`.

As in PyTorch, add_scalars writes each series to its own subdirectory
(<log_dir>/<main_tag with / as _>_<key>) and add_hparams writes to a subdirectory named run_name
(default: the time), and a closed writer opens new files when it is used again.
"""

from __future__ import annotations

import numbers
import os
import socket
import threading
import time
from datetime import datetime

import numpy as np

import oarlock
from oarlock_tensorboard import hparams, messages
from oarlock_tensorboard.event_file import EventFileWriter
from oarlock_tensorboard.histogram import make_histogram
from oarlock_tensorboard.values import (
    as_array, as_scalar, check_int, check_path, check_positive, check_step, check_str, check_tag,
    check_walltime, describe)


def _default_log_dir(comment: str) -> str:
    stamp = datetime.now().strftime("%b%d_%H-%M-%S")
    return os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")


class SummaryWriter:
    """Writes TensorBoard event files to log_dir (default runs/<date>_<host><comment>).

    purge_step: after a crash at step T + X and a restart at T, pass T: TensorBoard hides the earlier
    events of this directory whose step is >= T. max_queue: records buffered before a write;
    flush_secs: how often a background thread writes the buffer; filename_suffix ends each file's name.
    """

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120,
                 filename_suffix=""):
        fn = "SummaryWriter()"
        comment = check_str(fn, "comment", comment)
        self._log_dir = check_path(fn, "log_dir", log_dir) if log_dir else _default_log_dir(comment)
        self._purge_step = None if purge_step is None else check_int(fn, "purge_step", purge_step, 0)
        self._max_queue = check_int(fn, "max_queue", max_queue, 1)
        self._flush_secs = check_positive(fn, "flush_secs", flush_secs)
        self._filename_suffix = check_str(fn, "filename_suffix", filename_suffix)
        self._lock = threading.Lock()   # guards _writers: threads may share a SummaryWriter
        self._writers: dict[str, EventFileWriter] = {}
        self._file_writer(self._log_dir)

    @property
    def log_dir(self) -> str:
        """The directory the event files are written to."""
        return self._log_dir

    def get_logdir(self) -> str:
        return self._log_dir

    def _file_writer(self, log_dir: str) -> EventFileWriter:
        """The open event file of log_dir, created on first use (and again after close())."""
        with self._lock:
            writer = self._writers.get(log_dir)
            if writer is None:
                writer = self._writers[log_dir] = EventFileWriter(
                    log_dir, self._max_queue, self._flush_secs, self._filename_suffix)
                if log_dir == self._log_dir and self._purge_step is not None:
                    writer.add_event(messages.event(time.time(), self._purge_step, session_start=True))
                    self._purge_step = None
            return writer

    def _add(self, values, global_step, walltime, log_dir=None) -> None:
        """One event holding the Summary.Value messages `values` (arguments already checked)."""
        event = messages.event(walltime, global_step, summary=messages.summary(*values))
        self._file_writer(log_dir or self._log_dir).add_event(event)

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False):
        """Log one number (a Python or numpy number, or a tensor or array of one element) under `tag`.
        Stored as float32 (simple_value); new_style=True stores a tensor instead, float64 with
        double_precision=True."""
        fn = "SummaryWriter.add_scalar()"
        tag = check_tag(fn, tag)
        value = as_scalar(fn, "scalar_value", scalar_value)
        step, walltime = check_step(fn, global_step), check_walltime(fn, walltime)
        if new_style:
            entry = messages.tensor_scalar_value(tag, value, bool(double_precision))
        else:
            entry = messages.scalar_value(tag, value)
        self._add([entry], step, walltime)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        """Log several numbers on one chart: each key of tag_scalar_dict becomes a run
        (<log_dir>/<main_tag>_<key>) holding the series `main_tag`."""
        fn = "SummaryWriter.add_scalars()"
        main_tag = check_tag(fn, main_tag, "main_tag")
        if not isinstance(tag_scalar_dict, dict):
            raise TypeError(f"{fn}: argument 'tag_scalar_dict' must be a dict of str to numbers, got "
                            f"{describe(tag_scalar_dict)}")
        entries = {check_tag(fn, key, "tag_scalar_dict key"): as_scalar(fn, f"tag_scalar_dict[{key!r}]", value)
                   for key, value in tag_scalar_dict.items()}
        step, walltime = check_step(fn, global_step), check_walltime(fn, walltime)
        for key, value in entries.items():
            run = os.path.join(self._log_dir, main_tag.replace("/", "_") + "_" + key)
            self._add([messages.scalar_value(main_tag, value)], step, walltime, run)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None):
        """Log the distribution of `values` (any shape, finite): bins="tensorflow" (TensorFlow's exponential
        buckets), a number of equal bins, bin edges or a numpy.histogram method ('auto', 'fd', ...);
        max_bins merges adjacent bins to at most that many."""
        fn = "SummaryWriter.add_histogram()"
        tag = check_tag(fn, tag)
        array = as_array(fn, "values", values)
        if max_bins is not None:
            max_bins = check_int(fn, "max_bins", max_bins, 1)
        step, walltime = check_step(fn, global_step), check_walltime(fn, walltime)
        self._add([messages.histogram_value(tag, make_histogram(fn, array, bins, max_bins))], step, walltime)

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        """Log text (Markdown) under `tag`/text_summary, as PyTorch names it."""
        fn = "SummaryWriter.add_text()"
        tag = check_tag(fn, tag)
        text = check_str(fn, "text_string", text_string)
        step, walltime = check_step(fn, global_step), check_walltime(fn, walltime)
        self._add([messages.text_value(tag + "/text_summary", text)], step, walltime)

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None,
                    global_step=None):
        """Log a run's hyperparameters (bool, number, str or one-element tensor values; None is skipped)
        and its final metrics for the HPARAMS dashboard, in the subdirectory run_name (default: the time)."""
        fn = "SummaryWriter.add_hparams()"
        hparam_dict = _check_hparams(fn, hparam_dict)
        metrics = _check_dict(fn, "metric_dict", metric_dict)
        metrics = {check_tag(fn, k, "metric_dict key"): as_scalar(fn, f"metric_dict[{k!r}]", v)
                   for k, v in metrics.items()}
        domains = _check_domains(fn, hparam_domain_discrete, hparam_dict)
        step = check_step(fn, global_step)
        walltime = time.time()
        run_name = check_str(fn, "run_name", run_name) if run_name else str(walltime)
        run = os.path.join(self._log_dir, run_name)
        self._add(hparams.summaries(hparam_dict, metrics, domains), step, walltime, run)
        for tag, value in metrics.items():
            self._add([messages.scalar_value(tag, value)], step, walltime, run)
        self._file_writer(run).flush()

    def flush(self):
        """Write every buffered record of every event file now."""
        with self._lock:
            writers = list(self._writers.values())
        for writer in writers:
            writer.flush()

    def close(self):
        """Write what is buffered and close every event file; a later add_* opens new files."""
        with self._lock:
            writers, self._writers = list(self._writers.values()), {}
        for writer in writers:
            writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        return f"SummaryWriter(log_dir={self._log_dir!r})"


def _check_dict(fn: str, arg: str, value) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"{fn}: argument '{arg}' must be a dict, got {describe(value)}")
    return value


def _hparam_value(fn: str, name: str, value):
    """A hyperparameter as bool, float or str (a one-element tensor or array becomes a float)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (oarlock.Tensor, np.ndarray)):
        return as_scalar(fn, f"hparam_dict[{name!r}]", value)
    raise TypeError(f"{fn}: argument 'hparam_dict[{name!r}]' must be a bool, number, str, one-element tensor "
                    f"or None, got {describe(value)}")


def _check_hparams(fn: str, hparam_dict) -> dict:
    return {check_tag(fn, name, "hparam_dict key"): _hparam_value(fn, name, value)
            for name, value in _check_dict(fn, "hparam_dict", hparam_dict).items() if value is not None}


def _check_domains(fn: str, domains, hparam_dict: dict) -> dict:
    """hparam_domain_discrete: {name of a hyperparameter: [the values it can take, of its type]}."""
    if domains is None:
        return {}
    checked = {}
    for name, values in _check_dict(fn, "hparam_domain_discrete", domains).items():
        if name not in hparam_dict:
            raise ValueError(f"{fn}: argument 'hparam_domain_discrete' names {name!r}, which is not in "
                             f"hparam_dict (keys {sorted(hparam_dict)})")
        kind = type(hparam_dict[name])
        if not isinstance(values, (list, tuple)) or not all(type(_hparam_value(fn, name, v)) is kind
                                                            for v in values):
            raise TypeError(f"{fn}: argument 'hparam_domain_discrete[{name!r}]' must be a list of "
                            f"{kind.__name__} values like hparam_dict[{name!r}], got {describe(values)}")
        checked[name] = [_hparam_value(fn, name, v) for v in values]
    return checked
