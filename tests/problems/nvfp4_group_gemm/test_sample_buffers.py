"""problems.nvfp4_group_gemm.sample_buffers: the sample layout reproduces input_t exactly, and the batched draw has the
official distribution."""
from __future__ import annotations

import pytest
import torch

from problems.nvfp4_group_gemm.sample_buffers import (
    ALIGN,
    E4M3FN_ONE,
    E4M3FN_TWO,
    Layout,
    Views,
    copy_plain,
    draw_official,
    reference_inputs,
    write_input,
)
from problems.nvfp4_group_gemm.formats import unblock
from problems.nvfp4_group_gemm.inputs import OFFICIAL_NIBBLE_MASK, generate_input
from problems.nvfp4_group_gemm.reference import ref_kernel
from problems.nvfp4_group_gemm.spec import Case, load_shapes

CASES = list(load_shapes("tests").cases[:4]) + [Case((4, 76), (128, 256), (64, 128), 2, 3)]


def _buffers(layout: Layout):
    return (torch.zeros(layout.device_bytes, dtype=torch.uint8), torch.zeros(layout.host_bytes, dtype=torch.uint8),
            torch.zeros(layout.output_bytes, dtype=torch.uint8))


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    return (x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride()
            and torch.equal(x.view(torch.uint8) if x.element_size() == 1 else x.view(torch.int16),
                            y.view(torch.uint8) if y.element_size() == 1 else y.view(torch.int16)))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.text())
def test_written_input_reads_back_identical(case):
    """write_input then inputs(): every tensor has the official dtype, shape, strides and bytes (padding too)."""
    layout = Layout.of(case, 3)
    views = Views(layout, *_buffers(layout))
    originals = [generate_input(case.m, case.n, case.k, case.g, s) for s in (5, 6, 7)]
    for j, x in enumerate(originals):
        write_input(views, j, x)
    for got, want in zip(views.inputs(), originals):
        for parts_got, parts_want in zip(got[:3], want[:3]):
            for tensors_got, tensors_want in zip(parts_got, parts_want):
                for t, w in zip(tensors_got, tensors_want):
                    assert _same(t, w)
        assert got[3] == want[3]


def test_layout_aligns_device_regions_and_packs_the_rest():
    case = Case((76, 4), (128, 256), (128, 64), 2, 0)
    layout = Layout.of(case, 2)
    g0, g1 = layout.groups
    for off in (g0.a, g0.b, g0.c, g0.sfa_r, g0.sfb_r, g1.a, layout.device_stride):
        assert off % ALIGN == 0
    # host: each group's sfa of both calls, then its sfb of both calls, ...: one contiguous block per operand
    assert (g0.sfa, g0.sfb, g1.sfa, g1.sfb) == (0, 2 * 76 * 8, 2 * (76 + 128) * 8, 2 * ((76 + 128) * 8 + 4 * 4))
    assert layout.host_bytes == 2 * ((76 + 128) * 8 + (4 + 256) * 4)
    assert (g0.out, g1.out, layout.output_stride) == (0, 76 * 128 * 2, 76 * 128 * 2 + 4 * 256 * 2)
    assert layout.device_bytes == 2 * layout.device_stride


def test_fast_draw_has_the_official_values_and_consistent_scales():
    case = Case((96, 40), (256, 128), (512, 256), 2, 0)
    layout = Layout.of(case, 4)
    views = Views(layout, *_buffers(layout))
    plain = draw_official(views, torch.Generator().manual_seed(1))
    copy_plain(views, plain)
    inputs = views.inputs()
    allowed = {v & OFFICIAL_NIBBLE_MASK for v in range(255)}
    seen_a = set()
    for j, (abc, sfs, sfs_r, _sizes) in enumerate(inputs):
        for g, ((a, b, c), (sfa, sfb), (ra, rb)) in enumerate(zip(abc, sfs, sfs_r)):
            m, n, k = case.m[g], case.n[g], case.k[g]
            for t in (a, b):
                assert set(t.view(torch.uint8).unique().tolist()) <= allowed
            seen_a.add(a.view(torch.uint8).flatten()[:64].numpy().tobytes())
            assert c.dtype == torch.float16 and 0.5 < float(c.float().std()) < 1.5
            for sf, r, rows, p in ((sfa, ra, m, plain[g][0]), (sfb, rb, n, plain[g][1])):
                assert set(sf.view(torch.uint8).unique().tolist()) == {E4M3FN_ONE, E4M3FN_TWO}
                assert torch.equal(unblock(r, rows, k // 16).view(torch.uint8), sf[:, :, 0].view(torch.uint8))
                assert torch.equal(p[j], sf[:, :, 0].view(torch.uint8))
                assert set(r.view(torch.uint8).unique().tolist()) == {E4M3FN_ONE, E4M3FN_TWO}  # padding too
    assert len(seen_a) == 4 * 2  # every call and group got its own data


def test_reference_inputs_use_the_device_copies_of_the_plain_scales():
    case = Case((64,), (128,), (256,), 1, 0)
    layout = Layout.of(case, 2)
    views = Views(layout, *_buffers(layout))
    plain = draw_official(views, torch.Generator().manual_seed(2))
    copy_plain(views, plain)
    for x, y in zip(reference_inputs(views, plain), views.inputs()):
        assert torch.equal(ref_kernel(x)[0].view(torch.int16), ref_kernel(y)[0].view(torch.int16))


def test_output_regions_are_fp16_views_per_call_and_group():
    case = Case((8, 4), (128, 256), (64, 64), 2, 0)
    layout = Layout.of(case, 2)
    dev, host, out = _buffers(layout)
    views = Views(layout, dev, host, out)
    views.outputs(1)[1].fill_(2.0)
    halves = out.view(torch.float16)
    start = (layout.output_stride + layout.groups[1].out) // 2
    assert views.outputs(1)[1].shape == (4, 256, 1)
    assert torch.equal(halves[start:start + 4 * 256], torch.full((4 * 256,), 2.0, dtype=torch.float16))
    assert int((halves != 0).sum()) == 4 * 256


def test_layout_rejects_zero_calls():
    with pytest.raises(ValueError, match="expected at least 1 call per sample, got 0"):
        Layout.of(CASES[0], 0)


def test_draw_into_earlier_plain_tensors_writes_them_and_returns_them():
    case = Case((40, 96), (128, 256), (256, 128), 2, 0)
    layout = Layout.of(case, 3)
    views = Views(layout, *_buffers(layout))
    first = draw_official(views, torch.Generator().manual_seed(3))
    again = draw_official(views, torch.Generator().manual_seed(4), first)
    assert all(x is y for pair_a, pair_b in zip(first, again) for x, y in zip(pair_a, pair_b))
    copy_plain(views, again)
    for j, (_abc, sfs, _r, _sizes) in enumerate(views.inputs()):
        for g, (sfa, sfb) in enumerate(sfs):
            assert torch.equal(again[g][0][j], sfa[:, :, 0].view(torch.uint8))
            assert torch.equal(again[g][1][j], sfb[:, :, 0].view(torch.uint8))
    fresh = draw_official(Views(layout, *_buffers(layout)), torch.Generator().manual_seed(4))
    assert all(torch.equal(x, y) for pa, pb in zip(again, fresh) for x, y in zip(pa, pb))


def test_redraw_without_c_keeps_c_and_redraws_the_rest():
    """fill_c=False (a caller refilling the same buffers) leaves every c as drawn before and draws everything
    else anew; the scales, drawn one bit each, are 1.0 and 2.0 about half the time each."""
    case = Case((40, 96), (128, 256), (256, 512), 2, 0)
    layout = Layout.of(case, 3)
    views = Views(layout, *_buffers(layout))
    first = [[x.clone() for x in pair] for pair in draw_official(views, torch.Generator().manual_seed(5))]
    c0, a0, b0 = ([t.clone() for t in ts] for ts in (views.c, views.a, views.b))
    again = draw_official(views, torch.Generator().manual_seed(6), fill_c=False)
    assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(views.c, c0))
    assert not any(torch.equal(x, y) for x, y in zip(views.a + views.b, a0 + b0))
    assert not any(torch.equal(x, y) for pa, pb in zip(first, again) for x, y in zip(pa, pb))
    codes = torch.cat([x.reshape(-1) for pair in again for x in pair] + [r.reshape(-1) for r in views.sfa_r + views.sfb_r])
    assert set(codes.unique().tolist()) == {E4M3FN_ONE, E4M3FN_TWO}
    share = float((codes == E4M3FN_TWO).float().mean())
    assert 0.47 < share < 0.53, share
