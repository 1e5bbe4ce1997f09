"""The inputs' canaries (harness.parent.samples): until the parent fixes them inside its bracket, a few secret bytes
of every call's and group's A and B are wrong in the buffer the worker reads, so outputs computed before the
window are wrong; after ``fix`` the buffer holds exactly the drawn inputs."""
from __future__ import annotations

import torch

from harness.parent.samples import CANARIES, SharedSet, ArenaSample
from problems.nvfp4_group_gemm.sample_buffers import Layout, Views
from problems.nvfp4_group_gemm.check import compare
from problems.nvfp4_group_gemm.reference import ref_kernel
from problems.nvfp4_group_gemm.spec import Case

CASE = Case((64, 40), (128, 256), (256, 512), 2, 7)


def _sample():
    shared = SharedSet(torch.device("cpu"))
    layout = Layout.of(CASE, 3)
    shared.grow(layout)
    sample = ArenaSample(CASE, 3, "official", torch.device("cpu"), shared)
    sample.prepare([11, 12, 13], False)
    return shared, layout, sample


def test_every_call_and_group_has_wrong_bytes_in_a_and_b_until_fixed():
    shared, layout, sample = _sample()
    dev, private = shared.buffers["device"].tensor[:layout.device_bytes], sample._private
    differ = (dev != private).nonzero().flatten().tolist()
    assert 0 < len(differ) <= 3 * 2 * 2 * CANARIES
    for j in range(3):
        for g in layout.groups:
            for off, size in ((g.a, g.m * g.k // 2), (g.b, g.n * g.k // 2)):
                start = j * layout.device_stride + off
                assert any(start <= p < start + size for p in differ), (j, g.m, off)
    for p in differ:  # both nibbles' magnitudes differ: both e2m1 values change
        x = int(dev[p]) ^ int(private[p])
        assert x & 0x07 and x & 0x70
    sample.fix()
    assert torch.equal(dev, private)


def test_outputs_computed_before_the_fix_fail_the_check_and_after_it_pass():
    shared, layout, sample = _sample()
    host = shared.buffers["host"].tensor[sample.host_offset:]
    views = Views(layout, shared.buffers["device"].tensor, host, shared.buffers["output"].tensor)
    expected = Views(layout, sample._private, host, sample._expected)
    early = ref_kernel(views.inputs()[0])
    assert not all(compare(o.view(torch.float16).squeeze(-1), e.squeeze(-1)).ok
                   for o, e in zip(early, expected.outputs(0)))
    sample.fix()
    late = ref_kernel(views.inputs()[0])
    assert all(torch.equal(o, e) for o, e in zip(late, expected.outputs(0)))


def test_each_prepare_draws_new_places():
    shared, layout, sample = _sample()
    first = set((shared.buffers["device"].tensor[:layout.device_bytes] != sample._private).nonzero().flatten().tolist())
    sample.prepare([11, 12, 13], False)
    second = set((shared.buffers["device"].tensor[:layout.device_bytes] != sample._private).nonzero().flatten().tolist())
    assert first != second
