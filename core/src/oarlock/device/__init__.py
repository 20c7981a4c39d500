"""oarlock.device: places, the backend interface, the default device, memory statistics, streams and
events, and Paddle's paddle.device.cuda names.

The package's modules:

- places: Place (interned; compare with `is`), CPUPlace/CUDAPlace/CustomPlace, device-string parsing
  ("cpu", "gpu:1", "cuda:0" -- "cuda" is an alias of "gpu"), the default device (set_device,
  get_device, device_guard) and which devices exist (get_all_device_type, device_count, ...).
- backend: what a device plugin supplies (Backend), the synchronous HostStream/HostEvent a device
  without asynchronous queues inherits, DeviceProperties, HostMemoryCounter (a host pool's byte counts),
  CompletedTransfer (what the default asynchronous host copies return: a copy already done).
- memory: memory_allocated, max_memory_allocated, memory_reserved, ..., empty_cache,
  get_device_properties, for any device; host_memory_allocated and its peak count the device's host pool.
- streams: Stream, Event, current_stream, set_stream, stream_guard, synchronize; generic, they
  delegate to the place's backend, so code written for a GPU runs unchanged on the CPU.
- cuda: Paddle's paddle.device.cuda names over the "gpu" device type (`oarlock.device.cuda`).

Every public name is importable from `oarlock.device` itself (plugins do `from oarlock.device import
Backend`). The device types come from plugins: "cpu", "gpu" and every custom device.
"""

from oarlock.device.backend import (Backend, CompletedTransfer, DeviceProperties, HostEvent, HostMemoryCounter,
                                    HostStream)
from oarlock.device.memory import (empty_cache, get_device_properties, host_memory_allocated,
                                   max_host_memory_allocated, max_memory_allocated, max_memory_reserved,
                                   memory_allocated, memory_reserved, reset_max_host_memory_allocated,
                                   reset_max_memory_allocated, reset_max_memory_reserved)
from oarlock.device.places import (CPUPlace, CUDAPlace, CustomPlace, Place, default_place, device_count,
                                   device_guard, get_all_custom_device_type, get_all_device_type,
                                   get_available_custom_device, get_available_device, get_cudnn_version,
                                   get_device, is_compiled_with_cinn, is_compiled_with_cuda,
                                   is_compiled_with_custom_device, is_compiled_with_distribute,
                                   is_compiled_with_ipu, is_compiled_with_rocm, is_compiled_with_xpu, set_device,
                                   split_device_string)
from oarlock.device.streams import Event, Stream, current_stream, set_stream, stream_guard, synchronize

from oarlock.device import cuda  # noqa: E402,I001  (after the names it builds on)

__all__ = [
    "Place", "Backend", "CompletedTransfer", "HostMemoryCounter", "set_device", "get_device", "CPUPlace",
    "CUDAPlace", "CustomPlace",
    "get_all_device_type", "get_all_custom_device_type", "get_available_custom_device", "get_available_device",
    "is_compiled_with_custom_device", "is_compiled_with_cuda", "is_compiled_with_xpu", "is_compiled_with_rocm",
    "is_compiled_with_ipu", "is_compiled_with_cinn", "is_compiled_with_distribute", "get_cudnn_version",
    "device_count", "device_guard",
    "memory_allocated", "max_memory_allocated", "reset_max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_max_memory_reserved", "host_memory_allocated", "max_host_memory_allocated",
    "reset_max_host_memory_allocated", "empty_cache", "synchronize", "get_device_properties",
    "DeviceProperties", "Stream", "Event", "current_stream", "set_stream", "stream_guard", "HostStream",
    "HostEvent", "cuda",
]
