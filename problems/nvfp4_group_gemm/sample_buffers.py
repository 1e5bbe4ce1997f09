"""One timed sample's inputs laid out in flat byte buffers, and drawn there.

A sample is ``calls`` inputs of one case. Every tensor of input_t is a view into one of two buffers, and every
output has a region in a third:

- ``device``: a, b, c, sfa_reordered, sfb_reordered of every call and group (the GPU; the CPU without one);
- ``host``: sfa, sfb (input_t keeps the plain scales on the CPU);
- ``output``: one fp16 [M, N] region per call and group, where the worker copies what each call returned.

In the device and output buffers call j's regions sit at ``j * call_stride``; in the host buffer each group's
sfa (and sfb) of all calls are one contiguous block, so the copy of the plain scales from a GPU is one contiguous
transfer per group and operand. Either way one view with a leading ``calls`` dimension covers a tensor of every
call: a draw or a copy costs one kernel per group and tensor, not per call. Device regions start on ALIGN-byte
boundaries (kernels may load 16-byte vectors or use TMA); the host and output regions are packed. The views have the strides the official generator gives (a and b K-major permuted views of
[1, M, K/2], c of [1, M, N], the reordered scales the blocked view, formats).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from problems.nvfp4_group_gemm import input_t
from problems.nvfp4_group_gemm.formats import ATOM_COLS, ATOM_ROWS, BLOCKED_PERMUTE, SF_VEC
from problems.nvfp4_group_gemm.inputs import OFFICIAL_NIBBLE_MASK
from problems.nvfp4_group_gemm.spec import Case

#: Byte alignment of every device region.
ALIGN = 256
#: e4m3fn bytes of the official scale values: 1.0 (exponent 7) and 2.0 (exponent 8).
E4M3FN_ONE, E4M3FN_TWO = 0x38, 0x40


#: OFFICIAL_NIBBLE_MASK in every byte of an int64 word (as a signed value).
_MASK64 = int.from_bytes(bytes([OFFICIAL_NIBBLE_MASK]) * 8, "little", signed=True)


def _up(x: int, to: int) -> int:
    return -(-x // to) * to


@dataclass(frozen=True)
class GroupLayout:
    """Byte offsets (call 0) of one group's tensors, and its sizes (``sfa``/``sfb``: the start of that operand's
    block of all calls in the host buffer). ``rest_mn`` and ``rest_k`` count the blocked layout's 128-row and
    4-column atoms."""

    m: int
    n: int
    k: int
    a: int
    b: int
    c: int
    sfa_r: int
    sfb_r: int
    sfa: int
    sfb: int
    out: int

    @property
    def sf_cols(self) -> int:
        return self.k // SF_VEC

    @property
    def rest_k(self) -> int:
        return -(-self.sf_cols // ATOM_COLS)

    def rest_mn(self, rows: int) -> int:
        return -(-rows // ATOM_ROWS)


@dataclass(frozen=True)
class Layout:
    """Where the ``calls`` inputs of ``case`` live: per-group offsets, per-call strides and total sizes (bytes)."""

    case: Case
    calls: int
    groups: tuple[GroupLayout, ...]
    device_stride: int
    host_per_call: int
    output_stride: int

    @property
    def device_bytes(self) -> int:
        return self.device_stride * self.calls

    @property
    def host_bytes(self) -> int:
        return self.host_per_call * self.calls

    @property
    def output_bytes(self) -> int:
        return self.output_stride * self.calls

    @property
    def output_shapes(self) -> tuple[tuple[int, int, int], ...]:
        """The shape a right call returns for each output, in order: fp16 [M_g, N_g, 1] per group."""
        return tuple((g.m, g.n, 1) for g in self.groups)

    @property
    def operand_regions(self) -> tuple[tuple[int, int], ...]:
        """(offset, bytes) of one call's e2m1 operands (each group's A and B) in the device buffer; call j's lie
        ``j * device_stride`` further: where the parent plants its canaries."""
        return tuple(r for g in self.groups for r in ((g.a, g.m * g.k // 2), (g.b, g.n * g.k // 2)))

    @property
    def host_slot_bytes(self) -> int:
        """The host bytes of one sample rounded up to 4 KiB: the stride of the host buffer's two slots (the parent
        fills one while the worker's calls read the other)."""
        return _up(self.host_bytes, 4096)

    @classmethod
    def of(cls, case: Case, calls: int) -> "Layout":
        """The layout of ``calls`` inputs of ``case``. Raises ValueError for calls < 1."""
        if calls < 1:
            raise ValueError(f"expected at least 1 call per sample, got {calls}")
        dev = host = out = 0
        groups = []
        for m, n, k in zip(case.m, case.n, case.k):
            cols = k // SF_VEC
            blocked = lambda rows: _up(rows, ATOM_ROWS) * _up(cols, ATOM_COLS)  # noqa: E731
            offs = {}
            for name, size in (("a", m * k // 2), ("b", n * k // 2), ("c", m * n * 2),
                               ("sfa_r", blocked(m)), ("sfb_r", blocked(n))):
                offs[name] = dev
                dev = _up(dev + size, ALIGN)
            offs["sfa"], offs["sfb"] = host * calls, (host + m * cols) * calls
            host += (m + n) * cols
            offs["out"] = out
            out += m * n * 2
            groups.append(GroupLayout(m, n, k, **offs))
        return cls(case, calls, tuple(groups), max(dev, ALIGN), max(host, 1), max(out, 2))


def sizes_of(case: Case) -> tuple[tuple[int, int, int], ...]:
    """(M, N, K) per group: all a layout depends on (what the parent's Run request carries)."""
    return tuple(zip(case.m, case.n, case.k))


def layout_of_sizes(sizes: Sequence[Sequence[int]], calls: int) -> Layout:
    """``Layout.of`` a case known only by its (M, N, K) per group (``sizes_of``; the worker's Run request; the
    seed, 0, is not part of a layout). Raises ValueError for calls < 1 or a row that is not three sizes."""
    if not sizes or any(len(row) != 3 for row in sizes):
        raise ValueError(f"expected (M, N, K) per group, got {sizes!r}")
    m, n, k = (tuple(col) for col in zip(*sizes))
    return Layout.of(Case(m, n, k, len(m), 0), calls)


def _batched(buf: torch.Tensor, stride: int, offset: int, shape: tuple[int, ...], calls: int) -> torch.Tensor:
    """A [calls, *shape] contiguous-per-call view of uint8 ``buf`` at ``offset`` (from ``buf``'s first element, which
    may be a slice of a larger buffer), calls ``stride`` bytes apart."""
    inner = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        inner[i] = inner[i + 1] * shape[i + 1]
    return torch.as_strided(buf, (calls, *shape), (stride, *inner), buf.storage_offset() + offset)


def _half(buf: torch.Tensor, stride: int, offset: int, shape: tuple[int, ...], calls: int) -> torch.Tensor:
    """As ``_batched`` for fp16 elements (``stride`` and ``offset`` in bytes, both even)."""
    return _batched(buf.view(torch.float16), stride // 2, offset // 2, shape, calls)


class Views:
    """Every tensor of a sample as [calls, ...] views of its buffers, built once per buffer set."""

    def __init__(self, layout: Layout, device: torch.Tensor, host: torch.Tensor, output: torch.Tensor | None = None):
        L, c = layout, layout.calls
        self.layout = layout
        self.a, self.b, self.c, self.sfa_r, self.sfb_r, self.sfa, self.sfb, self.out = ([] for _ in range(8))
        for g in L.groups:
            half_k = g.k // 2
            self.a.append(_batched(device, L.device_stride, g.a, (1, g.m, half_k), c))
            self.b.append(_batched(device, L.device_stride, g.b, (1, g.n, half_k), c))
            self.c.append(_half(device, L.device_stride, g.c, (1, g.m, g.n), c))
            self.sfa_r.append(_batched(device, L.device_stride, g.sfa_r,
                                       (1, g.rest_mn(g.m), g.rest_k, 32, 4, 4), c))
            self.sfb_r.append(_batched(device, L.device_stride, g.sfb_r,
                                       (1, g.rest_mn(g.n), g.rest_k, 32, 4, 4), c))
            self.sfa.append(_batched(host, g.m * g.sf_cols, g.sfa, (1, g.m, g.sf_cols), c))
            self.sfb.append(_batched(host, g.n * g.sf_cols, g.sfb, (1, g.n, g.sf_cols), c))
            if output is not None:
                self.out.append(_half(output, L.output_stride, g.out, (g.m, g.n, 1), c))

    def inputs(self) -> list[input_t]:
        """One input_t per call, tensors with the official dtypes, shapes and strides (fresh view objects)."""
        fp4, fp8 = torch.float4_e2m1fn_x2, torch.float8_e4m3fn
        per_group = []
        for i in range(len(self.layout.groups)):
            per_group.append([t.unbind(0) for t in (
                self.a[i].permute(0, 2, 3, 1).view(fp4), self.b[i].permute(0, 2, 3, 1).view(fp4),
                self.c[i].permute(0, 2, 3, 1),
                self.sfa[i].view(fp8).permute(0, 2, 3, 1), self.sfb[i].view(fp8).permute(0, 2, 3, 1),
                self.sfa_r[i].view(fp8).permute(0, *[p + 1 for p in BLOCKED_PERMUTE]),
                self.sfb_r[i].view(fp8).permute(0, *[p + 1 for p in BLOCKED_PERMUTE]))])
        sizes = [(g.m, g.n, g.k, 1) for g in self.layout.groups]
        out = []
        for j in range(self.layout.calls):
            out.append(([(a[j], b[j], c[j]) for a, b, c, *_ in per_group],
                        [(sa[j], sb[j]) for *_, sa, sb, _, _ in per_group],
                        [(ra[j], rb[j]) for *_, ra, rb in per_group],
                        list(sizes)))
        return out

    def outputs(self, call: int) -> list[torch.Tensor]:
        """The fp16 [M, N, 1] output regions of ``call``, one per group (needs the output buffer)."""
        return [o[call] for o in self.out]


def write_input(views: Views, call: int, data: input_t) -> None:
    """Copy one input_t (e.g. from inputs.generate_input) into ``call``'s regions, every byte of it: the
    reordered scales' padding too."""
    (abc, sfs, sfs_r, _sizes) = data
    for i, ((a, b, c), (sfa, sfb), (ra, rb)) in enumerate(zip(abc, sfs, sfs_r)):
        u8 = torch.uint8
        views.a[i][call].copy_(a.view(u8).permute(2, 0, 1))
        views.b[i][call].copy_(b.view(u8).permute(2, 0, 1))
        views.c[i][call].copy_(c.permute(2, 0, 1))
        views.sfa[i][call].copy_(sfa.view(u8).permute(2, 0, 1))
        views.sfb[i][call].copy_(sfb.view(u8).permute(2, 0, 1))
        inverse = [BLOCKED_PERMUTE.index(d) for d in range(6)]
        views.sfa_r[i][call].copy_(ra.view(u8).permute(*inverse))
        views.sfb_r[i][call].copy_(rb.view(u8).permute(*inverse))


def _random_bits(out: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Fill the contiguous uint8 ``out`` (numel a multiple of 64) with independent fair bits, 0 or 1, one per byte,
    from int64 words of ``gen`` (64 bits each); returns ``out``."""
    words = torch.empty(out.numel() // 64, dtype=torch.int64, device=out.device)
    octets = words.random_(-2**63, 2**63 - 1, generator=gen).view(torch.uint8).view(-1, 1)
    shifts = torch.arange(8, dtype=torch.uint8, device=out.device)
    return torch.bitwise_and(octets >> shifts, 1, out=out.view(-1, 8))


def draw_official(views: Views, gen: torch.Generator, into: Sequence[Sequence[torch.Tensor]] | None = None,
                  fill_c: bool = True) -> list[list[torch.Tensor]]:
    """Fill every call of ``views`` with fresh data of the official distribution, drawn from ``gen`` alone (on
    the device buffer's device), a few kernels per group for all calls at once.

    The distribution is the official generator's (inputs) but for one byte value: bytes uniform over 0..255
    (official: 0..254, one fewer preimage of 0xBB) masked with OFFICIAL_NIBBLE_MASK, so the same 64 values with
    frequencies 1/64 (official: 4/255 or 3/255); c standard normal fp16; every scale (padding included) 1.0 or 2.0
    with probability 1/2. Bytes are drawn 8 at a time as int64 words, scales 64 at a time, one bit each (8x and
    64x fewer random numbers). ``fill_c`` False leaves c as it is: c is the output buffer, whose initial values
    enter no result, so a caller refilling the same buffers draws it once (on a 2-core CPU the normals were
    1.2-2.5 ms of a smoke sample's 2.6-3.7 ms draw). The draw order is
    not (the official order draws the plain scales on the CPU generator, which costs about
    20 ms per million scales; inputs.generate_input keeps that order bit for bit). Returns, per group, the
    plain scales sfa and sfb as contiguous [calls, rows, K/16] uint8 tensors on the device: the reference reads
    them there, and ``copy_plain`` puts them into the host buffer. ``into``: tensors of that form (an earlier
    return value) to write them to, so views of them built once stay valid; they are returned.
    """
    dev = views.a[0].device if views.a else torch.device("cpu")
    plain = []
    for i, g in enumerate(views.layout.groups):
        for t in (views.a[i], views.b[i]):  # 8 bytes per random number: K/2 is a multiple of 8 (K of 64)
            words = t.view(torch.int64) if t.shape[-1] % 8 == 0 else None
            if words is None:
                t.random_(0, 256, generator=gen).bitwise_and_(OFFICIAL_NIBBLE_MASK)
            else:
                words.random_(-2**63, 2**63 - 1, generator=gen).bitwise_and_(_MASK64)
        if fill_c:  # drawn in fp32 and rounded: normal_ straight into fp16 views is 6x slower on a CPU
            c = views.c[i]
            c.copy_(torch.empty(c.shape, dtype=torch.float32, device=dev).normal_(generator=gen))
        pair = []
        for rows, reordered, host in ((g.m, views.sfa_r[i], views.sfa[i]), (g.n, views.sfb_r[i], views.sfb[i])):
            rest_mn, rest_k = g.rest_mn(rows), g.rest_k
            padded = torch.empty((views.layout.calls, rest_mn * ATOM_ROWS, rest_k * ATOM_COLS), dtype=torch.uint8,
                                 device=dev)
            _random_bits(padded, gen).mul_(E4M3FN_TWO - E4M3FN_ONE).add_(E4M3FN_ONE)
            # padded[r, j] = storage[r // 128, j // 4, r % 32, (r % 128) // 32, j % 4] (formats.blocked_offset)
            reordered.view(-1, rest_mn, rest_k, 32, 4, 4).copy_(
                padded.view(-1, rest_mn, 4, 32, rest_k, 4).permute(0, 1, 4, 3, 2, 5))
            part = padded[:, :rows, :g.sf_cols]
            pair.append(into[i][len(pair)].copy_(part) if into is not None else part.contiguous())
        plain.append(pair)
    return plain


def copy_plain(views: Views, plain: Sequence[Sequence[torch.Tensor]]) -> None:
    """Copy ``draw_official``'s plain scales into the host buffer (one contiguous copy per group and operand;
    asynchronous from a GPU into page-locked memory: synchronize before reading them)."""
    for i, (pa, pb) in enumerate(plain):
        for host, p in ((views.sfa[i], pa), (views.sfb[i], pb)):
            host.view(p.shape).copy_(p, non_blocking=host.device != p.device)


def reference_inputs(views: Views, plain: Sequence[Sequence[torch.Tensor]] | None = None) -> list[input_t]:
    """The inputs as input_t for the reference: ``views.inputs()``, with the plain scales taken from ``plain``
    (draw_official's device copies) when given, so the reference needs no host-to-device copy."""
    inputs = views.inputs()
    if plain is None:
        return inputs
    fp8 = torch.float8_e4m3fn
    out = []
    for j, (abc, _sfs, sfs_r, sizes) in enumerate(inputs):
        sfs = [(pa[j].view(fp8).unsqueeze(-1), pb[j].view(fp8).unsqueeze(-1)) for pa, pb in plain]
        out.append((abc, sfs, sfs_r, sizes))
    return out
