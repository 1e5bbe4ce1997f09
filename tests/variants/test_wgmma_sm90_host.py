"""submissions/wgmma_sm90 host logic on real values (no GPU): the entry file and the constants shared with
kernel.cu, the A pre-pass's scratch and blocks, and the tile plan over every official shape."""
from __future__ import annotations

import ctypes
import re

import pytest


from ._load import variant_dir
from ._wgmma_sm90 import BENCHMARK_CASES, KERNEL_CU, TEST_CASES, VARIANT, _constexpr, host


# --- the constants shared with kernel.cu (the entry file's headers: test_sm90_headers.py) -----------------------

def test_host_constants_mirror_kernel_cu():
    assert _constexpr("MAX_GROUPS") == host.MAX_GROUPS == 16
    assert (_constexpr("BN"), _constexpr("BK"), _constexpr("THREADS")) == (host.BN, host.BK, host.THREADS)
    assert _constexpr("BM_MAX") == host.BM_MAX == host.BM_CLASSES[-1]
    assert "t.ws = ks.z >= 0 ? p.ws + (size_t)ks.z * BN * BM_MAX : nullptr;" in KERNEL_CU.read_text()
    assert "t.part = ks.w & 0xff;\n  t.parts = ks.w >> 8;" in KERNEL_CU.read_text()
    assert host.PARTIAL_FLOATS == 128 * 128
    assert _constexpr("DEC_BUFS") == host.DEC_BUFS
    assert re.search(r"#define WG_STAGES (\d+)", KERNEL_CU.read_text()).group(1) == str(host.STAGES)
    # raw stage: B rows, A rows (32 bytes each), B's scale atom, two of A's atoms
    assert host.STAGE_BYTES == 128 * 32 + 128 * 32 + 512 + 1024 == 9728
    assert host.SMEM_BYTES == 3 * 128 * 128 + 4 * 9728 + 1024 == 89088
    assert host.PAIRED_SMEM_BYTES == 2 * 88064 + 1024 <= 227 * 1024  # Hopper's most per CTA
    # predecoded path: 5 fp16 A buffers (A copied 3 steps ahead), 4 raw stages of B rows and B's atom
    assert re.search(r"#define WG_PRE_THREADS (\d+)", KERNEL_CU.read_text()).group(1) == str(host.PRE_THREADS) == "256"
    assert "constexpr int PRE_THREADS = WG_PRE_THREADS;" in KERNEL_CU.read_text()
    assert "constexpr int PRE_AHEAD = STAGES - 1;" in KERNEL_CU.read_text()
    assert "constexpr int PRE_ABUFS = PRE_AHEAD + 2;" in KERNEL_CU.read_text()
    assert (host.PRE_AHEAD, host.PRE_ABUFS, host.PRE_STAGE_BYTES) == (3, 5, 128 * 32 + 512)
    assert host.PRE_SMEM_BYTES == 5 * 128 * 128 + 4 * 4608 + 1024 == 101376 <= 113 * 1024  # two CTAs per SM
    assert host.PRE_PAIRED_SMEM_BYTES == 2 * 100352 + 1024 == host.MAX_SMEM_BYTES <= 227 * 1024
    for name in (host.KERNEL_NAME, host.KERNEL_PRE_NAME, host.PREPASS_NAME):
        assert f'extern "C" __global__ void __launch_bounds__' in KERNEL_CU.read_text() and f" {name}(" in \
            KERNEL_CU.read_text()
    assert "__launch_bounds__(2 * THREADS, 1)" in KERNEL_CU.read_text()


def test_params_block_matches_the_kernel_struct_layout():
    p = host.Params
    assert ctypes.sizeof(p) == 1072
    assert [getattr(p, f).offset for f in ("addr", "tiles", "ws", "cnt", "m", "n", "k", "mpad", "predecode",
                                           "pre", "flags", "epoch")] == [0, 640, 648, 656, 664, 728, 792, 856, 920,
                                                                        928, 1056, 1064]
    src = KERNEL_CU.read_text()
    struct = re.search(r"struct Params \{(.*?)\};", src, re.S).group(1)
    assert [ln.strip() for ln in struct.strip().splitlines()] == [
        "uint64_t addr[5 * MAX_GROUPS];", "const int4* tiles;", "float* ws;", "int* cnt;", "int m[MAX_GROUPS];",
        "int n[MAX_GROUPS];", "int k[MAX_GROUPS];", "int mpad[MAX_GROUPS];", "int predecode;",
        "uint64_t pre[MAX_GROUPS];", "int* flags;", "int epoch;"]
    sizes = [(96, 256, 512, 1), (40, 128, 256, 1)]
    block = host.make_params(sizes, tiles=0x1000, ws=0x2000, cnt=0x3000)
    assert (block.tiles, block.ws, block.cnt) == (0x1000, 0x2000, 0x3000)
    assert (list(block.m[:3]), list(block.n[:3]), list(block.k[:3])) == ([96, 40, 0], [256, 128, 0], [512, 256, 0])
    assert list(block.addr) == [0] * 80
    assert (list(block.mpad[:3]), block.predecode, list(block.pre)) == ([96, 64, 0], 0, [0] * 16)
    pre = host.make_params(sizes, tiles=0x1000, scratch=0x100000)
    # group 0: 96 rows x 8 steps x 128 bytes = 98304; group 1 starts there (1024-aligned)
    assert (pre.predecode, list(pre.pre[:3])) == (1, [0x100000, 0x100000 + 98304, 0])
    s8 = host.make_params(sizes, tiles=0x1000, scratch=0x100000, flags=0x4000)
    # the int8 scratch: 96 rows x 8 steps x 64 bytes = 49152 for group 0
    assert (s8.flags, s8.epoch, list(s8.pre[:2])) == (0x4000, 0, [0x100000, 0x100000 + 49152])


def test_epoch_counts_up_and_never_meets_the_zero_flags():
    assert [host.next_epoch(e) for e in (0, 1, 41, 2**31 - 2, 2**31 - 1)] == [1, 2, 42, 2**31 - 1, 1]


def test_int8_path_on_by_default_and_its_scratch_halves(monkeypatch):
    assert all(host.choose_s8(c.problem_sizes, 132) for c in BENCHMARK_CASES)
    monkeypatch.setattr(host, "S8_OVERRIDE", False)
    assert not host.choose_s8(BENCHMARK_CASES[0].problem_sizes, 132)
    sizes = BENCHMARK_CASES[0].problem_sizes
    assert 2 * host.scratch_offsets(sizes, host.S8_ROW_BYTES)[1] == host.scratch_offsets(sizes)[1]
    assert (host.KERNEL_S8_NAME, host.PREPASS_S8_NAME) == ("fp4_group_gemm_sm90_s8", "fp4_predecode_a_s8")
    src = KERNEL_CU.read_text()
    assert 'extern "C" __global__ void __launch_bounds__(2 * THREADS, 1) fp4_group_gemm_sm90_s8(' in src
    assert 'extern "C" __global__ void __launch_bounds__(PRE_THREADS) fp4_predecode_a_s8(' in src
    assert "static_assert((S8_STAGES + 1) * S8_ABUF_BYTES + S8_STAGES * PRE_STAGE_BYTES <= SMEM_BYTES" in src
    assert "#define WG_S8_STAGES 4" in src and "#define WG_S8_PAIRS 1" in src and host.S8_PAIRS
    # s8_pair_loop's 8 A buffers of 128 x 64 bytes and 6 raw slots of B (128 rows x 32 bytes, a 512-byte atom)
    assert host.S8_REGION == 8 * 128 * 64 + 6 * 4608 == 93184 > host.SMEM_BYTES - 1024
    assert "constexpr int S8P_SMEM_BYTES = S8P_ABUFS * S8_ABUF_BYTES + S8P_SLOTS * PRE_STAGE_BYTES;" in src
    assert (host.S8_SMEM_BYTES, host.S8_PAIRED_SMEM_BYTES) == (94208, 187392) and host.MAX_SMEM_BYTES == 201728


# --- the A pre-pass: scratch, blocks, rule ---------------------------------------------------------------------

def test_scratch_holds_each_groups_tile_rows_per_k_step_1024_aligned():
    assert [host.predecode_rows(m) for m in (1, 40, 64, 72, 80, 176, 200, 248, 384)] == \
        [64, 64, 64, 96, 96, 192, 224, 256, 384]
    sizes = [(40, 128, 128, 1), (200, 256, 320, 1), (8, 64, 64, 1)]
    offsets, total = host.scratch_offsets(sizes)
    # 64 x 2 x 128 = 16384; 224 x 5 x 128 = 143360; 64 x 1 x 128 = 8192
    assert (offsets, total) == ([0, 16384, 16384 + 143360], 16384 + 143360 + 8192)
    assert all(o % 1024 == 0 for o in offsets)
    big = host.scratch_offsets(BENCHMARK_CASES[0].problem_sizes)[1]
    assert big == sum(host.predecode_rows(m) for m in BENCHMARK_CASES[0].m) * 112 * 128 < 32 << 20


def test_predecode_follows_steps_per_slot(monkeypatch):
    """The pre-pass where the grid runs at least 20 K steps per CTA slot: the first three benchmarks, where the H200
    measured it faster, and not g2_n4096_k1536, where it measured slower."""
    assert host.MIN_PREDECODE_STEPS_PER_SLOT == 20
    # K steps of the (split) tiles per CTA slot, 264 on 132 SMs: 149.3, 88.2, 29.1, 11.6
    assert [host.choose_predecode(c.problem_sizes, 132) for c in BENCHMARK_CASES] == [True, True, True, False]
    assert host.choose_predecode(BENCHMARK_CASES[0].problem_sizes, 528) is True  # 37.3 per slot
    assert host.choose_predecode(BENCHMARK_CASES[0].problem_sizes, 1056) is False  # 18.7
    monkeypatch.setattr(host, "PREDECODE_OVERRIDE", True)
    assert host.choose_predecode(TEST_CASES[0].problem_sizes, 132) is True
    monkeypatch.setattr(host, "PREDECODE_OVERRIDE", False)
    assert host.choose_predecode(BENCHMARK_CASES[0].problem_sizes, 132) is False


def test_pdl_for_the_main_kernel_of_every_plan(monkeypatch):
    """Programmatic dependent launch for the main kernel whether or not a pre-pass comes first (the fp16 pre-pass
    itself never, the int8 one by its own rule: test_pre_pdl_rule_takes_the_grids_of_at_least_20_steps_per_slot_...)."""
    assert [host.choose_pdl(c.problem_sizes, 132) for c in BENCHMARK_CASES] == [True] * 4
    monkeypatch.setattr(host, "PDL_OVERRIDE", False)
    assert host.choose_pdl(BENCHMARK_CASES[3].problem_sizes, 132) is False


def test_prepass_blocks_cover_one_thread_per_row_and_k_step():
    sizes = [(40, 128, 128, 1), (200, 256, 320, 1)]
    assert host.prepass_blocks(sizes) == 1 + 5  # 128 and 1120 threads
    for case in BENCHMARK_CASES:
        need = sum(host.predecode_rows(m) * (k // host.BK) for m, _, k, _ in case.problem_sizes)
        assert need <= host.prepass_blocks(case.problem_sizes) * host.PRE_THREADS < need + 16 * host.PRE_THREADS


# --- tile plan ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("m, widths", [(40, (64,)), (64, (64,)), (72, (96,)), (80, (96,)), (96, (96,)),
                                       (128, (128,)), (148, (96, 64)), (160, (96, 64)), (176, (128, 64)),
                                       (196, (128, 96)), (248, (128, 128)), (320, (128, 128, 64)),
                                       (384, (128, 128, 128))])
def test_cover_m_picks_the_cheapest_widths(m, widths):
    assert host.cover_m(m) == widths


def test_cover_m_pads_less_than_one_small_tile():
    for m in range(4, 1025, 4):
        widths = host.cover_m(m)
        assert set(widths) <= set(host.BM_CLASSES) and 0 <= sum(widths) - m < 64, (m, widths)


SPLITS = [host.NO_SPLIT, host.Split(2, 0), host.Split(3, 0), host.Split(3, 5), host.Split(4, 264)]


@pytest.mark.parametrize("split", SPLITS, ids=lambda s: f"{s.parts}:{s.full}")
@pytest.mark.parametrize("case", TEST_CASES + BENCHMARK_CASES, ids=lambda c: c.name or c.text())
def test_plan_covers_every_output_and_k_step_once_most_expensive_first(case, split):
    tiles = host.plan_tiles(case.problem_sizes, split)
    whole = host.plan_tiles(case.problem_sizes)
    head = tiles[:min(split.full, len(whole))]
    assert head == whole[:len(head)] and all(t[6] == -1 for t in head)  # the most expensive tiles, whole
    for section in (head, tiles[len(head):]):
        costs = [steps * (bm + 64) for (_, _, _, bm, _, steps, *_) in section]
        assert costs == sorted(costs, reverse=True)
    cover: dict = {}
    slots: dict = {}
    for i, (g, m0, n0, bm, k0, steps, slot, part, parts) in enumerate(tiles):
        cover.setdefault((g, n0), {}).setdefault((m0, bm), []).append((k0, steps))
        if slot >= 0:
            assert i >= len(head) and parts == split.parts
            slots.setdefault(slot, []).append((g, m0, n0, bm, part, steps))
        else:
            assert (part, parts) == (0, 1)
    for g, (m, n, k, _) in enumerate(case.problem_sizes):
        for n0 in range(0, n, host.BN):
            by_m = cover[(g, n0)]
            starts = sorted(by_m)
            assert starts[0][0] == 0 and all(a[0] + a[1] == b[0] for a, b in zip(starts, starts[1:]))
            assert starts[-1][0] < m <= starts[-1][0] + starts[-1][1]
            for ranges in by_m.values():
                ranges.sort()
                assert ranges[0][0] == 0 and sum(s for _, s in ranges) == k // host.BK
                assert all(a[0] + a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
                assert len(ranges) in ((1,) if split.parts == 1 or k // host.BK < split.parts else (1, split.parts))
    whole_after_head = sum(1 for t in whole[len(head):] if t[5] >= split.parts) if split.parts > 1 else 0
    assert len(slots) == whole_after_head
    for members in slots.values():
        assert sorted(x[4] for x in members) == list(range(split.parts))
        assert len({x[:4] for x in members}) == 1
        steps = [x[5] for x in sorted(members, key=lambda x: x[4])]
        assert steps == sorted(steps, reverse=True) and steps[0] - steps[-1] <= 1


def test_tile_table_gives_each_slot_its_parts_consecutive_partials():
    # one group, M = 64, N = 384 (three tiles of 128 rows), K = 320 (5 steps): the first tile whole, the other two
    # in three parts of 2, 2 and 1 steps; slot 0 owns partials 0-2, slot 1 partials 3-5.
    tiles = host.plan_tiles([(64, 384, 320, 1)], host.Split(3, 1))
    assert tiles == [(0, 0, 0, 64, 0, 5, -1, 0, 1),
                     (0, 0, 128, 64, 0, 2, 0, 0, 3), (0, 0, 128, 64, 2, 2, 0, 1, 3),
                     (0, 0, 256, 64, 0, 2, 1, 0, 3), (0, 0, 256, 64, 2, 2, 1, 1, 3),
                     (0, 0, 128, 64, 4, 1, 0, 2, 3), (0, 0, 256, 64, 4, 1, 1, 2, 3)]
    assert host.tile_table(tiles) == [0, 0, 0, 64, 0, 5, -1, 1 << 8,
                                      0, 0, 128, 64, 0, 2, 0, 0 | 3 << 8, 0, 0, 128, 64, 2, 2, 0, 1 | 3 << 8,
                                      0, 0, 256, 64, 0, 2, 3, 0 | 3 << 8, 0, 0, 256, 64, 2, 2, 3, 1 | 3 << 8,
                                      0, 0, 128, 64, 4, 1, 0, 2 | 3 << 8, 0, 0, 256, 64, 4, 1, 3, 2 | 3 << 8]
    assert host.split_partials(tiles) == 6


def test_split_only_for_the_first_benchmark_and_never_for_tests():
    """352 tiles on 264 CTA slots: 264 whole, the last 88 in 264 // 88 = 3 parts (37 or 38 K steps each)."""
    assert [host.choose_split(c.problem_sizes, 132) for c in BENCHMARK_CASES] == [host.Split(3, 264)] + [
        host.NO_SPLIT] * 3
    assert {host.choose_split(c.problem_sizes, 132) for c in TEST_CASES} == {host.NO_SPLIT}
    assert [len(host.plan_tiles(c.problem_sizes, host.choose_split(c.problem_sizes, 132))) for c in
            BENCHMARK_CASES] == [264 + 3 * 88, 728, 120, 128]


def test_split_parts_keep_min_split_steps_and_at_most_max_parts():
    assert (host.MIN_SPLIT_STEPS, host.MAX_SPLIT_PARTS) == (32, 4)
    # 10 tiles of one K step on 4 slots (2 SMs): 2 left, slots // left = 2, but a step cannot be split
    assert host.choose_split([(64, 128 * 10, 64, 1)], 2) == host.NO_SPLIT
    # 300 tiles on 264 slots: 36 left, 264 // 36 = 7 parts, capped at 4; K = 8192 (128 steps) keeps 32 per part
    assert host.choose_split([(64, 128 * 300, 8192, 1)], 132) == host.Split(4, 264)
    # K = 6144 (96 steps): 4 parts would be 24 steps, 3 are 32
    assert host.choose_split([(64, 128 * 300, 6144, 1)], 132) == host.Split(3, 264)
    # K = 4096 (64 steps): halves of 32; K = 4032 (63 steps): no part of 32 fits
    assert host.choose_split([(64, 128 * 300, 4096, 1)], 132) == host.Split(2, 264)
    assert host.choose_split([(64, 128 * 300, 4032, 1)], 132) == host.NO_SPLIT
    # a last wave more than half full (400 tiles: 136 left) is not split
    assert host.choose_split([(64, 128 * 400, 8192, 1)], 132) == host.NO_SPLIT


def test_paired_ctas_for_grids_of_one_cta_per_sm_with_two_k_steps():
    assert [host.choose_paired(c.problem_sizes, 132) for c in BENCHMARK_CASES] == [False, False, True, True]
    assert {host.choose_paired(c.problem_sizes, 132) for c in TEST_CASES} == {True}
    assert host.choose_paired([(128, 128, 64, 1)], 132) is False  # one K step: nothing to share
    assert host.choose_paired([(128, 128 * 133, 128, 1)], 132) is False  # 133 tiles
