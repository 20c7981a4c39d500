"""oarlock.metric's classes: Metric (the interface Model drives) and Accuracy, Precision, Recall, Auc.

Paddle 3.2's semantics (paddle/metric/metrics.py): `compute` runs on Tensors inside the step (Accuracy turns
logits into a 0/1 "correct" matrix there), `update` takes numpy arrays (or Tensors) and returns the batch's value,
`accumulate` gives the value over every update since `reset`, and `name` gives the log key(s). Counting is done
in numpy on the host, as Paddle does, so results agree with Paddle's to the last bit."""

from __future__ import annotations

import abc

import numpy as np

import oarlock


def host_array(owner: str, argument: str, value) -> np.ndarray:
    """A numpy array from a Tensor or numpy value; anything else is refused naming the caller and argument."""
    if isinstance(value, oarlock.Tensor):
        return value.numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    raise ValueError(f"{owner}: argument '{argument}' must be a numpy ndarray or Tensor, "
                     f"got {type(value).__name__}")


class Metric(metaclass=abc.ABCMeta):
    """Base class of metrics: subclasses implement reset, update, accumulate and name; compute (optional) runs
    on the step's output and label Tensors and its results are what update receives, as numpy arrays."""

    @abc.abstractmethod
    def reset(self) -> None:
        raise NotImplementedError(f"function 'reset' not implemented in {self.__class__.__name__}.")

    @abc.abstractmethod
    def update(self, *args):
        raise NotImplementedError(f"function 'update' not implemented in {self.__class__.__name__}.")

    @abc.abstractmethod
    def accumulate(self):
        raise NotImplementedError(f"function 'accumulate' not implemented in {self.__class__.__name__}.")

    @abc.abstractmethod
    def name(self):
        raise NotImplementedError(f"function 'name' not implemented in {self.__class__.__name__}.")

    def compute(self, *args):
        """Preprocess the step's outputs and labels (Tensors); the default passes them through."""
        return args


class Accuracy(Metric):
    """Top-k classification accuracy for each k of `topk`; named `acc` (or `acc_top{k}` for several k)."""

    def __init__(self, topk=(1,), name=None, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(topk, int):
            topk = (topk,)
        if not topk or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in topk):
            raise ValueError(f"Accuracy(): argument 'topk' must be a non-empty sequence of positive ints, got {topk!r}")
        self.topk = topk
        self.maxk = max(topk)
        self._init_name(name)
        self.reset()

    def compute(self, pred, label, *args):
        """[N, ..., maxk] float32: 1 where the i-th highest score is the label's class."""
        order = oarlock.argsort(pred, axis=-1, descending=True)
        order = order[..., :self.maxk]
        if len(label.shape) == 1 or (len(label.shape) == 2 and label.shape[-1] == 1):
            label = oarlock.reshape(label, (-1, 1))
        elif label.shape[-1] != 1:   # one-hot or soft labels: the class is the argmax
            label = oarlock.argmax(label, axis=-1, keepdim=True)
        correct = order == label.astype(order.dtype)
        return oarlock.cast(correct, dtype="float32")

    def update(self, correct, *args):
        """Count the batch (`correct` from compute); returns its accuracy (a list for several k)."""
        correct = host_array("Accuracy.update()", "correct", correct)
        num_samples = np.prod(np.array(correct.shape[:-1]))
        accs = []
        for i, k in enumerate(self.topk):
            num_corrects = correct[..., :k].sum()
            accs.append(float(num_corrects) / num_samples)
            self.total[i] += num_corrects
            self.count[i] += num_samples
        return accs[0] if len(self.topk) == 1 else accs

    def reset(self) -> None:
        self.total = [0.0] * len(self.topk)
        self.count = [0] * len(self.topk)

    def accumulate(self):
        res = [float(t) / c if c > 0 else 0.0 for t, c in zip(self.total, self.count)]
        return res[0] if len(self.topk) == 1 else res

    def _init_name(self, name) -> None:
        name = name or "acc"
        self._name = [f"{name}_top{k}" for k in self.topk] if self.maxk != 1 else [name]

    def name(self):
        return self._name


class _BinaryCounts(Metric):
    """Precision and Recall: binary predictions (probabilities rounded at 0.5) against 0/1 labels."""

    owner = ""

    def __init__(self, name, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._name = name
        self.reset()

    def update(self, preds, labels) -> None:
        preds = host_array(f"{self.owner}.update()", "preds", preds)
        labels = host_array(f"{self.owner}.update()", "labels", labels)
        preds = self._round(preds).astype("int32")
        for i in range(labels.shape[0]):   # per sample as Paddle: a [N, 1] pair compares elementwise
            self._count(preds[i], labels[i])

    def name(self):
        return self._name

    @staticmethod
    def _ratio(hits, misses) -> float:
        total = hits + misses
        return float(hits) / total if total != 0 else 0.0


class Precision(_BinaryCounts):
    """Precision of binary classification: tp / (tp + fp); predictions are rounded half up."""

    owner = "Precision"

    def __init__(self, name="precision", *args, **kwargs) -> None:
        super().__init__(name, *args, **kwargs)

    @staticmethod
    def _round(preds):
        return np.floor(preds + 0.5)

    def _count(self, pred, label) -> None:
        if pred == 1:
            if pred == label:
                self.tp += 1
            else:
                self.fp += 1

    def reset(self) -> None:
        self.tp = 0
        self.fp = 0

    def accumulate(self) -> float:
        return self._ratio(self.tp, self.fp)


class Recall(_BinaryCounts):
    """Recall of binary classification: tp / (tp + fn); predictions are rounded half to even (np.rint)."""

    owner = "Recall"

    def __init__(self, name="recall", *args, **kwargs) -> None:
        super().__init__(name, *args, **kwargs)

    @staticmethod
    def _round(preds):
        return np.rint(preds)

    def _count(self, pred, label) -> None:
        if label == 1:
            if pred == label:
                self.tp += 1
            else:
                self.fn += 1

    def reset(self) -> None:
        self.tp = 0
        self.fn = 0

    def accumulate(self) -> float:
        return self._ratio(self.tp, self.fn)


class Auc(Metric):
    """Area under the ROC curve from bucketed scores: `preds` is [N, 2] (column 1 the positive probability),
    `labels` [N] or [N, 1]; the scores fall into num_thresholds + 1 buckets, as Paddle's."""

    def __init__(self, curve="ROC", num_thresholds=4095, name="auc", *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(num_thresholds, int) or isinstance(num_thresholds, bool) or num_thresholds < 1:
            raise ValueError(f"Auc(): argument 'num_thresholds' must be a positive int, got {num_thresholds!r}")
        self._curve = curve
        self._num_thresholds = num_thresholds
        self._name = name
        self.reset()

    def update(self, preds, labels) -> None:
        labels = host_array("Auc.update()", "labels", labels)
        preds = host_array("Auc.update()", "preds", preds)
        if preds.ndim != 2 or preds.shape[1] < 2:
            raise ValueError(f"Auc.update(): argument 'preds' must be [N, 2] class probabilities, "
                             f"got shape {list(preds.shape)}")
        for i, lbl in enumerate(labels):
            bin_idx = int(preds[i, 1] * self._num_thresholds)
            if not 0 <= bin_idx <= self._num_thresholds:
                raise ValueError(f"Auc.update(): argument 'preds' must hold probabilities in [0, 1], "
                                 f"got {preds[i, 1]} at row {i}")
            if lbl:
                self._stat_pos[bin_idx] += 1.0
            else:
                self._stat_neg[bin_idx] += 1.0

    @staticmethod
    def trapezoid_area(x1, x2, y1, y2):
        return abs(x1 - x2) * (y1 + y2) / 2.0

    def accumulate(self) -> float:
        tot_pos = tot_neg = auc = 0.0
        for idx in range(self._num_thresholds, -1, -1):   # from the highest score bucket down, as Paddle sums
            tot_pos_prev, tot_neg_prev = tot_pos, tot_neg
            tot_pos += self._stat_pos[idx]
            tot_neg += self._stat_neg[idx]
            auc += self.trapezoid_area(tot_neg, tot_neg_prev, tot_pos, tot_pos_prev)
        return auc / tot_pos / tot_neg if tot_pos > 0.0 and tot_neg > 0.0 else 0.0

    def reset(self) -> None:
        self._stat_pos = np.zeros(self._num_thresholds + 1)
        self._stat_neg = np.zeros(self._num_thresholds + 1)

    def name(self):
        return self._name
