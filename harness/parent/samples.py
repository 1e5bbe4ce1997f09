"""The trusted parent's side of a case's samples: inputs drawn once and the expected outputs (judge.py judges), for
a problem with sample buffers of its own (harness.problem.SampleBuffers, reached through its plug; nvfp4_group_gemm).

Per sample: the inputs are drawn into the parent's own device buffer (the problem's layout), the expected outputs
are computed from that copy (its batched reference), and only then are the inputs copied into the buffer the
worker's calls read (on CUDA the worker's own device memory, which the parent maps: kernels read memory mapped
through CUDA IPC more slowly, 180 against 151 us a call on g8_n4096_k7168 on an H200), with canaries: a few bytes
of A and B in every call and group, at places and with values drawn from the OS's randomness, are wrong until
``fix`` writes the true ones inside the parent's bracket (harness.parent.bracket). Work on the inputs before then
computes wrong outputs. The outputs are judged from ``snapshot``, the parent's own copy of the output buffer taken
at the bracket's end; nothing the worker does to shared memory can change what it is judged against.
harness.parent.judge compares every output of every call with one flat comparison on the device, through
``got``/``expected``; ``views`` gives the evidence of the first mismatch only when there is one.

The host buffer (the plain scales the calls read on the CPU) has two slots, and a case has one ArenaSample per slot:
the next sample can be prepared while the worker still finishes the previous one (harness.parent.case_runner)
without writing anything that sample's calls read: the device inputs are copied into the worker's own memory before its
window, the host scales are in the other slot, and the expected outputs in the other ArenaSample.

Draws: the correctness call uses the official generator's order, bit for bit (the plug's ``generate``); warm-up and
timed samples draw the same distribution with a few kernels per group for all calls at once (``draw_official``),
or, for full-range data, ``generate`` per call.
"""
from __future__ import annotations

import secrets

import torch

from harness import plugs
from harness import protocol as P
from harness.buffers import MappedBuffer, SharedBuffer
from harness.parent.seeds import draw_seed
from harness.problem import DEFAULT_PROBLEM


_shuffle = secrets.SystemRandom().shuffle


def _secret_generator(device: torch.device) -> torch.Generator:
    """A generator seeded from the OS's randomness: the canaries' places and values owe nothing to the run's
    seeds, so the worker cannot derive them."""
    return torch.Generator(device=device).manual_seed(secrets.randbits(63))

#: Canary bytes per call, group and operand (A, B): each one changes two e2m1 values of a row of A (or a column of
#: B), so every output row (column) it feeds is wrong by far more than the tolerance.
CANARIES = 16
#: The parent copies the output buffer in chunks of this many bytes, in a secret order, so a worker that signals
#: the end early cannot race the copy by finishing the outputs in address order.
SNAPSHOT_CHUNK = 1 << 20


class SharedSet:
    """The buffers of a sample: device inputs (CUDA: the worker's own memory, mapped here once the worker answers
    ``Mapped``; CPU: a memory file), host scales, outputs (both the parent's, mapped by the worker), and
    ``snapshot``, the parent's private copy of the outputs. Grown when a case needs more."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.buffers: dict[str, SharedBuffer | MappedBuffer] = {}
        self.retired: list[SharedBuffer] = []
        self.generation = 0
        self.device_bytes = 0
        self.snapshot: torch.Tensor | None = None

    def fits(self, *layouts) -> bool:
        need = self._sizes(layouts)
        have = {k: b.nbytes for k, b in self.buffers.items() if isinstance(b, SharedBuffer)}
        have["device"] = self.device_bytes
        return self.snapshot is not None and all(have.get(k, 0) >= v for k, v in need.items())

    @staticmethod
    def _sizes(layouts) -> dict[str, int]:
        return {"device": max(x.device_bytes for x in layouts), "host": 2 * max(x.host_slot_bytes for x in layouts),
                "output": max(x.output_bytes for x in layouts)}

    def grow(self, *layouts) -> None:
        """New buffers as large as the largest of ``layouts`` needs (and no smaller than today's). The old ones
        are kept in ``retired`` until ``free_retired`` (call it once no worker maps them)."""
        old = {"device": self.device_bytes, **{k: b.nbytes for k, b in self.buffers.items()
                                               if isinstance(b, SharedBuffer) and k != "device"}}
        sizes = {k: max(v, old.get(k, 0)) for k, v in self._sizes(layouts).items()}
        self.detach_device()
        self.retired += [b for b in self.buffers.values() if isinstance(b, SharedBuffer)]
        cpu = torch.device("cpu")
        self.buffers = {"host": SharedBuffer(sizes["host"], cpu, pin=self.cuda),
                        "output": SharedBuffer(sizes["output"], self.device)}
        if not self.cuda:
            self.buffers["device"] = SharedBuffer(sizes["device"], self.device)
        self.device_bytes = sizes["device"]
        self.snapshot = None
        self.snapshot = torch.empty(sizes["output"], dtype=torch.uint8, device=self.device)
        self.generation += 1

    def attach_device(self, ref: P.BufferRef) -> None:
        """CUDA: map the device buffer a new worker allocated (its ``Mapped`` answer). Raises SharedBufferError,
        or ValueError when it is not the size asked for."""
        if not self.cuda:
            return
        if ref.kind != "cuda" or ref.nbytes < self.device_bytes:
            raise ValueError(f"expected the worker's device buffer of {self.device_bytes} bytes, got {ref.kind} of "
                             f"{ref.nbytes}")
        self.detach_device()
        self.buffers["device"] = MappedBuffer(ref)

    def detach_device(self) -> None:
        """CUDA: unmap the current worker's device buffer (call before that worker is gone or a new one maps)."""
        mapped = self.buffers.pop("device", None) if self.cuda else None
        if mapped is not None:
            mapped.close()

    def free_retired(self) -> None:
        for b in self.retired:
            b.close()
        self.retired = []

    def map_request(self) -> tuple[P.Map, list[int]]:
        """The Map message and the descriptors to send with it (memfd buffers, in field order)."""
        b = self.buffers
        device = P.BufferRef("alloc", self.device_bytes) if self.cuda else b["device"].ref()
        fds = [x.fd for x in (b.get("device"), b["host"], b["output"])
               if isinstance(x, SharedBuffer) and x.fd is not None]
        return P.Map(device, b["host"].ref(), b["output"].ref()), fds

    def close(self) -> None:
        self.detach_device()
        self.free_retired()
        for b in self.buffers.values():
            b.close()
        self.buffers = {}
        self.snapshot = None


class ArenaSample:
    """One sample of ``case`` (``calls`` inputs) of ``problem`` prepared in ``shared``, its host scales in host slot
    ``slot`` (0 or 1): after ``prepare`` the worker's buffers hold the inputs and ``expected`` (fp16, the output
    buffer's layout) the reference outputs. ``host_offset``: where the slot starts in the host buffer (bytes).
    ``kit``: the problem's SampleBuffers. Raises ValueError for a problem without sample buffers of its own."""

    def __init__(self, case, calls: int, data: str, device: torch.device, shared: SharedSet, slot: int = 0,
                 problem: str = DEFAULT_PROBLEM):
        self.case, self.data, self.device, self.shared, self.slot = case, data, device, shared, slot
        self.plug = plugs.get(problem)
        self.kit = self.plug.sample_buffers
        if self.kit is None:
            raise ValueError(f"{problem} has no sample buffers of its own: its samples are plain_samples'")
        self.layout = self.kit.layout.of(case, calls)
        self.host_offset = slot * self.layout.host_slot_bytes
        self._private = torch.empty(self.layout.device_bytes, dtype=torch.uint8, device=device)
        # On the CPU the plain scales are drawn by the CPU generator (MT19937), whose output gives its state away:
        # they wait in the parent's memory too, until publish. On CUDA (Philox, keyed seeds) they go straight into
        # the host slot, which spares a host copy of up to hundreds of MB a sample.
        self._private_host = (torch.empty(self.layout.host_slot_bytes, dtype=torch.uint8)
                              if device.type == "cpu" else None)
        self._expected = torch.empty(self.layout.output_bytes, dtype=torch.uint8, device=device)
        self._side = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._views: tuple[int, object, list] | None = None  # (buffer generation, views, [reference plan])
        self._plain: list[list[torch.Tensor]] | None = None
        self._c_drawn = False
        self._secret = _secret_generator(device)
        self._regions = self._canary_regions()
        self._canary: tuple[torch.Tensor, torch.Tensor] | None = None  # (byte positions, true bytes)
        self._order: list[int] = []

    def request(self, kind: str, watch: bool = True, ahead: bool = False) -> P.Run:
        """The Run request for this sample (the sizes its layout depends on, SampleBuffers.sizes_of; the worker
        lays out the same layout from them)."""
        return P.Run(self.kit.sizes_of(self.case), self.layout.calls, kind, watch=watch,
                     host_offset=self.host_offset, ahead=ahead)

    def _private_views(self):
        """Views of the parent's buffers, built once per buffer generation (their Python objects cost ms)."""
        if self._views is None or self._views[0] != self.shared.generation:
            views = self.kit.views(self.layout, self._private, self._host(), self._expected)
            self._views = (self.shared.generation, views, [])
        return self._views[1]

    def prepare(self, seeds: list[int], official_order: bool, publish: bool = True) -> None:
        """Draw the inputs, compute the expected outputs, copy the inputs to the worker's buffers (``publish``)
        and wait for the device. ``seeds`` has one seed per call: with ``official_order`` (or full-range data) each
        input is drawn from its own seed by the plug's ``generate``; otherwise the first seeds one generator for the
        whole sample (the kit's ``draw_official``). Without ``publish`` the operands stay in the parent's own
        memory until ``publish()``: the worker must not read a sample before the bracket that times it is open
        (it could compute the outputs before its window, then patch what the canaries changed)."""
        kit = self.kit
        private = self._private_views()
        if official_order or self.data != "official":
            drawn = seeds if official_order else [draw_seed(s) for s in seeds]
            data = [self.plug.generate(self.case, s, self.data, self.device) for s in drawn]
            for j, x in enumerate(data):
                kit.write_input(private, j, x)
            expected = kit.ref_kernel_many(data)
        else:
            gen = torch.Generator(device=self.device).manual_seed(draw_seed(seeds[0]))
            # c, the output buffer, is drawn once: nothing reads its initial values into a result
            self._plain = plain = kit.draw_official(private, gen, self._plain, fill_c=not self._c_drawn)
            self._c_drawn = True
            self._copy_plain_aside(private, plain)
            cached = self._views[2]
            if not cached:  # views of the same tensors every sample, and the reference's launches: built once
                cached.append(kit.reference_plan(kit.reference_inputs(private, plain)))
            expected = cached[0].run()
        dst, src = [], []
        for j, outs in enumerate(expected):
            for g, out in enumerate(outs):
                dst.append(private.out[g][j])
                src.append(out)
        torch._foreach_copy_(dst, src)
        if publish:
            self.publish()
        elif self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # drawn and referenced: publish() may be queued on another stream

    def publish(self, sync: bool = True) -> None:
        """Copy the prepared inputs into the worker's device buffer and plant the canaries, on the current stream;
        with ``sync``, wait for the device (without: queued inside the parent's bracket, Bracket.open)."""
        self.shared.buffers["device"].tensor[:self.layout.device_bytes].copy_(self._private)
        if self._private_host is not None:
            slot = self.shared.buffers["host"].tensor[self.host_offset:self.host_offset + self.layout.host_slot_bytes]
            slot.copy_(self._private_host)
        self._plant()
        if sync and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _canary_regions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, length) in bytes of every call's operands (the layout's ``operand_regions``) in the device
        buffer."""
        L = self.layout
        starts, lengths = [], []
        for j in range(L.calls):
            for off, size in L.operand_regions:
                starts.append(j * L.device_stride + off)
                lengths.append(size)
        as_t = lambda v: torch.tensor(v, dtype=torch.int64, device=self.device).repeat_interleave(CANARIES)  # noqa
        return as_t(starts), as_t(lengths)

    def _plant(self) -> None:
        """Make CANARIES secret bytes of every call's and group's A and B wrong in the worker's buffer: each
        nibble's magnitude bits flip by a nonzero amount, so both e2m1 values change (e2m1's eight magnitudes are
        distinct; only its sign bit could leave a zero a zero)."""
        starts, lengths = self._regions
        r = torch.rand(starts.shape, generator=self._secret, device=self.device)
        pos = starts + (r * lengths).long().clamp_max(lengths - 1)
        true = self._private[pos]
        flip = torch.randint(0, 256, pos.shape, generator=self._secret, device=self.device, dtype=torch.int32)
        flip = ((flip | 0x11) & 0x77).to(torch.uint8)
        dev = self.shared.buffers["device"].tensor
        dev[pos] = true ^ flip
        self._canary = (pos, true)
        self._order = list(range(-(-self.layout.output_bytes // SNAPSHOT_CHUNK)))
        _shuffle(self._order)

    def fix(self) -> None:
        """Write the canaries' true bytes (on the current stream); the inputs are then exactly the drawn ones."""
        if self._canary is not None:
            pos, true = self._canary
            self.shared.buffers["device"].tensor[pos] = true

    def take_snapshot(self) -> None:
        """Copy the output buffer into the parent's ``snapshot`` (on the current stream), chunks in a secret
        order."""
        n = self.layout.output_bytes
        out, snap = self.shared.buffers["output"].tensor, self.shared.snapshot
        order = self._order or [0]
        dst = [snap[i * SNAPSHOT_CHUNK:min(n, (i + 1) * SNAPSHOT_CHUNK)] for i in order]
        src = [out[i * SNAPSHOT_CHUNK:min(n, (i + 1) * SNAPSHOT_CHUNK)] for i in order]
        torch._foreach_copy_(dst, src)

    def changed(self) -> bool:
        """Whether the output buffer differs from the snapshot now (the device idle): outputs written after the
        bracket's end."""
        n = self.layout.output_bytes
        return not torch.equal(self.shared.buffers["output"].tensor[:n], self.shared.snapshot[:n])

    def _copy_plain_aside(self, private, plain) -> None:
        """The plain scales to the host buffer; on a GPU on a second stream, so the copy engine moves them while
        the reference computes (``plain`` stays referenced until prepare's final synchronize)."""
        if self.device.type != "cuda":
            self.kit.copy_plain(private, plain)
            return
        self._side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._side):
            self.kit.copy_plain(private, plain)

    def _host(self) -> torch.Tensor:
        """Where the sample's host bytes are drawn: the parent's own staging (CPU), else the host slot."""
        if self._private_host is not None:
            return self._private_host
        return self.shared.buffers["host"].tensor[self.host_offset:]

    def got(self) -> torch.Tensor:
        """What the worker's outputs were at the end of the parent's bracket (``snapshot``): fp16, flat, the
        outputs' layout."""
        return self.shared.snapshot[:self.layout.output_bytes].view(torch.float16)

    def expected(self) -> torch.Tensor:
        """The reference outputs ``prepare`` computed: fp16, flat, the same layout as ``got``."""
        return self._expected.view(torch.float16)

    def views(self) -> tuple:
        """(got, expected) as per-call, per-group views, for the evidence of a mismatch."""
        host = self._host()
        return (self.kit.views(self.layout, self._private, host, self.shared.snapshot),
                self.kit.views(self.layout, self._private, host, self._expected))


__all__ = ["SharedSet", "ArenaSample"]
