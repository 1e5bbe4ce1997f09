"""Where a problem's inputs and outputs live in the sample buffers, for problems without an arena of their own.

Both sides read this: the parent lays ``calls`` drawn inputs out in its buffers (harness.parent.plain_samples), the
worker rebuilds them as views and copies each call's outputs into their regions. The plan travels in ``Run.plan`` as
JSON. An input is a nest of tuples and lists whose leaves are tensors (or plain values); each tensor is the whole
storage it views, copied byte for byte to an ALIGN-aligned region, and rebuilt with the same sizes, strides and
storage offset (so permuted and blocked views keep the official generator's strides). CPU tensors go to the host
buffer, the others to the device buffer; call ``j``'s regions sit at ``j * stride`` in each. Outputs are packed
one region per tensor of the problem's OutputSpec, contiguous, call ``j``'s at ``j * out_stride``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: Byte alignment of every region (kernels may load 16-byte vectors or use TMA).
ALIGN = 256
#: The host slot's size is a multiple of this (the worker checks Run.host_offset against it).
HOST_SLOT_ALIGN = 4096


def up(x: int, to: int = ALIGN) -> int:
    """``x`` rounded up to a multiple of ``to``."""
    return -(-x // to) * to


@dataclass(frozen=True)
class TensorPlace:
    """One input tensor: ``where`` ``device`` or ``host``, ``offset`` (bytes, call 0) and ``nbytes`` of its
    storage's region, ``dtype`` as ``str(torch.dtype)``, ``shape``, ``stride`` and ``storage_offset`` (elements)."""

    where: str
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int


@dataclass(frozen=True)
class Plan:
    """A sample's layout: ``calls`` inputs, per-call strides of the device and host regions (bytes), the input's
    ``tree`` (``["t", i]`` tensor i, ``["tuple", [...]]``, ``["list", [...]]``, ``["v", value]``), its tensors,
    the output ``container`` (``tensor`` or ``list``) and ``outputs`` as (offset, dtype, shape) per tensor."""

    calls: int
    device_stride: int
    host_stride: int
    tree: Any
    tensors: tuple[TensorPlace, ...]
    container: str
    outputs: tuple[tuple[int, str, tuple[int, ...]], ...]
    out_stride: int

    @property
    def device_bytes(self) -> int:
        return max(self.calls * self.device_stride, ALIGN)

    @property
    def host_slot_bytes(self) -> int:
        return up(max(self.calls * self.host_stride, 1), HOST_SLOT_ALIGN)

    @property
    def output_bytes(self) -> int:
        return max(self.calls * self.out_stride, ALIGN)

    def to_json(self) -> str:
        return json.dumps({"calls": self.calls, "device_stride": self.device_stride, "host_stride": self.host_stride,
                           "tree": self.tree, "container": self.container, "out_stride": self.out_stride,
                           "tensors": [[t.where, t.offset, t.nbytes, t.dtype, list(t.shape), list(t.stride),
                                        t.storage_offset] for t in self.tensors],
                           "outputs": [[o, d, list(s)] for o, d, s in self.outputs]})

    @staticmethod
    def from_json(text: str) -> "Plan":
        """Inverse of ``to_json``. Raises ValueError (KeyError, TypeError) for a malformed plan."""
        d = json.loads(text)
        tensors = tuple(TensorPlace(w, int(o), int(n), str(dt), tuple(sh), tuple(st), int(so))
                        for w, o, n, dt, sh, st, so in d["tensors"])
        if any(t.where not in ("device", "host") for t in tensors):
            raise ValueError("a tensor's place must be 'device' or 'host'")
        return Plan(int(d["calls"]), int(d["device_stride"]), int(d["host_stride"]), d["tree"], tensors,
                    str(d["container"]), tuple((int(o), str(dt), tuple(sh)) for o, dt, sh in d["outputs"]),
                    int(d["out_stride"]))


def torch_dtype(name: str):
    """``"torch.float16"`` -> torch.float16. Raises ValueError for another name."""
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a torch dtype: {name!r}")
    return dtype


def tensor_view(plan: Plan, i: int, call: int, device_buf, host_buf):
    """Input tensor ``i`` of call ``call``: a view of ``device_buf`` / ``host_buf`` (flat uint8 tensors) with the
    plan's dtype, sizes, strides and storage offset."""
    t = plan.tensors[i]
    buf, stride = (device_buf, plan.device_stride) if t.where == "device" else (host_buf, plan.host_stride)
    start = call * stride + t.offset
    region = buf[start:start + t.nbytes].view(torch_dtype(t.dtype))
    return region.as_strided(t.shape, t.stride, region.storage_offset() + t.storage_offset)


def build(plan: Plan, tree, call: int, device_buf, host_buf):
    """Call ``call``'s input (``tree`` of the plan) as views of the buffers."""
    kind, body = tree
    if kind == "t":
        return tensor_view(plan, body, call, device_buf, host_buf)
    if kind == "v":
        return body
    items = [build(plan, x, call, device_buf, host_buf) for x in body]
    return tuple(items) if kind == "tuple" else items


def output_views(plan: Plan, call: int, out_buf) -> list:
    """Call ``call``'s output regions of ``out_buf`` (a flat uint8 tensor) as tensors of the spec's dtype and
    shape."""
    views = []
    for offset, dtype, shape in plan.outputs:
        dt = torch_dtype(dtype)
        n = 1
        for s in shape:
            n *= s
        start = call * plan.out_stride + offset
        views.append(out_buf[start:start + n * dt.itemsize].view(dt).view(shape))
    return views
