"""submissions/wgmma_sm90: a model of kernel.cu's predecoded pipelines (pre_loop / PrePipe::step and the int8
pair pipeline), run for every step count and checked against the lines of kernel.cu it mirrors (no GPU)."""
from __future__ import annotations

import pytest

from ._wgmma_sm90 import KERNEL_CU, host


# --- the predecoded pipeline's ring discipline (a model of kernel.cu pre_loop / PrePipe::step) -------------------

def _pre_pipeline_model(steps: int, stages: int, s8: bool = False) -> None:
    """Run pre_loop's schedule for one pipeline of ``steps`` K steps (``s8``: the int8 path's prologue, B's groups
    first and then A's, as issued around the wait for the pre-pass) and assert, at every point, what its comments
    claim: A of step s has landed (its cp.async group waited for) before the barrier that precedes step s's wgmma;
    B of step s + 1 has landed before it is decoded; a copy only overwrites an A buffer whose wgmmas every
    warpgroup finished before the previous barrier (step s - 2 or older) and a raw slot already decoded; each
    step's A and B is copied once; no copy is in flight when the epilogue reuses the buffers."""
    ahead, abufs = stages - 1, stages + 1
    groups: list[list] = []
    landed: set = set()
    a_owner: dict = {}
    b_owner: dict = {}
    loaded: list = []
    barrier = -1  # index of the last barrier passed: prologue = -1, step s ends with barrier s

    def wait(n):
        for g in groups[:max(len(groups) - n, 0)]:
            landed.update(g)

    def load_a(j, slot):
        prev = a_owner.get(slot)
        assert prev is None or prev + 1 <= barrier, (j, slot, prev, barrier)  # every warpgroup done with prev
        a_owner[slot] = j
        loaded.append(("A", j))
        return ("A", j)

    def load_b(j, slot):
        prev = b_owner.get(slot)
        assert prev is None or prev - 1 <= barrier, (j, slot, prev, barrier)  # prev decoded before a barrier
        b_owner[slot] = j
        loaded.append(("B", j))
        return ("B", j)

    def decode_b(j, slot):
        assert ("B", j) in landed and b_owner[slot] == j, j

    # prologue
    if s8:
        groups += [[load_b(i, i)] if i < steps else [] for i in range(2)]
        for i in range(stages):
            groups.append(([load_b(i, i)] if 2 <= i < steps else []) + ([load_a(i, i)] if i < min(ahead, steps)
                                                                         else []))
    else:
        for i in range(stages):
            g = []
            if i < steps:
                g.append(load_b(i, i))
            if i < ahead and i < steps:
                g.append(load_a(i, i))
            groups.append(g)
    wait(stages - 2)
    decode_b(0, 0)
    ready_a = {j for k, j in landed if k == "A"}  # as of the prologue barrier
    barrier = -1

    def step(s, steady):
        nonlocal barrier, ready_a
        assert s in ready_a and a_owner[s % abufs] == s, s  # wgmma of step s reads A buffer s % abufs
        if not steady and s + 1 >= steps:
            return
        g = []
        if steady or s + stages < steps:
            g.append(load_b(s + stages, s % stages))
        if steady or s + ahead < steps:
            g.append(load_a(s + ahead, (s + ahead) % abufs))
        groups.append(g)
        decode_b(s + 1, (s + 1) % stages)
        wait(stages - 2)
        ready_a = {j for k, j in landed if k == "A"}
        barrier = s

    s = 0
    while s + 1 + stages < steps:
        step(s, True)
        step(s + 1, True)
        s += 2
    while s < steps:
        step(s, False)
        if s + 1 < steps:
            step(s + 1, False)
        s += 2
    assert sorted(loaded) == sorted([("A", j) for j in range(steps)] + [("B", j) for j in range(steps)])
    assert all(all(x in landed for x in g) for g in groups), "a copy in flight at the epilogue"


@pytest.mark.parametrize("stages", [3, 4, 6])
@pytest.mark.parametrize("s8", [False, True])
def test_predecoded_pipeline_ring_discipline_holds_for_every_step_count(stages, s8):
    for steps in range(1, 41):
        _pre_pipeline_model(steps, stages, s8)
    src = KERNEL_CU.read_text()
    for line in ("static constexpr int ST = S8 ? S8_STAGES : STAGES;", "static constexpr int AHEAD = ST - 1;",
                 "static constexpr int ABUFS = AHEAD + 2;", "constexpr int PRE_AHEAD = STAGES - 1;",
                 "if (STEADY || s + ST < steps) ld.load_b(load_slot);",
                 "if (STEADY || s + AHEAD < steps) ld.template load_a<BM>(a_load);",
                 "if (i < AHEAD && i < pipe.steps) pipe.ld.template load_a<BM>(pipe.dec + i * ABUF);",
                 "cp_async_wait<ST - 2>();", "for (; s + 1 + ST < pipe.steps; s += 2) {",
                 "if (i >= 2 && i < pipe.steps) pipe.ld.load_b(pipe.ring() + i * PRE_STAGE_BYTES);"):
        assert line in src, line


def _pair_pipeline_model(steps: int) -> None:
    """Run s8_pair_loop's schedule (one barrier per pair of K steps) for one pipeline of ``steps`` K steps and assert
    what its comment claims: A of both steps of a pair landed before the barrier preceding the pair's wgmmas; B of a
    step landed before a barrier that precedes its decode; a copy overwrites only an A buffer whose wgmmas every
    warpgroup waited for before the last barrier and a raw slot decoded before it; a fragment set is decoded only
    once the wgmmas that read it are done; each step copied once; nothing in flight at the end."""
    slots, abufs = 6, 8
    groups: list[list] = []
    landed: set = set()
    visible: set = set()  # landed as of the last barrier
    a_owner: dict = {}
    b_owner: dict = {}
    loaded: list = []
    done_before_barrier = -1  # every warpgroup's wgmmas of steps <= this finished before the last barrier
    decoded_before_barrier = -1  # every thread decoded B of steps <= this before the last barrier
    frag: dict = {}  # fragment set -> the step decoded into it; in_use: sets read by wgmmas in flight
    in_use: set = set()

    def wait(n):
        for g in groups[:max(len(groups) - n, 0)]:
            landed.update(g)

    def load(kind, j):  # A: the buffer's last step's wgmmas done everywhere; B: the slot's last step decoded
        owner, ring, free_upto = ((a_owner, abufs, done_before_barrier) if kind == "A" else
                                  (b_owner, slots, decoded_before_barrier))
        prev = owner.get(j % ring)
        assert prev is None or prev <= free_upto, (kind, j, prev, free_upto)
        owner[j % ring] = j
        loaded.append((kind, j))
        return (kind, j)

    def load_a(j):
        return load("A", j)

    def load_b(j):
        return load("B", j)

    def decode(j, fset):
        assert ("B", j) in visible and b_owner[j % slots] == j, j
        assert fset not in in_use, (j, fset)
        frag[fset] = j

    def barrier(decoded_upto, done_upto):
        nonlocal decoded_before_barrier, done_before_barrier
        visible.update(landed)
        decoded_before_barrier, done_before_barrier = decoded_upto, done_upto

    # prologue: {B0, B1} issued before the wait for the pre-pass, then {A0, A1}, {B2, B3, A2, A3}, {B4, B5}
    groups.append([load_b(i) for i in (0, 1) if i < steps])
    groups.append([load_a(i) for i in (0, 1) if i < steps])
    groups.append([load_b(i) for i in (2, 3) if i < steps] + [load_a(i) for i in (2, 3) if i < steps])
    groups.append([load_b(i) for i in (4, 5) if i < steps])
    wait(1)
    barrier(-1, -1)
    decode(0, 0)
    if steps > 1:
        decode(1, 1)
    barrier(1 if steps > 1 else 0, -1)
    flight: list = []  # (sets, steps) of committed wgmma groups not yet waited for

    def pair(s, cur, nxt):
        for j, fset in ((s, cur[0]), (s + 1, cur[1])):
            if j < steps:
                assert ("A", j) in visible and a_owner[j % abufs] == j, j
                assert frag[fset] == j, (j, fset, frag)
        flight.append(({cur[0], cur[1]}, [j for j in (s, s + 1) if j < steps]))
        in_use.update({cur[0], cur[1]})
        if s + 2 >= steps:
            return None
        while len(flight) > 1:  # wgmma_wait<1>
            sets, _ = flight.pop(0)
            in_use.difference_update(sets - {cur[0], cur[1]})
        grp = [load_b(j) for j in (s + 6, s + 7) if j < steps]
        grp += [load_a(j) for j in (s + 4, s + 5) if j < steps]
        groups.append(grp)
        decode(s + 2, nxt[0])
        if s + 3 < steps:
            decode(s + 3, nxt[1])
        wait(1)
        barrier(min(s + 3, steps - 1), s - 1)  # every warpgroup waited for the previous pair (s - 2, s - 1)
        return s

    s = 0
    while s < steps:
        pair(s, (0, 1), (2, 3))
        if s + 2 < steps:
            pair(s + 2, (2, 3), (0, 1))
        s += 4
    assert sorted(loaded) == sorted([("A", j) for j in range(steps)] + [("B", j) for j in range(steps)])
    wait(0)
    assert all(all(x in landed for x in g) for g in groups)


def test_int8_pair_pipeline_discipline_holds_for_every_step_count():
    for steps in range(1, 41):
        _pair_pipeline_model(steps)
    src = KERNEL_CU.read_text()
    for line in ("if (STEADY || s + 6 < steps) ld.load_b(b_load);",
                 "if (STEADY || s + 7 < steps) ld.load_b(b_load + PRE_STAGE_BYTES);",
                 "if (STEADY || s + 4 < steps) ld.template load_a<BM>(a_load);",
                 "if (STEADY || s + 5 < steps) ld.template load_a<BM>(a_load + S8_ABUF_BYTES);",
                 "if (STEADY || s + 3 < steps) db.run(b_next + PRE_STAGE_BYTES, n1, bad);",
                 "if (!STEADY && s + 2 >= steps) return;", "for (; s + 9 < steps; s += 4) {",
                 "if (g > 0 && i < steps) pipe.ld.template load_a<BM>(dec + i * S8_ABUF_BYTES);",
                 "cp_async_wait<1>();  // B and A of steps 0..3"):
        assert line in src, line


def test_predecoded_copies_cover_a_tiles_step_once_in_512_byte_runs():
    for bm in (64, 96, 128):
        got = []
        for tid in range(host.THREADS):
            off = (tid >> 5) * bm * 16 + 16 * (tid & 31)  # PreLoader::a_off
            got += [off + imm for imm in (0, 512, 1024, 1536)[:bm // 32]]
        assert sorted(got) == list(range(0, bm * 128, 16)), bm
    assert "a_off = S8 ? 16 * tid : (tid >> 5) * BM * 16 + 16 * (tid & 31);" in KERNEL_CU.read_text()
    for bm in (64, 96, 128):  # the int8 path: 16-byte chunks tid and, where BM x 4 chunks exceed 256, tid + 256
        got = [16 * tid + extra for tid in range(host.THREADS)
               for extra in (0, 4096)[:1 + (bm == 128 or (bm == 96 and 16 * tid < 2048))]]
        assert sorted(got) == list(range(0, bm * 64, 16)), bm
    for line in ("if constexpr (BM == 128) cp_async16<THREADS * 16>(dst, a_src);",
                 "if constexpr (BM == 96) cp_async16(dst + THREADS * 16, a_src + THREADS * 16, 16, a_off < 2048);"):
        assert line in KERNEL_CU.read_text(), line
