"""The TensorBoard messages that event files hold, encoded with protobuf.py. Field numbers are those of
tensorboard/compat/proto/{event,summary,tensor,tensor_shape}.proto (the same as TensorFlow's):

    Event           wall_time=1 double, step=2 int64, file_version=3 string, summary=5, session_log=7
    SessionLog      status=1 enum (START=1)
    Summary         value=1 repeated Summary.Value
    Summary.Value   tag=1, simple_value=2 float, histo=5 HistogramProto, tensor=8 TensorProto, metadata=9
    SummaryMetadata plugin_data=1 {plugin_name=1 string, content=2 bytes}
    HistogramProto  min=1, max=2, num=3, sum=4, sum_squares=5 (doubles), bucket_limit=6, bucket=7 (packed doubles)
    TensorProto     dtype=1 enum, tensor_shape=2 {dim=2 {size=1}}, float_val=5, double_val=6, string_val=8

Each function returns the encoded bytes of one message; Summary.Value builders take the tag first.
"""

from __future__ import annotations

from oarlock_tensorboard.protobuf import (
    bytes_field, double_field, float_field, int_field, packed_doubles_field, packed_floats_field)

FILE_VERSION = "brain.Event:2"  # the first event of every file; readers check it
_SESSION_START = 1
_DT_FLOAT, _DT_DOUBLE, _DT_STRING = 1, 2, 7


def event(wall_time: float, step: int | None = None, *, file_version: str | None = None,
          summary: bytes | None = None, session_start: bool = False) -> bytes:
    """An Event. session_start=True adds SessionLog(status=START): TensorBoard then hides the events of
    earlier sessions in the same directory whose step is >= this event's (SummaryWriter's purge_step)."""
    parts = [double_field(1, wall_time)]
    if step:
        parts.append(int_field(2, step))
    if file_version is not None:
        parts.append(bytes_field(3, file_version))
    if summary is not None:
        parts.append(bytes_field(5, summary))
    if session_start:
        parts.append(bytes_field(7, int_field(1, _SESSION_START)))
    return b"".join(parts)


def summary(*values: bytes) -> bytes:
    """A Summary of encoded Summary.Value messages."""
    return b"".join(bytes_field(1, value) for value in values)


def metadata(plugin_name: str, content: bytes = b"") -> bytes:
    """SummaryMetadata naming the TensorBoard plugin (dashboard) that displays the value."""
    plugin_data = bytes_field(1, plugin_name) + (bytes_field(2, content) if content else b"")
    return bytes_field(1, plugin_data)


def scalar_value(tag: str, value: float) -> bytes:
    """A scalar in the old style, simple_value (float32), which every TensorBoard version reads."""
    return bytes_field(1, tag) + float_field(2, value)


def tensor_scalar_value(tag: str, value: float, double_precision: bool) -> bytes:
    """A scalar in the new style: a 0-d float (or double) TensorProto tagged for the scalars plugin."""
    if double_precision:
        tensor = int_field(1, _DT_DOUBLE) + packed_doubles_field(6, [value])
    else:
        tensor = int_field(1, _DT_FLOAT) + packed_floats_field(5, [value])
    return bytes_field(1, tag) + bytes_field(9, metadata("scalars")) + bytes_field(8, tensor)


def histogram_value(tag: str, hist) -> bytes:
    """A HistogramProto from a histogram.Histogram."""
    histo = b"".join((double_field(1, hist.min), double_field(2, hist.max), double_field(3, hist.num),
                      double_field(4, hist.sum), double_field(5, hist.sum_squares),
                      packed_doubles_field(6, hist.bucket_limit), packed_doubles_field(7, hist.bucket)))
    return bytes_field(1, tag) + bytes_field(5, histo)


def text_value(tag: str, text: str) -> bytes:
    """Text for the text plugin: a string tensor of shape [1] (TextPluginData version 0 encodes empty)."""
    shape = bytes_field(2, int_field(1, 1))
    tensor = int_field(1, _DT_STRING) + bytes_field(2, shape) + bytes_field(8, text)
    return bytes_field(1, tag) + bytes_field(9, metadata("text")) + bytes_field(8, tensor)


def plugin_value(tag: str, plugin_name: str, content: bytes) -> bytes:
    """A value that is only metadata: the plugin reads everything from `content` (hparams does)."""
    return bytes_field(1, tag) + bytes_field(9, metadata(plugin_name, content))
