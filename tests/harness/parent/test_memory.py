"""Memory estimates from case sizes (harness.parent.memory): exact byte counts for a small case, and a refusal that names
the case, the memory it needs and the memory available."""
from __future__ import annotations

import pytest

from harness.parent import memory
from harness.parent.memory import Need, case_need, check_fits, fmt_gib, input_bytes, output_bytes, reference_bytes
from problems.nvfp4_group_gemm.spec import Case

ONE = Case((128,), (128,), (256,), 1, 1)


def test_byte_counts_of_one_small_case():
    # a, b: 128 rows x 128 bytes; c: 128 x 128 fp16; sfa, sfb: 128 x 16; blocked copies: 128 rows x 16 columns each
    assert input_bytes(ONE) == 2 * 128 * 128 + 128 * 128 * 2 + 2 * 128 * 16 + 2 * 128 * 16 == 73_728
    assert output_bytes(ONE) == 32_768
    # fp64: A and B decoded beside a temporary each (2 x 256 rows x 256 x 8), product and rounding (3 x 128^2 x 8)
    assert reference_bytes(ONE) == 2 * 256 * 256 * 8 + 3 * 128 * 128 * 8 == 1_441_792
    assert case_need(ONE, 1) == Need(device=2 * (73_728 + 32_768) + 32_768 + 1_441_792, host=2 * 32_768)
    fifteen_two_workers = case_need(ONE, 15, workers=2)
    assert fifteen_two_workers == Need(device=3 * 15 * 106_496 + 15 * 32_768 + 1_441_792, host=4 * 15 * 32_768)


def test_padding_of_the_blocked_scales_is_counted():
    odd = Case((4,), (132,), (64,), 1, 1)  # rows pad to 128 and 256, 4 scale columns stay 4
    plain = (4 + 132) * 32 + 4 * 132 * 2 + (4 + 132) * 4
    assert input_bytes(odd) == plain + (128 + 256) * 4


def test_a_case_that_cannot_fit_is_refused_naming_it(monkeypatch):
    monkeypatch.setattr(memory, "host_available", lambda: 1024**2)  # 1 MiB free
    with pytest.raises(MemoryError) as info:
        check_fits([Case((4,), (128,), (64,), 1, 1), ONE], 1, 1, cuda=False)
    assert str(info.value) == ("case m: [128]; n: [128]; k: [256]; g: 1; seed: 1 needs about 2 MiB of CPU memory "
                               "(1 input a request, with their outputs and the exact reference, in fp4bench and 1 "
                               "worker); 1 MiB available")
    check_fits([Case((4,), (128,), (64,), 1, 1)], 1, 1, cuda=False)  # 0.2 MiB: fits


def test_on_a_gpu_device_and_host_are_checked_apart(monkeypatch):
    named = Case((128,), (128,), (256,), 1, 1, "tiny")
    monkeypatch.setattr(memory, "host_available", lambda: 1024**3)
    monkeypatch.setattr(memory, "cuda_available", lambda: 1024**2)
    monkeypatch.setattr(memory, "device_total_bytes", lambda: 80 * 1024**3)
    with pytest.raises(MemoryError, match=r"^case tiny \(m: \[128\].*\) needs about 40.0 GiB of GPU memory .*, "
                                          r"and the L2 clear of 40.0 GiB\); 1 MiB available$"):
        check_fits([named], 1, 1, cuda=True)
    monkeypatch.setattr(memory, "cuda_available", lambda: 64 * 1024**3)
    monkeypatch.setattr(memory, "host_available", lambda: 1000)
    with pytest.raises(MemoryError, match=r"needs about 1 MiB of CPU memory .*; 1 MiB available$"):
        check_fits([named], 1, 1, cuda=True)


def test_unknown_free_memory_refuses_nothing(monkeypatch):
    monkeypatch.setattr(memory, "host_available", lambda: None)
    check_fits([Case((128,), (10**8,), (256,), 1, 1)], 15, 2, cuda=False)


def test_host_memory_is_read_from_the_system():
    free = memory.host_available()
    assert free is None or free > 0


def test_sizes_read_in_binary_units():
    assert (fmt_gib(3 * 1024**3), fmt_gib(1.5 * 1024**3), fmt_gib(512 * 1024**2), fmt_gib(1)) == \
        ("3.0 GiB", "1.5 GiB", "512 MiB", "1 MiB")


@pytest.mark.gpu
def test_on_a_gpu_the_free_memory_comes_from_the_device():
    import torch

    free = memory.cuda_available()
    assert 0 < free <= torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    with pytest.raises(MemoryError, match=r"needs about \d+\.\d GiB of GPU memory .*; \d+\.\d GiB available$"):
        check_fits([Case((128,), (10**8,), (256,), 1, 1)], 1, 1, cuda=True)


def test_the_l2_clear_is_the_official_loops_and_at_most_half_the_gpu():
    """reference-kernels: each problem's task.yml names its eval.py; gemv's (eval.py) clears with the shared
    utils.py's (1024, 1024, 1024) float32 fill, the others' (eval_better_bench.py, eval_better_bench_grouped_gemm.py)
    with clear_l2_cache_large, (16000, 1024, 1024) float32; on an 80 GiB GPU that is cut to 40 GiB, with a note."""
    h200 = 150_000_000_000
    got = {p: memory.l2_clear_bytes(p, h200) for p in ("nvfp4_group_gemm", "nvfp4_gemv", "nvfp4_gemm",
                                                        "nvfp4_dual_gemm")}
    assert got == {"nvfp4_group_gemm": (16000 * 4 * 1024**2, ""), "nvfp4_gemv": (4 * 1024**3, ""),
                   "nvfp4_gemm": (16000 * 4 * 1024**2, ""), "nvfp4_dual_gemm": (16000 * 4 * 1024**2, "")}
    assert memory.l2_clear_bytes("nvfp4_gemm", 80 * 1024**3) == (40 * 1024**3, (
        "L2 clear: 40.0 GiB before each sample, half this GPU's memory (the official loop of nvfp4_gemm writes "
        "62.5 GiB)"))


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_the_parents_clear_is_sized_for_its_problem():
    from harness.parent.session import Session
    from harness.parent.registry import resolve
    from harness.parent.settings import Settings

    sessions = {p: Session(resolve("torch_reference"), Settings(), problem=p) for p in ("nvfp4_group_gemm",
                                                                                          "nvfp4_gemv")}
    sizes = {p: s.bracket.clear.bytes for p, s in sessions.items()}
    assert sizes == {"nvfp4_group_gemm": 16000 * 4 * 1024**2, "nvfp4_gemv": 4 * 1024**3}
    other_side = Session(resolve("torch_reference"), Settings(), problem="nvfp4_group_gemm")  # compare's B
    assert other_side.bracket.clear is sessions["nvfp4_group_gemm"].bracket.clear
