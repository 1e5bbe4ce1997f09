"""The worker's copy of what each call returned into the output buffer the parent reads (run_window's
``copy_out``). Its host work runs inside the parent's bracket (between the worker's end flags), so the checks are
kept to attribute reads, through references taken when the worker starts, before any submission is imported."""
from __future__ import annotations

import torch

_Tensor, _list = torch.Tensor, list
_f16 = torch.float16
_foreach_copy = torch._foreach_copy_


def _device_index(device: torch.device) -> int:
    """What ``Tensor.get_device()`` returns for a tensor on ``device`` (-1 on the CPU)."""
    if device.type != "cuda":
        return -1
    return device.index if device.index is not None else torch.cuda.current_device()


def plain(plan, out_views, copied: list[list[bool]], device: torch.device):
    """``copy_out(outputs)`` for a harness.plan.Plan: each call's plain tensors of the spec's dtype and shape on
    ``device`` go to their regions (``out_views[call][item]``); ``copied[call][item]`` records which."""
    single = plan.container == "tensor"
    expect = [(v.dtype, v.shape) for v in out_views[0]] if out_views else []
    where = _device_index(device)

    def copy_out(outputs):
        dst, src = [], []
        for j, out in enumerate(outputs):
            items = (out,) if single else out
            if (single and type(out) is not _Tensor) or (not single and (type(out) is not _list
                                                                        or len(out) != len(expect))):
                continue
            for i, o in enumerate(items):
                if type(o) is _Tensor and o.dtype is expect[i][0] and o.shape == expect[i][1] \
                        and o.get_device() == where:
                    dst.append(out_views[j][i])
                    src.append(o)
                    copied[j][i] = True
        if dst:
            _foreach_copy(dst, src)

    return copy_out


def sample_buffers(layout, views, copied: list[list[bool]], device: torch.device):
    """``copy_out(outputs)`` for a problem's own sample buffers (harness.problem.SampleBuffers): the plain fp16
    tensors of the layout's ``output_shapes`` on ``device`` that each call returned go to ``views.out[item][call]``;
    ``copied[call][item]`` records which."""
    expect = [torch.Size(shape) for shape in layout.output_shapes]
    items = len(expect)
    where = _device_index(device)

    def copy_out(outputs):
        dst, src = [], []
        for j, out in enumerate(outputs):
            if type(out) is not _list or len(out) != items:
                continue
            for g, o in enumerate(out):
                if type(o) is _Tensor and o.dtype is _f16 and o.shape == expect[g] and o.get_device() == where:
                    dst.append(views.out[g][j])
                    src.append(o)
                    copied[j][g] = True
        if dst:
            _foreach_copy(dst, src)

    return copy_out
