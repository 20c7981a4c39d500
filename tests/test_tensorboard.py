"""oarlock.utils.tensorboard.SummaryWriter (plugin oarlock-tensorboard) and `oarlock train --log-dir`.

The oracle is the tensorboard package's own reader (EventAccumulator, and its record reader, which checks
both CRCs of every record): what it reads back must be exactly what was logged. Histogram buckets are
checked against numpy, CRC-32C against published test vectors, and the whole writer against PyTorch's
torch.utils.tensorboard where torch is installed. Tests that need tensorboard skip without it.
"""

import glob
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import oarlock
from oarlock.utils.tensorboard import SummaryWriter
from oarlock_tensorboard import crc32c

ALL = {"scalars": 0, "histograms": 0, "tensors": 0}  # size_guidance: keep every event, sample none


@pytest.fixture(scope="module")
def accumulator():
    """A function reading a run directory with tensorboard's EventAccumulator."""
    module = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                 reason="the tensorboard package (the oracle reader) is not installed")

    def read(log_dir):
        acc = module.EventAccumulator(str(log_dir), size_guidance=ALL)
        acc.Reload()
        return acc
    return read


@pytest.fixture(scope="module")
def record_reader():
    """tensorboard's TFRecord reader: yields each record's bytes, raising DataLossError on a bad CRC."""
    pw = pytest.importorskip("tensorboard.compat.tensorflow_stub.pywrap_tensorflow",
                             reason="the tensorboard package (the oracle reader) is not installed")
    errors = pytest.importorskip("tensorboard.compat.tensorflow_stub.errors")

    def records(path):
        reader = pw.PyRecordReader_New(str(path))
        while True:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:
                return
            yield reader.record()
    return records, errors.DataLossError


def event_files(log_dir):
    return sorted(glob.glob(os.path.join(str(log_dir), "events.out.tfevents.*")))


# CRC-32C test vectors from RFC 3720 (iSCSI), appendix B.4, and the common check value
CRC_VECTORS = [(b"", 0), (b"123456789", 0xE3069283), (bytes(32), 0x8A9136AA), (b"\xff" * 32, 0x62A8AB43),
               (bytes(range(32)), 0x46DD794E), (bytes(range(31, -1, -1)), 0x113FDB5C)]


@pytest.mark.parametrize("data, expected", CRC_VECTORS)
def test_crc32c_matches_published_vectors(data, expected):
    assert crc32c.crc32c(data) == expected
    assert crc32c._crc32c_table(data) == expected   # the pure-Python table, whichever one is in use


def test_masked_crc_matches_tensorboards():
    pw = pytest.importorskip("tensorboard.compat.tensorflow_stub.pywrap_tensorflow")
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 100, 1000):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert crc32c.masked_crc32c(data) == pw.masked_crc32c(data)


def test_scalars_read_back_exactly(tmp_path, accumulator):
    values = [0.1, -2.5, 1e-8, 3.0e38, 12345.678]
    kinds = [lambda v: v, np.float32, lambda v: oarlock.to_tensor(v), lambda v: np.array([v]),
             lambda v: oarlock.to_tensor([[v]], dtype="float64")]
    before = time.time()
    with SummaryWriter(tmp_path) as writer:
        for step, (value, kind) in enumerate(zip(values, kinds)):
            writer.add_scalar("train/loss", kind(value), global_step=step * 10, walltime=1000.5 + step)
        writer.add_scalar("count", 7)                 # an int, no step, wall time now
        writer.add_scalar("flag", np.int64(3), global_step=np.int64(2))
    after = time.time()
    acc = accumulator(tmp_path)
    assert sorted(acc.Tags()["scalars"]) == ["count", "flag", "train/loss"]
    events = acc.Scalars("train/loss")
    assert [e.step for e in events] == [0, 10, 20, 30, 40]
    assert [e.wall_time for e in events] == [1000.5, 1001.5, 1002.5, 1003.5, 1004.5]
    assert [e.value for e in events] == [float(np.float32(v)) for v in values]  # simple_value is float32
    (count,) = acc.Scalars("count")
    assert (count.step, count.value) == (0, 7.0) and before <= count.wall_time <= after
    assert [(e.step, e.value) for e in acc.Scalars("flag")] == [(2, 3.0)]


def test_new_style_scalars_are_tensors(tmp_path, accumulator):
    with SummaryWriter(tmp_path) as writer:
        writer.add_scalar("f", 0.1, 1, new_style=True)
        writer.add_scalar("d", 0.1, 2, new_style=True, double_precision=True)
    acc = accumulator(tmp_path)
    (f,) = acc.Tensors("f")
    (d,) = acc.Tensors("d")
    assert (f.step, list(f.tensor_proto.float_val)) == (1, [float(np.float32(0.1))])
    assert (d.step, list(d.tensor_proto.double_val)) == (2, [0.1])
    assert acc.SummaryMetadata("f").plugin_data.plugin_name == "scalars"


def test_event_file_name_and_crc_framing(tmp_path, record_reader):
    records, data_loss = record_reader
    with SummaryWriter(tmp_path, filename_suffix=".v2") as writer:
        for step in range(20):
            writer.add_scalar("x", step, step)
    (path,) = event_files(tmp_path)
    name = re.escape(f".{socket.gethostname()}.{os.getpid()}.")
    assert re.fullmatch(rf"events\.out\.tfevents\.\d{{10}}{name}\d+\.v2", os.path.basename(path))
    assert len(list(records(path))) == 21                # the file_version event, then one per scalar
    data = bytearray(open(path, "rb").read())
    data[-6] ^= 0x01                                     # one bit of the last record's data
    bad = tmp_path / "bad"
    bad.write_bytes(bytes(data))
    with pytest.raises(data_loss, match="crc32"):
        list(records(bad))


def test_histogram_buckets_match_numpy(tmp_path, accumulator):
    rng = np.random.default_rng(1)
    values = rng.normal(2.0, 3.0, size=(40, 25)).astype(np.float32)
    with SummaryWriter(tmp_path) as writer:
        writer.add_histogram("w", oarlock.to_tensor(values), 5, bins=30)
        writer.add_histogram("tf", values, 6)  # TensorFlow's default exponential buckets
        writer.add_histogram("merged", values, 7, bins=30, max_bins=7)
    acc = accumulator(tmp_path)
    flat = values.astype(np.float64).ravel()
    counts, edges = np.histogram(flat, bins=30)
    (event,) = acc.Histograms("w")
    h = event.histogram_value
    assert event.step == 5
    assert (h.min, h.max, h.num) == (flat.min(), flat.max(), flat.size)
    assert h.sum == pytest.approx(flat.sum(), rel=1e-12) and h.sum_squares == pytest.approx((flat ** 2).sum())
    nonempty = np.flatnonzero(counts)
    first, last = nonempty[0], nonempty[-1]
    assert list(h.bucket_limit) == list(edges[first:last + 2])
    assert list(h.bucket) == [0] + list(counts[first:last + 1])

    tf = acc.Histograms("tf")[0].histogram_value
    limits, buckets = np.array(tf.bucket_limit), np.array(tf.bucket)
    assert buckets[0] == 0 and buckets.sum() == flat.size
    assert np.all(np.diff(limits) > 0) and limits[0] <= flat.min() and limits[-1] >= flat.max()
    for left, right, count in zip(limits[:-1], limits[1:], buckets[1:]):  # numpy's [left, right) bins
        assert count == np.count_nonzero((flat >= left) & (flat < right)) or right == limits[-1]
    positive = limits[limits > 0]
    np.testing.assert_allclose(positive[1:] / positive[:-1], 1.1)   # exponential edges

    merged = acc.Histograms("merged")[0].histogram_value
    assert len(merged.bucket) - 1 <= 7 and sum(merged.bucket) == flat.size


def test_text_round_trips(tmp_path, accumulator):
    text = "**bold** and ünïcödé: 日本語\nsecond line"
    with SummaryWriter(tmp_path) as writer:
        writer.add_text("notes", text, global_step=3)
    acc = accumulator(tmp_path)
    (event,) = acc.Tensors("notes/text_summary")
    assert event.step == 3
    assert [s.decode("utf-8") for s in event.tensor_proto.string_val] == [text]
    assert acc.SummaryMetadata("notes/text_summary").plugin_data.plugin_name == "text"


def test_add_scalars_writes_one_run_per_key(tmp_path, accumulator):
    with SummaryWriter(tmp_path) as writer:
        for step in range(3):
            writer.add_scalars("loss/all", {"train": step * 1.0, "valid": step * 2.0}, step)
    for key, factor in (("train", 1.0), ("valid", 2.0)):
        acc = accumulator(tmp_path / f"loss_all_{key}")
        assert [(e.step, e.value) for e in acc.Scalars("loss/all")] == [(s, s * factor) for s in range(3)]


def test_hparams_are_read_by_the_hparams_plugin(tmp_path, accumulator):
    plugin_data = pytest.importorskip("tensorboard.plugins.hparams.plugin_data_pb2")
    with SummaryWriter(tmp_path) as writer:
        writer.add_hparams({"lr": 0.01, "optimizer": "adamw", "tied": False, "layers": oarlock.to_tensor(4)},
                           {"hparam/accuracy": 0.75}, hparam_domain_discrete={"optimizer": ["adamw", "sgd"]},
                           run_name="trial")
    acc = accumulator(tmp_path / "trial")
    assert [e.value for e in acc.Scalars("hparam/accuracy")] == [0.75]
    content = {tag: plugin_data.HParamsPluginData.FromString(data)
               for tag, data in acc.PluginTagToContent("hparams").items()}
    start = content["_hparams_/session_start_info"].session_start_info.hparams
    assert start["lr"].number_value == 0.01 and start["optimizer"].string_value == "adamw"
    assert start["tied"].HasField("bool_value") and start["layers"].number_value == 4
    experiment = content["_hparams_/experiment"].experiment
    assert [m.name.tag for m in experiment.metric_infos] == ["hparam/accuracy"]
    infos = {i.name: i for i in experiment.hparam_infos}
    assert [v.string_value for v in infos["optimizer"].domain_discrete.values] == ["adamw", "sgd"]
    assert content["_hparams_/session_end_info"].session_end_info.status == 1  # STATUS_SUCCESS


def test_purge_step_hides_the_events_of_a_crashed_run(tmp_path, accumulator):
    with SummaryWriter(tmp_path) as writer:
        for step in range(10):
            writer.add_scalar("loss", 1.0, step)
    with SummaryWriter(tmp_path, purge_step=5) as writer:
        for step in range(5, 8):
            writer.add_scalar("loss", 2.0, step)
    events = accumulator(tmp_path).Scalars("loss")
    assert [(e.step, e.value) for e in events] == [(s, 1.0) for s in range(5)] + [(s, 2.0) for s in range(5, 8)]


def test_writes_are_buffered_until_flush_or_max_queue(tmp_path, accumulator):
    writer = SummaryWriter(tmp_path / "manual", flush_secs=1000, max_queue=1000)
    writer.add_scalar("x", 1.0, 1)
    assert accumulator(tmp_path / "manual").Tags()["scalars"] == []   # still in memory
    writer.flush()
    assert [e.value for e in accumulator(tmp_path / "manual").Scalars("x")] == [1.0]
    writer.close()

    writer = SummaryWriter(tmp_path / "queue", flush_secs=1000, max_queue=3)
    for step in range(3):
        writer.add_scalar("x", step, step)
    assert len(accumulator(tmp_path / "queue").Scalars("x")) == 3    # the third add wrote the queue
    writer.close()


def test_background_thread_flushes_every_flush_secs(tmp_path, accumulator):
    with SummaryWriter(tmp_path, flush_secs=0.1, max_queue=1000) as writer:
        writer.add_scalar("x", 4.0, 1)
        deadline = time.monotonic() + 10
        while not accumulator(tmp_path).Tags()["scalars"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [e.value for e in accumulator(tmp_path).Scalars("x")] == [4.0]


def test_exit_flushes_an_unclosed_writer(tmp_path, accumulator):
    script = ("from oarlock.utils.tensorboard import SummaryWriter\n"
              f"w = SummaryWriter({str(tmp_path)!r}, flush_secs=1000, max_queue=1000)\n"
              "w.add_scalar('x', 5.0, 9)\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert [(e.step, e.value) for e in accumulator(tmp_path).Scalars("x")] == [(9, 5.0)]


def test_threads_can_share_a_writer(tmp_path, accumulator):
    writer = SummaryWriter(tmp_path, max_queue=7)

    def log(thread):
        for step in range(200):
            writer.add_scalar(f"t{thread}", thread * 1000 + step, step)
            if step % 50 == 0:
                writer.flush()
    threads = [threading.Thread(target=log, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    acc = accumulator(tmp_path)
    for i in range(6):
        assert [(e.step, e.value) for e in acc.Scalars(f"t{i}")] == [(s, i * 1000 + s) for s in range(200)]


def test_closed_writer_opens_a_new_file_and_log_dir_defaults(tmp_path, accumulator, monkeypatch):
    writer = SummaryWriter(tmp_path)
    assert writer.log_dir == writer.get_logdir() == str(tmp_path)
    writer.add_scalar("x", 1.0, 1)
    writer.close()
    writer.add_scalar("x", 2.0, 2)
    writer.close()
    assert len(event_files(tmp_path)) == 2
    assert [e.value for e in accumulator(tmp_path).Scalars("x")] == [1.0, 2.0]
    monkeypatch.chdir(tmp_path)
    with SummaryWriter(comment="_lr0.1") as default:
        assert re.fullmatch(rf"runs{re.escape(os.sep)}\w{{3}}\d\d_\d\d-\d\d-\d\d_.+_lr0\.1", default.log_dir)
        assert len(event_files(default.log_dir)) == 1


def test_same_events_as_pytorchs_writer(tmp_path, accumulator, torch):
    """The same calls through torch.utils.tensorboard and oarlock read back the same."""
    from torch.utils.tensorboard import SummaryWriter as TorchWriter
    values = np.random.default_rng(2).standard_normal(500)

    def log(writer, tensor):
        writer.add_scalar("a", tensor(1.25), 3, walltime=5.0)
        writer.add_histogram("h", tensor(values), 4, walltime=6.0)
        writer.add_histogram("h10", tensor(values), 4, bins=10, walltime=6.0)
        writer.add_text("t", "hi", 5, walltime=7.0)
        writer.close()
    log(TorchWriter(str(tmp_path / "torch")), torch.tensor)
    log(SummaryWriter(tmp_path / "oarlock"), oarlock.to_tensor)
    theirs, ours = accumulator(tmp_path / "torch"), accumulator(tmp_path / "oarlock")
    assert ours.Tags() == theirs.Tags()
    assert ours.Scalars("a") == theirs.Scalars("a")
    for tag in ("h", "h10"):
        assert ours.Histograms(tag) == theirs.Histograms(tag)
    assert ours.Tensors("t/text_summary") == theirs.Tensors("t/text_summary")


BAD_CALLS = [
    (lambda w: w.add_scalar("x", oarlock.ones([3])), ValueError,
     r"add_scalar\(\): argument 'scalar_value' must be a single number.*got a Tensor of shape \[3\]"),
    (lambda w: w.add_scalar(3, 1.0), TypeError, r"add_scalar\(\): argument 'tag' must be a str, got int 3"),
    (lambda w: w.add_scalar("", 1.0), ValueError, r"add_scalar\(\): argument 'tag' must be a non-empty str"),
    (lambda w: w.add_scalar("x", "1.0"), TypeError, r"add_scalar\(\): argument 'scalar_value' must be an "
                                                    r"oarlock Tensor, a numpy array or a Python number"),
    (lambda w: w.add_scalar("x", 1 + 2j), TypeError, r"add_scalar\(\): argument 'scalar_value'.*complex"),
    (lambda w: w.add_scalar("x", 1.0, global_step=1.5), TypeError,
     r"add_scalar\(\): argument 'global_step' must be an int or None, got float 1.5"),
    (lambda w: w.add_scalar("x", 1.0, walltime="now"), TypeError, r"add_scalar\(\): argument 'walltime'"),
    (lambda w: w.add_scalars("x", [1.0]), TypeError, r"add_scalars\(\): argument 'tag_scalar_dict' must be a "
                                                     r"dict"),
    (lambda w: w.add_scalars("x", {"a": np.ones(2)}), ValueError,
     r"add_scalars\(\): argument 'tag_scalar_dict\['a'\]' must be a single number"),
    (lambda w: w.add_histogram("h", []), ValueError, r"add_histogram\(\): argument 'values' must hold at least"),
    (lambda w: w.add_histogram("h", [1.0, float("nan")]), ValueError,
     r"add_histogram\(\): argument 'values' must be finite, got 1 NaN or infinite among 2"),
    (lambda w: w.add_histogram("h", [1.0], bins="nonsense"), ValueError, r"add_histogram\(\): argument 'bins'"),
    (lambda w: w.add_histogram("h", [1.0], max_bins=0), ValueError,
     r"add_histogram\(\): argument 'max_bins' must be an int >= 1, got int 0"),
    (lambda w: w.add_text("t", 5), TypeError, r"add_text\(\): argument 'text_string' must be a str, got int 5"),
    (lambda w: w.add_hparams({"a": [1]}, {}), TypeError, r"add_hparams\(\): argument 'hparam_dict\['a'\]'"),
    (lambda w: w.add_hparams({"a": 1}, {}, hparam_domain_discrete={"b": [1]}), ValueError,
     r"add_hparams\(\): argument 'hparam_domain_discrete' names 'b'"),
]


@pytest.mark.parametrize("call, error, message", BAD_CALLS)
def test_bad_input_names_the_method_and_argument(tmp_path, call, error, message):
    with SummaryWriter(tmp_path) as writer:
        with pytest.raises(error, match=message):
            call(writer)
        assert os.path.getsize(event_files(tmp_path)[0]) < 100   # nothing was logged beyond the header


@pytest.mark.parametrize("kwargs, message", [
    ({"max_queue": 0}, r"SummaryWriter\(\): argument 'max_queue' must be an int >= 1, got int 0"),
    ({"flush_secs": -1}, r"SummaryWriter\(\): argument 'flush_secs' must be a positive number"),
    ({"purge_step": "3"}, r"SummaryWriter\(\): argument 'purge_step' must be an int >= 0, got str '3'"),
    ({"log_dir": 5}, r"SummaryWriter\(\): argument 'log_dir' must be a path"),
])
def test_bad_constructor_arguments(tmp_path, kwargs, message):
    kwargs.setdefault("log_dir", str(tmp_path))
    with pytest.raises((TypeError, ValueError), match=message):
        SummaryWriter(**kwargs)


TRAIN_TAGS = ["train/loss", "train/lr", "train/tokens_per_s", "train/grad_norm", "val/loss",
              "memory/allocated_mib", "memory/max_allocated_mib"]


def test_oarlock_train_log_dir_writes_every_scalar(tmp_path, accumulator):
    from oarlock_train import command

    small = ["--steps", "6", "--eval-every", "3", "--batch-size", "2", "--seq-len", "16", "--warmup", "2",
             "--sample-len", "0", "--out", str(tmp_path / "out")]
    assert command.main([*small, "--log-dir", str(tmp_path / "tb")]) == 0
    with open(tmp_path / "out" / "trainer.json") as fh:
        history = json.load(fh)["history"]
    acc = accumulator(tmp_path / "tb")
    assert sorted(acc.Tags()["scalars"]) == sorted(TRAIN_TAGS)
    series = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in TRAIN_TAGS}
    for tag in TRAIN_TAGS:
        expected = [3, 6] if tag == "val/loss" else list(range(1, 7))
        assert [step for step, _ in series[tag]] == expected, tag
    assert [v for _, v in series["train/loss"]] == [float(np.float32(v)) for v in history["train"]]
    assert [v for _, v in series["val/loss"]] == [float(np.float32(v)) for _, v in history["valid"]]
    lrs = [v for _, v in series["train/lr"]]
    assert lrs[0] == 0.0 and lrs[2] == pytest.approx(6e-3) and lrs[2] > lrs[3] > lrs[5] > 6e-4  # warmup, cosine
    assert all(0 < v < 1e9 for _, v in series["train/tokens_per_s"])
    assert all(np.isfinite(v) and v > 0 for _, v in series["train/grad_norm"])
    assert all(0 < v <= peak for (_, v), (_, peak) in zip(series["memory/allocated_mib"],
                                                          series["memory/max_allocated_mib"]))
    (config,) = acc.Tensors("config/text_summary")
    assert b'"seq_len": 16' in config.tensor_proto.string_val[0]


def test_oarlock_train_grad_norm_is_the_clipped_norm():
    """The logged norm is the global norm of the gradients before clipping, as torch computes it."""
    from oarlock_train.corpus import build_corpus
    from oarlock_train.trainer import Trainer, TrainConfig

    cfg = TrainConfig(steps=2, batch_size=2, seq_len=16)
    trainer = Trainer(cfg, build_corpus(cfg.seq_len))
    trainer.train_step()
    assert trainer.grad_norm is None   # without --log-dir the norm is not computed
    trainer.measure_grad_norm = True
    seen = []
    original_step = trainer.optimizer.step

    def step():  # the gradients as the optimizer receives them, before it clips them
        grads = np.concatenate([p.grad.numpy().astype(np.float64).ravel() for p in trainer.model.parameters()
                                if p.grad is not None])
        seen.append(np.sqrt((grads ** 2).sum()))
        original_step()
    trainer.optimizer.step = step
    trainer.train_step()
    assert trainer.grad_norm == pytest.approx(seen[0], rel=1e-5)

