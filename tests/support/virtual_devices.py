"""Virtual CUDA devices on a CPU: what a model split over two GPUs would do to device placement.

Under ``VirtualDevices()``, a CPU tensor can carry a virtual device (``on(tensor, 1)``): its
``.device`` then reads ``cuda:1``, moves (``.to``, ``.cuda``, ``.cpu``, ``pin_memory``) and factories
given ``device=cuda:k`` set it, every result inherits it, and any operation that mixes tensors of two
devices raises ``CrossDevice``, as CUDA would: a CPU tensor may index a device tensor and 0-dim CPU
tensors may take part in arithmetic, nothing else may cross. The data never leaves the CPU, so
results can be compared with an ordinary run.

Only the arguments of each call made under the mode are checked: a Python function such as
``F.normalize`` is checked where the caller calls it, not inside.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

ATTRIBUTE = "_virtual_device"
MOVES = {"to", "cuda", "cpu", "pin_memory", "copy_"}
INDEXING = {"__getitem__", "__setitem__", "index_put_", "index_put"}


class CrossDevice(RuntimeError):
    """An operation mixed tensors on two (virtual) devices."""


def on(tensor, index: int | None):
    """``tensor`` (or every tensor in a tuple or list), marked as living on virtual cuda:``index``
    (None: the CPU)."""
    if isinstance(tensor, (tuple, list)):
        return type(tensor)(on(t, index) for t in tensor)
    if isinstance(tensor, torch.Tensor):
        setattr(tensor, ATTRIBUTE, index)
    return tensor


def device_of(tensor: torch.Tensor) -> int | None:
    return getattr(tensor, ATTRIBUTE, None)


def _target(value) -> tuple[bool, int | None]:
    """(is a device, its virtual index) for a ``device=``-like value."""
    if isinstance(value, torch.device) or (isinstance(value, str) and value.split(":")[0] in ("cpu", "cuda")):
        device = torch.device(value)
        return True, (device.index or 0) if device.type == "cuda" else None
    return False, None


class VirtualDevices(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name == "__get__":  # tensor properties
            prop, tensor = getattr(func, "__self__", None), args[0]
            index = device_of(tensor)
            if index is not None and prop is torch.Tensor.device:
                return torch.device("cuda", index)
            if index is not None and prop is torch.Tensor.is_cuda:
                return True
            value = func(*args, **kwargs)
            return on(value, index) if isinstance(value, torch.Tensor) else value  # .T, .mT, ...: the same device
        if name in MOVES:
            return self._move(func, name, args, kwargs)
        target = None
        if "device" in kwargs:
            is_device, target = _target(kwargs["device"])
            if is_device:
                kwargs["device"] = "cpu"
            devices = None
        else:
            devices = self._devices(name, args, kwargs)
        result = func(*args, **kwargs)
        index = target if "device" in kwargs else (next(iter(devices - {None}), None) if devices else None)
        for tensor in tree_flatten(result)[0]:
            if isinstance(tensor, torch.Tensor) and not name.startswith("__set"):
                on(tensor, index)
        return result

    def _devices(self, name: str, args, kwargs) -> set:
        """The devices of a call's tensors; raises when they mix as CUDA would refuse."""
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if name in INDEXING and tensors:
            indexed, others = tensors[0], tensors[1:]
            where = device_of(indexed)
            for other in others:  # indices (and values) on the CPU or on the indexed tensor's device
                if device_of(other) not in (None, where) or (where is None and device_of(other) is not None):
                    raise CrossDevice(f"{name}: a tensor on {_name(device_of(other))} indexes one on {_name(where)}")
            return {where}
        devices = {device_of(t) for t in tensors if device_of(t) is not None or t.dim() > 0}
        if len(devices) > 1:
            raise CrossDevice(f"{name} mixes tensors on {' and '.join(sorted(map(_name, devices)))}")
        return devices

    def _move(self, func, name: str, args, kwargs):
        tensor = args[0]
        if name == "copy_":  # copying between devices is allowed
            return func(*args, **kwargs)
        if name == "pin_memory":
            return tensor  # needs CUDA; a no-op for what is checked here
        index, rest = device_of(tensor), list(args[1:])
        if name == "cpu":
            index = None
        elif name == "cuda":
            target = rest.pop(0) if rest else kwargs.pop("device", 0)
            index = _target(target)[1] if not isinstance(target, int) else target
        for position, value in enumerate(rest):
            if isinstance(value, torch.Tensor):  # .to(other): other's device and dtype
                index, rest[position] = device_of(value), value.dtype
                continue
            is_device, virtual = _target(value)
            if is_device:
                index, rest[position] = virtual, "cpu"
        if "device" in kwargs:
            index, kwargs["device"] = _target(kwargs["device"])[1], "cpu"
        kwargs.pop("non_blocking", None)
        moved = func(tensor, *rest, **kwargs) if name != "cuda" else tensor
        return on(moved.view_as(moved), index)  # a new tensor object: the original keeps its device


def _name(index: int | None) -> str:
    return "cpu" if index is None else f"cuda:{index}"
