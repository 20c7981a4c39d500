"""oarlock-dlpack: oarlock.utils.dlpack (Paddle's to_dlpack / from_dlpack), zero-copy DLPack exchange with
numpy, PyTorch, CuPy and any other DLPack library, for every dtype oarlock has (bfloat16 and float8
included, which numpy's own DLPack refuses: see capsule.py)."""

from oarlock_dlpack.exchange import DLDeviceType, from_dlpack, to_dlpack

__all__ = ["DLDeviceType", "from_dlpack", "to_dlpack"]
