"""submissions/wgmma_sm90: input checks, and the C++ per-call path (built with torch's extension tools, launching
through a recording stand-in for cuLaunchKernel / cuLaunchKernelEx; no GPU)."""
from __future__ import annotations

import ctypes

import pytest
import torch

from problems.nvfp4_group_gemm.inputs import generate_input

from ._wgmma_sm90 import BENCHMARK_CASES, host, sub


# --- input checks ---------------------------------------------------------------------------------------------

def _data(m=(96, 40), n=(256, 128), k=(512, 256)):
    return generate_input(list(m), list(n), list(k), len(m), seed=5, device="cpu")


@pytest.mark.parametrize("sizes, message", [
    ([(128, 128, 96, 1)], r"group 0 K: expected a positive multiple of 64, got 96"),
    ([(128, 128, 256, 2)], r"group 0 L: expected 1, got 2"),
    ([(0, 128, 256, 1)], r"group 0 M, N: expected >= 1, got \(0, 128\)"),
    ([(64, 64, 64, 1)] * 17, r"group count: expected 1\.\.16, got 17"),
])
def test_check_sizes_names_expected_and_got(sizes, message):
    with pytest.raises(ValueError, match=message):
        host.check_sizes(sizes)


def test_validate_refuses_cpu_tensors_and_names_the_device():
    with pytest.raises(ValueError, match=r"wgmma_sm90: device: expected cuda, got cpu"):
        host.validate(_data())


def _mutated(kind: str):
    abc, sf, sf_r, sizes = _data()
    (a, b, c), (sfa, sfb) = abc[1], sf_r[1]
    if kind == "a dtype":
        a = a.view(torch.uint8).to(torch.int16)
    elif kind == "c strides":
        c = torch.empty(c.shape[1], c.shape[0], 1, dtype=c.dtype).transpose(0, 1)
    elif kind == "b shape":
        b = b[:-1]
    elif kind == "sfa layout":
        sfa = sfa.contiguous().view(sfa.shape)
    abc, sf_r = list(abc), list(sf_r)
    abc[1], sf_r[1] = (a, b, c), (sfa, sfb)
    return abc, sf, sf_r, sizes


@pytest.mark.parametrize("kind, message", [
    ("a dtype", r"group 1 a dtype: expected torch.float4_e2m1fn_x2, got torch.int16"),
    ("c strides", r"group 1 c strides \(row-major\): expected \(128, 1\), got \(1, 40\)"),
    ("b shape", r"group 1 b shape: expected \(128, 128, 1\), got \(127, 128, 1\)"),
    ("sfa layout", r"group 1 sfa strides"),
])
def test_validate_names_what_is_wrong_before_the_device(kind, message, monkeypatch):
    # Pretend the tensors are on a GPU so the layout checks run on this machine.
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 0)))
    with pytest.raises(ValueError, match=message):
        host.validate(_mutated(kind))
    host.validate(_data())  # the unmutated input passes every check


def test_custom_kernel_refuses_cpu_inputs_before_building_anything():
    with pytest.raises(ValueError, match=r"device: expected cuda, got cpu"):
        sub.custom_kernel(_data())
    assert sub._FUNCS == {} and sub._PLANS == {}


# --- the C++ per-call path (built with torch's extension tools; no GPU) --------------------------------------

_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p)


class _Recorder:
    """A stand-in for cuLaunchKernel that records its arguments and returns ``result``."""

    def __init__(self, result: int = 0):
        self.calls, self.result = [], result
        self.fn = _LAUNCH(self._launch)
        self.address = ctypes.cast(self.fn, ctypes.c_void_p).value

    def _launch(self, *args):
        self.calls.append(args)
        return self.result


@pytest.fixture(scope="module")
def fast_module():
    return host.load_fast_call()


def _fast(module, params, recorder, grid=77, pre_func=0, pre_grid=0, ex=None, epoch=False, pre_pdl=False):
    return module.FastCall(ctypes.addressof(params), host.MAX_GROUPS, 0xF00, grid, host.THREADS, host.SMEM_BYTES,
                           pre_func, pre_grid, host.PRE_THREADS, recorder.address, ex.address if ex else 0,
                           ctypes.addressof(params) + host.Params.epoch.offset if epoch else 0, pre_pdl)


_LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(sub._LaunchConfig), ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p)


class _ExRecorder:
    """A stand-in for cuLaunchKernelEx that records (func, grid, block, smem, the config's queue, attributes,
    kparams[0], extra) and returns 0."""

    def __init__(self):
        self.calls = []
        self.fn = _LAUNCH_EX(self._launch)
        self.address = ctypes.cast(self.fn, ctypes.c_void_p).value

    def _launch(self, config, func, kparams, extra):
        c = config.contents
        attrs = [(c.attrs[i].id, c.attrs[i].value[0]) for i in range(c.num_attrs)]
        self.calls.append((func, list(c.grid), list(c.block), c.smem, c.queue, attrs,
                           ctypes.cast(kparams, ctypes.POINTER(ctypes.c_void_p))[0], extra))
        return 0


def test_launch_structs_match_cuda_h():
    # cuda.h: CUlaunchAttribute is an int id padded to 8 bytes and a 64-byte union; CUlaunchConfig 7 uints, then
    # the queue, the attribute pointer and their count (fast_call.cpp static_asserts the same sizes)
    assert ctypes.sizeof(sub._LaunchAttribute) == 72 and sub._LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(sub._LaunchConfig) == 56
    assert (sub._LaunchConfig.queue.offset, sub._LaunchConfig.attrs.offset, sub._LaunchConfig.num_attrs.offset) \
        == (32, 40, 48)


def test_fast_call_launches_with_the_addresses_of_each_call(fast_module):
    abc, _, sf_r, sizes = _data()
    params, rec = host.make_params(sizes, 0), _Recorder()
    fast = _fast(fast_module, params, rec)
    assert fast.call(abc, sf_r) == 1 and rec.calls == []  # nothing remembered yet: validate first
    fast.remember(abc, sf_r)
    assert fast.call(abc, sf_r) == 0
    func, *dims, queue, kparams, extra = rec.calls[-1]
    assert (func, dims, queue, extra) == (0xF00, [77, 1, 1, 256, 1, 1, 89088], None, None)  # the default queue
    assert ctypes.cast(kparams, ctypes.POINTER(ctypes.c_void_p))[0] == ctypes.addressof(params)
    for g, ((a, b, c), (sfa, sfb)) in enumerate(zip(abc, sf_r)):
        assert [params.addr[kind * 16 + g] for kind in range(5)] == [t.data_ptr() for t in (a, b, c, sfa, sfb)]
    other = _data()  # new tensors, same layout: launched with their addresses
    assert fast.call(other[0], other[2]) == 0 and params.addr[16 + 1] == other[0][1][1].data_ptr()


def test_fast_call_run_returns_the_c_tensors_themselves_and_reads_lists_or_tuples(fast_module):
    abc, _, sf_r, sizes = _data()
    params, rec = host.make_params(sizes, 0), _Recorder()
    fast = _fast(fast_module, params, rec)
    fast.remember(abc, sf_r)
    out = fast.run(abc, sf_r)
    assert type(out) is list and [id(c) for c in out] == [id(c) for (_, _, c) in abc] and len(rec.calls) == 1
    as_lists = [list(t) for t in abc], [list(t) for t in sf_r]
    assert fast.run(*as_lists)[1] is abc[1][2] and len(rec.calls) == 2
    short = [abc[0]], sf_r  # a group missing
    not_tensors = [(abc[0][0], abc[0][1], "c"), abc[1]], sf_r
    not_sequences = abc, {0: sf_r[0], 1: sf_r[1]}
    for bad in (short, not_tensors, not_sequences, (None, None)):
        assert fast.run(*bad) == 1
    assert len(rec.calls) == 2  # none of them launched


def test_fast_call_launches_the_pre_pass_first_on_the_default_queue_with_the_same_block(fast_module):
    abc, _, sf_r, sizes = _data()
    params, rec = host.make_params(sizes, 0, scratch=0x100000), _Recorder()
    fast = _fast(fast_module, params, rec, pre_func=0xE00, pre_grid=6)
    fast.remember(abc, sf_r)
    assert fast.call(abc, sf_r) == 0 and len(rec.calls) == 2
    (pf, *pdims, pqueue, pk, _), (mf, *mdims, mqueue, mk, _) = rec.calls
    assert (pf, pdims, pqueue) == (0xE00, [6, 1, 1, 256, 1, 1, 0], None)
    assert (mf, mdims, mqueue) == (0xF00, [77, 1, 1, 256, 1, 1, 89088], None)
    for kp in (pk, mk):
        assert ctypes.cast(kp, ctypes.POINTER(ctypes.c_void_p))[0] == ctypes.addressof(params)
    # FastCall holds raw pointers: the parameter block and the recorder's callback must outlive it
    params2, rec2 = host.make_params(sizes, 0), _Recorder(result=700)
    failing = _fast(fast_module, params2, rec2, pre_func=0xE00, pre_grid=6)
    failing.remember(abc, sf_r)
    assert failing.call(abc, sf_r) == 1700 and len(rec2.calls) == 1  # the main kernel is not launched


def test_fast_call_counts_the_epoch_once_per_launched_call(fast_module):
    abc, _, sf_r, sizes = _data()
    params, rec = host.make_params(sizes, 0, scratch=0x100000, flags=0x4000), _Recorder()
    fast = _fast(fast_module, params, rec, pre_func=0xE00, pre_grid=6, epoch=True)
    assert fast.call(abc, sf_r) == 1 and params.epoch == 0  # handed back: the Python path counts it
    fast.remember(abc, sf_r)
    assert [fast.call(abc, sf_r) for _ in range(3)] == [0, 0, 0] and params.epoch == 3
    params.epoch = 2**31 - 1
    assert fast.call(abc, sf_r) == 0 and params.epoch == host.next_epoch(2**31 - 1) == 1
    plain = host.make_params(sizes, 0)
    fast = _fast(fast_module, plain, _Recorder())
    fast.remember(abc, sf_r)
    assert fast.call(abc, sf_r) == 0 and plain.epoch == 0  # no int8 path: no epoch


def test_fast_call_with_pdl_launches_only_the_main_kernel_through_cuLaunchKernelEx(fast_module):
    # the pre-pass rewrites the scratch the previous call's main kernel reads: a plain launch, after it in full
    abc, _, sf_r, sizes = _data()
    params, rec, ex = host.make_params(sizes, 0, scratch=0x100000), _Recorder(), _ExRecorder()
    fast = _fast(fast_module, params, rec, pre_func=0xE00, pre_grid=6, ex=ex)
    fast.remember(abc, sf_r)
    assert fast.call(abc, sf_r) == 0
    addr = ctypes.addressof(params)
    (pf, *pdims, pqueue, pk, pextra), = rec.calls
    assert (pf, pdims, pqueue, ctypes.cast(pk, ctypes.POINTER(ctypes.c_void_p))[0], pextra) == (
        0xE00, [6, 1, 1, 256, 1, 1, 0], None, addr, None)
    pdl = [(6, 1)]  # programmatic dependent launch, allowed
    assert ex.calls == [(0xF00, [77, 1, 1], [256, 1, 1], 89088, None, pdl, addr, None)]


def test_fast_call_with_pre_pdl_launches_both_kernels_through_cuLaunchKernelEx_pre_pass_first(fast_module):
    abc, _, sf_r, sizes = _data()
    params, rec, ex = host.make_params(sizes, 0, scratch=0x100000), _Recorder(), _ExRecorder()
    fast = _fast(fast_module, params, rec, pre_func=0xE00, pre_grid=6, ex=ex, pre_pdl=True)
    fast.remember(abc, sf_r)
    assert fast.call(abc, sf_r) == 0 and rec.calls == []
    addr, pdl = ctypes.addressof(params), [(6, 1)]
    assert ex.calls == [(0xE00, [6, 1, 1], [256, 1, 1], 0, None, pdl, addr, None),
                        (0xF00, [77, 1, 1], [256, 1, 1], 89088, None, pdl, addr, None)]
    with pytest.raises(ValueError, match="pre_pdl needs launch_ex and a pre-pass"):
        _fast(fast_module, params, rec, pre_func=0xE00, pre_grid=6, pre_pdl=True)  # no cuLaunchKernelEx


def test_pre_pdl_rule_takes_the_grids_of_at_least_20_steps_per_slot_and_its_override_wins():
    # the benchmarks run 149, 88, 29 and 12 K steps per CTA slot on 132 SMs
    per_slot = [host.steps_per_slot(c.problem_sizes, 132) for c in BENCHMARK_CASES]
    assert [round(x) for x in per_slot] == [149, 88, 29, 12]
    assert [host.choose_pre_pdl(c.problem_sizes, 132) for c in BENCHMARK_CASES] == [True, True, True, False]
    try:
        host.PRE_PDL_OVERRIDE = True
        assert host.choose_pre_pdl(BENCHMARK_CASES[3].problem_sizes, 132) is True
    finally:
        host.PRE_PDL_OVERRIDE = None


@pytest.mark.parametrize("kind", ["a dtype", "c strides", "b shape", "sfa layout"])
def test_fast_call_hands_any_other_layout_back_without_launching(fast_module, kind):
    abc, _, sf_r, sizes = _data()
    rec = _Recorder()
    params = host.make_params(sizes, 0)
    fast = _fast(fast_module, params, rec)
    fast.remember(abc, sf_r)
    bad = _mutated(kind)
    assert fast.call(bad[0], bad[2]) == 1 and rec.calls == []


def test_fast_call_refuses_misaligned_addresses_and_reports_launch_errors(fast_module):
    abc, _, sf_r, sizes = _data()
    # FastCall holds raw pointers: the parameter blocks and the recorders' callbacks must outlive it (temporaries
    # here were freed before the call, an intermittent abort)
    keep = [host.make_params(sizes, 0), _Recorder(), host.make_params(sizes, 0), _Recorder(result=700)]
    fast_ok = _fast(fast_module, keep[0], keep[1])
    fast_ok.remember(abc, sf_r)
    a = abc[0][0]
    shifted = torch.empty(a.numel() + 16, dtype=torch.uint8)[1:].as_strided(tuple(a.shape), a.stride()).view(a.dtype)
    assert shifted.data_ptr() % 16 != 0 and shifted.stride() == a.stride()
    moved = [(shifted, abc[0][1], abc[0][2]), abc[1]]
    assert fast_ok.call(moved, sf_r) == 1
    failing = _fast(fast_module, keep[2], keep[3])
    failing.remember(abc, sf_r)
    assert failing.call(abc, sf_r) == 1700
