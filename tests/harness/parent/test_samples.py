"""harness.parent.samples: each sample's expected outputs are the reference of the inputs the worker is given,
sample after sample (views and plain-scale tensors are built once per ArenaSample and reused)."""
from __future__ import annotations

import torch

from harness.parent.samples import ArenaSample, SharedSet
from problems.nvfp4_group_gemm.sample_buffers import Layout, Views
from problems.nvfp4_group_gemm.reference import ref_kernel
from problems.nvfp4_group_gemm.spec import Case


def _expected_match_the_shared_inputs(sample: ArenaSample, shared: SharedSet) -> None:
    sample.fix()  # the canaries, fixed inside the parent's bracket before the worker's calls read the inputs
    b = shared.buffers
    given = Views(sample.layout, b["device"].tensor, b["host"].tensor[sample.host_offset:])
    _got, want = sample.views()
    for j, x in enumerate(given.inputs()):
        for g, out in enumerate(ref_kernel(x)):
            assert torch.equal(want.out[g][j].view(torch.int16), out.view(torch.int16))


def test_each_sample_is_judged_against_its_own_inputs():
    case = Case((40, 96), (128, 256), (256, 128), 2, 0)
    cpu = torch.device("cpu")
    shared = SharedSet(cpu)
    shared.grow(Layout.of(case, 3))
    sample = ArenaSample(case, 3, "official", cpu, shared)
    seen = []
    for seed in (11, 12):
        sample.prepare([seed, seed + 100, seed + 200], official_order=False)
        _expected_match_the_shared_inputs(sample, shared)
        seen.append(sample.expected().clone())
    assert not torch.equal(seen[0], seen[1])
    shared.close()


def test_a_sample_prepared_unpublished_leaves_the_workers_buffer_as_it_was_until_published():
    """A sample prepared ahead (publish=False) has its reference computed but its operands only in the parent's
    memory: the worker's device buffer still holds the previous sample's bytes until ``publish()``."""
    case = Case((40, 96), (128, 256), (256, 128), 2, 0)
    cpu = torch.device("cpu")
    shared = SharedSet(cpu)
    shared.grow(Layout.of(case, 3))
    current, ahead = ArenaSample(case, 3, "official", cpu, shared), ArenaSample(case, 3, "official", cpu, shared, 1)
    current.prepare([11, 111, 211], official_order=False)
    before = shared.buffers["device"].tensor.clone()
    ahead.prepare([12, 112, 212], official_order=False, publish=False)
    assert torch.equal(shared.buffers["device"].tensor, before)
    ahead.publish()
    assert not torch.equal(shared.buffers["device"].tensor, before)
    _expected_match_the_shared_inputs(ahead, shared)
    shared.close()
