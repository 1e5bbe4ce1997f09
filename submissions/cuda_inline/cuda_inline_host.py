"""Host-side logic of the cuda_inline variant that needs no GPU.

- ``validate_problem_sizes``: what the kernel supports, as ValueError naming the expected and the given value.
- ``make_plan``: the tile list the kernel runs one CTA per entry of, ``(group, m0, n0, sfb_tmem_col)`` in group,
  row-tile, column-tile order, with the per-group prefix sums; built here and uploaded once per shape set.
- ``sf_tile_base`` / ``sf_stage_offset`` / ``sf_stage_position``: where the kernel's plain bulk copies find a
  tile's scale factors in the blocked 32x4x4 layout, and where each scale lands in a stage buffer.
- ``TensorMapCache``: the encoded TMA tensor maps of A and B, keyed on everything they encode.

The numbers mirror kernel.cu's configuration block; a test reads them back out of the source.
"""
from __future__ import annotations

import operator
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from task.formats import ATOM_BYTES, ATOM_K, ATOM_ROWS, SF_VEC

#: One launch holds every group's tensor maps in its parameter block (2 x 8 maps of 128 bytes).
MAX_GROUPS = 8
#: Output tile of one CTA and the K width of one pipeline stage.
TILE_M, TILE_N, TILE_K = 128, 64, 256
#: K elements per tcgen05.mma of kind mxf4nvf4.
MMA_K = 64
STAGES = 6
#: Scale bytes one stage copies per operand: the 4 atoms of one 256-wide K block, contiguous in the layout.
SF_BYTES_PER_STAGE = ATOM_BYTES * (TILE_K // ATOM_K)
#: In tensor memory an atom sits in 32 lanes x 4 columns; rows 32c .. 32c+31 of the atom are column c.
SF_ROWS_PER_TMEM_COL = 32
#: M, N, K are ints in the kernel (parameters, TMA coordinates); kept clear of int overflow for m0 + 128.
MAX_EXTENT = 2**31 - 1 - TILE_M
#: One CTA per tile along grid.x.
MAX_TILES = 2**31 - 1


class Size(NamedTuple):
    m: int
    n: int
    k: int


class Tile(NamedTuple):
    """One CTA's work: output rows m0 .. m0+127 and columns n0 .. n0+63 of ``group``; ``sfb_tmem_col`` is the
    tensor-memory column (0 or 2) of the SFB atom where this tile's 64 rows of B scales begin."""

    group: int
    m0: int
    n0: int
    sfb_tmem_col: int


def _int(value, what: str, group: int) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"group {group}: {what} must be an integer, got {value!r}") from None


def validate_problem_sizes(problem_sizes: Sequence[Sequence[int]]) -> tuple[Size, ...]:
    """``[(M, N, K, L), ...]`` -> ``(Size(M, N, K), ...)``, or ValueError saying what was expected and what came.

    Limits and why: 1..8 groups (one parameter block); L = 1; M >= 1 (rows past M are zero-filled by TMA and not
    stored, so any M works: 40, 76, 148, ... included); N a positive multiple of 64 (the epilogue stores whole
    64-column tiles without a column check; TMA would zero-fill B but C would be written out of bounds);
    K a positive multiple of 256 (one pipeline stage; the scales of a stage are then 4 whole atoms, and K = 0 would
    leave the accumulator unwritten); each extent below 2^31 - 129.
    """
    sizes = list(problem_sizes)
    if not 1 <= len(sizes) <= MAX_GROUPS:
        raise ValueError(f"cuda_inline supports 1..{MAX_GROUPS} groups, got {len(sizes)}")
    out = []
    for g, size in enumerate(sizes):
        if len(size) != 4:
            raise ValueError(f"group {g}: expected a problem size (M, N, K, L), got {tuple(size)!r}")
        m, n, k, l = (_int(v, name, g) for v, name in zip(size, "MNKL"))
        if l != 1:
            raise ValueError(f"group {g}: expected L = 1, got L = {l}")
        if not 1 <= m <= MAX_EXTENT:
            raise ValueError(f"group {g}: expected 1 <= M <= {MAX_EXTENT}, got M = {m}")
        if n < TILE_N or n % TILE_N or n > MAX_EXTENT:
            raise ValueError(f"group {g}: expected N a positive multiple of {TILE_N} (whole output tiles) "
                             f"up to {MAX_EXTENT}, got N = {n}")
        if k < TILE_K or k % TILE_K or k > MAX_EXTENT:
            raise ValueError(f"group {g}: expected K a positive multiple of {TILE_K} (one pipeline stage) "
                             f"up to {MAX_EXTENT}, got K = {k}")
        out.append(Size(m, n, k))
    total = sum(tile_counts(out))
    if total > MAX_TILES:
        raise ValueError(f"expected at most {MAX_TILES} output tiles (grid.x), got {total}")
    return tuple(out)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tile_counts(sizes: Iterable[Size]) -> list[int]:
    """Output tiles per group: ceil(M / 128) * ceil(N / 64)."""
    return [ceil_div(s.m, TILE_M) * ceil_div(s.n, TILE_N) for s in sizes]


def tile_offsets(sizes: Iterable[Size]) -> list[int]:
    """Per-group prefix sums of the tile counts, G + 1 entries: group g owns tiles offsets[g] .. offsets[g+1]-1."""
    offsets = [0]
    for count in tile_counts(sizes):
        offsets.append(offsets[-1] + count)
    return offsets


def sfb_tmem_col(n0: int) -> int:
    """The tensor-memory column where the scales of B rows n0 .. n0+63 begin: the SFB copy brings the whole
    128-row atom (column c holds atom rows 32c .. 32c+31), so an odd 64-column tile starts at column 2."""
    return (n0 % ATOM_ROWS) // SF_ROWS_PER_TMEM_COL


def build_tiles(sizes: Sequence[Size]) -> list[Tile]:
    """The kernel's work list: for each group, each 128-row tile, each 64-column tile (row-major in the group)."""
    tiles = []
    for g, s in enumerate(sizes):
        for m0 in range(0, s.m, TILE_M):
            for n0 in range(0, s.n, TILE_N):
                tiles.append(Tile(g, m0, n0, sfb_tmem_col(n0)))
    return tiles


@dataclass(frozen=True)
class Plan:
    """Everything a launch needs that depends on the problem sizes alone (cached per shape set)."""

    sizes: tuple[Size, ...]
    tiles: tuple[Tile, ...]
    offsets: tuple[int, ...]
    #: M, N, K of every group, flat: what the extension takes.
    mnk: tuple[int, ...]


def make_plan(problem_sizes: Sequence[Sequence[int]]) -> Plan:
    """Validate (ValueError) and build the tile list for ``problem_sizes``."""
    sizes = validate_problem_sizes(problem_sizes)
    tiles = tuple(build_tiles(sizes))
    offsets = tuple(tile_offsets(sizes))
    assert offsets[-1] == len(tiles)
    return Plan(sizes, tiles, offsets, tuple(v for s in sizes for v in s))


# --- scale factors in the blocked layout ------------------------------------------------------------------------

def sf_tile_base(row0: int, k: int) -> int:
    """Byte offset, in the blocked storage of SFA (or SFB), of the first atom holding rows row0 .. row0+127
    (row0 a multiple of 64): atoms (row block, k atom) lie ``rest_k = K / 64`` to a row block."""
    return (row0 // ATOM_ROWS) * (k // ATOM_K) * ATOM_BYTES


def sf_stage_offset(k_block: int) -> int:
    """Byte offset from the tile base of the 2048 bytes one stage copies for 256-wide K block ``k_block``."""
    return k_block * SF_BYTES_PER_STAGE


def sf_stage_position(r: int, j: int) -> int:
    """Where scale (row r, scale-column j) sits in its stage buffer: MMA step ``(j % 16) // 4`` copies atom bytes
    ``step * 512 ..`` into tensor memory, lane ``r % 32``, column ``(r % 128) // 32``, byte ``j % 4``."""
    step = (j % (TILE_K // SF_VEC)) // 4
    return step * ATOM_BYTES + (r % 32) * 16 + ((r % ATOM_ROWS) // 32) * 4 + j % 4


# --- tensor maps ------------------------------------------------------------------------------------------------

#: (box rows, data pointer, rows, K): everything a map encodes. The data type, swizzle and strides (K/2 bytes a
#: row, 128 bytes a K block) follow from these; box rows tell A (128) from B (64).
MapKey = tuple[int, int, int, int]


class TensorMapCache:
    """Encoded TMA tensor maps of A and B, keyed on everything they encode.

    A changed data pointer or a changed shape is a different key, so a map is never served for a tensor it was not
    encoded for; a freed tensor whose address comes back with the same shape maps to the same bytes, so keeping its
    entry is harmless. Least-recently-used entries are dropped beyond ``capacity`` (the default holds the official
    timing loop's 15 rotating inputs x 16 maps). ``encode(operand, rows, k, box_rows)`` makes one map (the
    extension's encode_operand_map); ``encodes`` counts how often it ran.
    """

    def __init__(self, encode: Callable[[Any, int, int, int], Any], capacity: int = 512) -> None:
        if capacity < 2 * MAX_GROUPS:
            raise ValueError(f"capacity must hold one launch's maps ({2 * MAX_GROUPS}), got {capacity}")
        self._encode = encode
        self._capacity = capacity
        self._maps: OrderedDict[MapKey, Any] = OrderedDict()
        self.encodes = 0

    def __len__(self) -> int:
        return len(self._maps)

    def get(self, operand, rows: int, k: int, box_rows: int):
        """The map of ``operand`` (anything with ``data_ptr()``) viewed as [rows, K/2] with ``box_rows``-row boxes."""
        key = (box_rows, operand.data_ptr(), rows, k)
        found = self._maps.get(key)
        if found is not None:
            self._maps.move_to_end(key)
            return found
        found = self._encode(operand, rows, k, box_rows)
        self.encodes += 1
        self._maps[key] = found
        if len(self._maps) > self._capacity:
            self._maps.popitem(last=False)
        return found

    def maps_for(self, plan: Plan, a: Sequence, b: Sequence) -> tuple[list, list]:
        """One launch's maps: A of each group with 128-row boxes, B with 64-row boxes."""
        a_maps = [self.get(t, s.m, s.k, TILE_M) for t, s in zip(a, plan.sizes)]
        b_maps = [self.get(t, s.n, s.k, TILE_N) for t, s in zip(b, plan.sizes)]
        return a_maps, b_maps

    def clear(self) -> None:
        self._maps.clear()
