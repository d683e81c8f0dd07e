"""Programmatic dependent launch (PDL, Hopper and later) for the decode step's kernels.

A decode step is ~380 kernels per token, most of them a few microseconds long (the 7B at 64 rows: 8.4 ms a step).
Launched as usual, each kernel starts only once the one before it has drained its last blocks. Launched as a
*dependent*, it is scheduled while that kernel drains, and waits (``griddepcontrol.wait``) only where it first reads
memory; a kernel that starts its dependents early (``griddepcontrol.launch_dependents``) lets them in sooner. The
wait returns once the kernel before has completed and its writes are visible, so the results are those of the usual
launch, bit for bit.

kvprune's Triton kernels (``gemv``, ``decode_attention``, ``column_write``) take ``PDL`` as a compile-time flag and
are launched with ``launch_pdl`` where ``dependent_launch`` says so (``launch_options``); the compiled step asks
Inductor for the same in its own kernels (``inductor_patches``).
"""

from __future__ import annotations

import functools

import torch

from .triton_support import tl

#: dependent launches where the device takes them (a switch for measuring the step without them)
ENABLED = True
#: the first compute capability with griddepcontrol (Hopper)
FIRST_CAPABILITY = 9


@functools.lru_cache(maxsize=None)
def _capable(device: torch.device) -> bool:
    if device.type != "cuda" or tl is None:
        return False
    return hasattr(tl.extra.cuda, "gdc_wait") and torch.cuda.get_device_capability(device)[0] >= FIRST_CAPABILITY


def dependent_launch(device: torch.device) -> bool:
    """Whether kernels on ``device`` are launched as dependents of the kernel before them (CUDA, Hopper or later,
    a Triton with griddepcontrol, ``ENABLED``)."""
    return ENABLED and _capable(torch.device(device))


def launch_options(device: torch.device) -> dict:
    """What a launch of one of kvprune's kernels on ``device`` adds: its ``PDL`` flag and Triton's ``launch_pdl``
    where ``dependent_launch`` says so, nothing elsewhere."""
    return dict(PDL=True, launch_pdl=True) if dependent_launch(device) else {}


def inductor_patches(device: torch.device) -> dict:
    """Inductor settings that make the kernels it generates dependent launches too (none where its version has no
    such setting or the device does not take them)."""
    import torch._inductor.config as inductor_config

    if not hasattr(inductor_config.triton, "enable_pdl"):
        return {}
    return {"triton.enable_pdl": dependent_launch(device)}
