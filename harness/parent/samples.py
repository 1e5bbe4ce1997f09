"""The trusted parent's side of a case's samples: inputs drawn once and the expected outputs (judge.py judges).

Per sample: the inputs are drawn into the parent's own device buffer (task.arena), the expected outputs are
computed from that copy (task.reference), and only then are the inputs copied into the buffer the worker maps
(harness.buffers): nothing the worker does to shared memory can change what it is judged against. After the
worker's reply, harness.parent.judge compares every output of every call with one flat comparison on the
device, through ``got``/``expected``; ``views`` gives the evidence of the first mismatch only when there is one.

The host buffer (the plain scales the calls read on the CPU) has two slots, and a case has one Sample per slot:
the next sample can be prepared while the worker still finishes the previous one (harness.parent.cases) without
writing anything that sample's calls read: the device inputs are copied into the worker's own memory before its
window, the host scales are in the other slot, and the expected outputs in the other Sample.

Draws: the correctness call uses the official generator's order, bit for bit (task.inputs.generate_input);
warm-up and timed samples draw the same distribution with a few kernels per group for all calls at once
(task.arena.draw_official), or, for full-range data, generate_input per call.
"""
from __future__ import annotations

import torch

from harness import protocol as P
from harness.buffers import SharedBuffer
from task.arena import Layout, Views, copy_plain, draw_official, reference_inputs, write_input
from task.inputs import generate_input
from task.reference import ReferencePlan, ref_kernel_many
from task.spec import Case


class SharedSet:
    """The three buffers the worker maps (device inputs, host scales, outputs), grown when a case needs more."""

    def __init__(self, device: torch.device):
        self.device = device
        self.buffers: dict[str, SharedBuffer] = {}
        self.retired: list[SharedBuffer] = []
        self.generation = 0

    def fits(self, *layouts: Layout) -> bool:
        need = self._sizes(layouts)
        return bool(self.buffers) and all(self.buffers[k].nbytes >= v for k, v in need.items())

    @staticmethod
    def _sizes(layouts) -> dict[str, int]:
        return {"device": max(x.device_bytes for x in layouts), "host": 2 * max(x.host_slot_bytes for x in layouts),
                "output": max(x.output_bytes for x in layouts)}

    def grow(self, *layouts: Layout) -> None:
        """New buffers as large as the largest of ``layouts`` needs (and no smaller than today's). The old ones
        are kept in ``retired`` until ``free_retired`` (call it once no worker maps them)."""
        sizes = {k: max(v, self.buffers[k].nbytes if k in self.buffers else 0)
                 for k, v in self._sizes(layouts).items()}
        self.retired += self.buffers.values()
        cpu = torch.device("cpu")
        self.buffers = {"device": SharedBuffer(sizes["device"], self.device),
                        "host": SharedBuffer(sizes["host"], cpu, pin=self.device.type == "cuda"),
                        "output": SharedBuffer(sizes["output"], self.device)}
        self.generation += 1

    def free_retired(self) -> None:
        for b in self.retired:
            b.close()
        self.retired = []

    def map_request(self) -> tuple[P.Map, list[int]]:
        """The Map message and the descriptors to send with it (memfd buffers, in field order)."""
        b = self.buffers
        fds = [x.fd for x in (b["device"], b["host"], b["output"]) if x.fd is not None]
        return P.Map(b["device"].ref(), b["host"].ref(), b["output"].ref()), fds

    def close(self) -> None:
        self.free_retired()
        for b in self.buffers.values():
            b.close()
        self.buffers = {}


class Sample:
    """One sample of ``case`` (``calls`` inputs) prepared in ``shared``, its host scales in host slot ``slot`` (0 or
    1): after ``prepare`` the worker's buffers hold the inputs and ``expected`` (fp16, the output buffer's layout)
    the reference outputs. ``host_offset``: where the slot starts in the host buffer (bytes)."""

    def __init__(self, case: Case, calls: int, data: str, device: torch.device, shared: SharedSet, slot: int = 0):
        self.case, self.data, self.device, self.shared, self.slot = case, data, device, shared, slot
        self.layout = Layout.of(case, calls)
        self.host_offset = slot * self.layout.host_slot_bytes
        self._private = torch.empty(self.layout.device_bytes, dtype=torch.uint8, device=device)
        self._expected = torch.empty(self.layout.output_bytes, dtype=torch.uint8, device=device)
        self._side = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._views: tuple[int, Views, list] | None = None  # (buffer generation, views, [ReferencePlan])
        self._plain: list[list[torch.Tensor]] | None = None
        self._c_drawn = False

    def _private_views(self) -> Views:
        """Views of the parent's buffers, built once per buffer generation (their Python objects cost ms)."""
        if self._views is None or self._views[0] != self.shared.generation:
            views = Views(self.layout, self._private, self._host(), self._expected)
            self._views = (self.shared.generation, views, [])
        return self._views[1]

    def prepare(self, seeds: list[int], official_order: bool) -> None:
        """Draw the inputs, compute the expected outputs, copy the inputs to the worker's buffers and wait for the
        device. ``seeds`` has one seed per call: with ``official_order`` (or full-range data) each input is drawn
        from its own seed by task.inputs.generate_input; otherwise the first seeds one generator for the whole
        sample (task.arena.draw_official)."""
        L, sh = self.layout, self.shared.buffers
        private = self._private_views()
        if official_order or self.data != "official":
            data = [generate_input(self.case.m, self.case.n, self.case.k, self.case.g, s, self.data, self.device)
                    for s in seeds]
            for j, x in enumerate(data):
                write_input(private, j, x)
            expected = ref_kernel_many(data)
        else:
            gen = torch.Generator(device=self.device).manual_seed(seeds[0])
            # c, the output buffer, is drawn once: nothing reads its initial values into a result
            self._plain = plain = draw_official(private, gen, self._plain, fill_c=not self._c_drawn)
            self._c_drawn = True
            self._copy_plain_aside(private, plain)
            cached = self._views[2]
            if not cached:  # views of the same tensors every sample, and the reference's launches: built once
                cached.append(ReferencePlan(reference_inputs(private, plain)))
            expected = cached[0].run()
        dst, src = [], []
        for j, outs in enumerate(expected):
            for g, out in enumerate(outs):
                dst.append(private.out[g][j])
                src.append(out)
        torch._foreach_copy_(dst, src)
        sh["device"].tensor[:L.device_bytes].copy_(self._private)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _copy_plain_aside(self, private: Views, plain) -> None:
        """The plain scales to the host buffer; on a GPU on a second stream, so the copy engine moves them while
        the reference computes (``plain`` stays referenced until prepare's final synchronize)."""
        if self.device.type != "cuda":
            copy_plain(private, plain)
            return
        self._side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._side):
            copy_plain(private, plain)

    def _host(self) -> torch.Tensor:
        return self.shared.buffers["host"].tensor[self.host_offset:]

    def got(self) -> torch.Tensor:
        """What the worker wrote to the output buffer for this sample: fp16, flat, the outputs' layout."""
        return self.shared.buffers["output"].tensor[:self.layout.output_bytes].view(torch.float16)

    def expected(self) -> torch.Tensor:
        """The reference outputs ``prepare`` computed: fp16, flat, the same layout as ``got``."""
        return self._expected.view(torch.float16)

    def views(self) -> tuple[Views, Views]:
        """(got, expected) as per-call, per-group views, for the evidence of a mismatch."""
        host = self._host()
        return (Views(self.layout, self._private, host, self.shared.buffers["output"].tensor),
                Views(self.layout, self._private, host, self._expected))


__all__ = ["SharedSet", "Sample"]
