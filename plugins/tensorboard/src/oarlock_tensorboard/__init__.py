"""oarlock.utils.tensorboard: PyTorch's SummaryWriter, writing TensorBoard event files with no TensorFlow or
tensorboard package (those are needed only to view the files: `tensorboard --logdir DIR`).

writer.py      SummaryWriter: argument checks and the add_* methods
values.py      argument checks and conversion of Tensors, numpy arrays and numbers
histogram.py   histogram buckets (TensorFlow's default edges or numpy.histogram's)
messages.py    the Event and Summary messages; hparams.py the hparams plugin's messages
protobuf.py    the protobuf wire format; tfrecord.py the record framing; crc32c.py its checksum
event_file.py  one event file: naming, buffering, the flush thread
"""

from oarlock_tensorboard.writer import SummaryWriter

__all__ = ["SummaryWriter"]


def register_api(api):
    api.namespace("oarlock.utils.tensorboard", __doc__.split("\n\n")[0])
    api.export("oarlock.utils.tensorboard", "SummaryWriter", SummaryWriter)
