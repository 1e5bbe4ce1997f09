"""Samples of a problem without sample buffers of its own (every plug but nvfp4_group_gemm; harness.problem's
SampleBuffers): inputs drawn by the plug, laid out by a harness.plan.Plan, the expected outputs from its reference.

The protection is samples.ArenaSample's: inputs drawn into the parent's own buffer, the expected outputs computed from
that copy, then the inputs copied to the worker's buffers with canaries planted in its operand tensors (every fp4
tensor of the input: ``float4_e2m1fn_x2``, what all NVFP4 problems multiply) until ``fix`` writes the true bytes
inside the parent's bracket; outputs judged from the parent's snapshot. Every input is drawn from its own seed by
the plug's ``generate`` (the official generator's order, call by call).
"""
from __future__ import annotations

import torch

from harness import protocol as P
from harness.parent.samples import CANARIES, SNAPSHOT_CHUNK, SharedSet, ArenaSample, _secret_generator
from harness.parent.seeds import draw_seed
from harness.plan import ALIGN, Plan, TensorPlace, output_views, up

#: The dtype of the operands canaries are planted in.
OPERAND_DTYPE = "torch.float4_e2m1fn_x2"

_plans: dict[tuple, Plan] = {}


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """The whole storage ``t`` views, as a flat uint8 tensor on its device."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def plan_of(plug, case, calls: int, data: str, device: torch.device) -> Plan:
    """The Plan of ``calls`` inputs of ``case``: its structure from one input drawn on ``device`` (cached per
    problem, case and data mode), its outputs from the plug's ``output_spec``."""
    key = (plug.name, case, data, str(device))
    if key not in _plans:
        template = plug.generate(case, case.seed, data, device)
        places: list[TensorPlace] = []
        ends = {"device": 0, "host": 0}

        def walk(x):
            if isinstance(x, torch.Tensor):
                where = "host" if x.device.type == "cpu" and device.type != "cpu" else "device"
                nbytes = x.untyped_storage().nbytes()
                places.append(TensorPlace(where, ends[where], nbytes, str(x.dtype), tuple(x.shape), tuple(x.stride()),
                                          x.storage_offset()))
                ends[where] = up(ends[where] + nbytes)
                return ["t", len(places) - 1]
            if isinstance(x, (tuple, list)):
                return ["tuple" if isinstance(x, tuple) else "list", [walk(y) for y in x]]
            return ["v", x]

        tree = walk(template)
        spec = plug.output_spec(case)
        outputs, end = [], 0
        for t in spec.tensors:
            outputs.append((end, t.dtype, t.shape))
            end = up(end + t.nbytes)
        _plans[key] = Plan(1, max(ends["device"], ALIGN), ends["host"], tree, tuple(places), spec.container,
                           tuple(outputs), max(end, ALIGN))
    one = _plans[key]
    return Plan(calls, one.device_stride, one.host_stride, one.tree, one.tensors, one.container, one.outputs,
                one.out_stride)


class PlainSample(ArenaSample):
    """One sample of ``case`` of problem ``plug`` (``calls`` inputs) in ``shared``, host slot ``slot``; the
    interface of samples.ArenaSample (``prepare``, ``fix``, ``take_snapshot``, ``changed``, ``got``, ``expected``)
    plus ``request`` and ``call_views`` for the judge."""

    def __init__(self, plug, case, calls: int, data: str, device: torch.device, shared: SharedSet, slot: int = 0):
        self.plug, self.case, self.data, self.device, self.shared, self.slot = plug, case, data, device, shared, slot
        self.layout = self.plan = plan_of(plug, case, calls, data, device)
        self.host_offset = slot * self.plan.host_slot_bytes
        self._private = torch.empty(self.plan.device_bytes, dtype=torch.uint8, device=device)
        self._private_host = torch.empty(self.plan.host_slot_bytes, dtype=torch.uint8)
        self._expected = torch.zeros(self.plan.output_bytes, dtype=torch.uint8, device=device)
        self._secret = _secret_generator(device)
        self._regions = self._canary_regions()
        self._canary = None
        self._order: list[int] = []

    def request(self, kind: str, watch: bool = True, ahead: bool = False) -> P.Run:
        """The Run request for this sample."""
        return P.Run((), self.plan.calls, kind, watch=watch, host_offset=self.host_offset, ahead=ahead,
                     plan=self.plan.to_json())

    def prepare(self, seeds: list[int], official_order: bool = True, publish: bool = True) -> None:
        """Draw one input per seed (the plug's ``generate``), compute the expected outputs (its ``reference``),
        copy the inputs to the worker's buffers with canaries (``publish``, as ArenaSample.prepare) and wait for
        the device. Every input comes from its own seed: the seed itself with ``official_order`` (the correctness
        call, bit-identical to the official draw), else ``seeds.draw_seed`` of it (warm-up and timed samples)."""
        plan = self.plan
        for j, seed in enumerate(seeds):
            data = self.plug.generate(self.case, seed if official_order else draw_seed(seed), self.data, self.device)
            leaves = []
            _leaves(data, leaves)
            for place, t in zip(plan.tensors, leaves):
                buf, stride = (self._private, plan.device_stride) if place.where == "device" else \
                    (self._private_host, plan.host_stride)
                start = j * stride + place.offset
                buf[start:start + place.nbytes].copy_(_storage_bytes(t))
            out = self.plug.reference(data)
            outs = [out] if plan.container == "tensor" else list(out)
            for view, o in zip(output_views(plan, j, self._expected), outs):
                view.copy_(o)
        if publish:
            self.publish()
        elif self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def publish(self, sync: bool = True) -> None:
        """Copy the prepared inputs (device and host) into the worker's buffers and plant the canaries, on the
        current stream; with ``sync``, wait for the device (ArenaSample.publish)."""
        plan = self.plan
        self.shared.buffers["device"].tensor[:plan.device_bytes].copy_(self._private)
        if plan.host_stride:
            host = self.shared.buffers["host"].tensor
            host[self.host_offset:self.host_offset + plan.host_slot_bytes].copy_(self._private_host)
        self._plant()
        if sync and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _canary_regions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, length) in bytes of every call's operand tensors (OPERAND_DTYPE) in the device buffer."""
        starts, lengths = [], []
        for j in range(self.plan.calls):
            for t in self.plan.tensors:
                if t.where == "device" and t.dtype == OPERAND_DTYPE:
                    starts.append(j * self.plan.device_stride + t.offset)
                    lengths.append(t.nbytes)
        as_t = lambda v: torch.tensor(v, dtype=torch.int64, device=self.device).repeat_interleave(CANARIES)  # noqa
        return as_t(starts), as_t(lengths)

    def _plant(self) -> None:
        if self._regions[0].numel():
            super()._plant()
        else:
            self._canary = None
            self._order = list(range(-(-self.plan.output_bytes // SNAPSHOT_CHUNK)))

    def got(self) -> torch.Tensor:
        """The worker's outputs at the end of the parent's bracket (``snapshot``): flat bytes, the plan's layout."""
        return self.shared.snapshot[:self.plan.output_bytes]

    def expected(self) -> torch.Tensor:
        """The reference outputs ``prepare`` computed: flat bytes, the same layout as ``got``."""
        return self._expected

    def call_views(self, call: int) -> tuple[object, object]:
        """(got, expected) of call ``call`` as the problem's output_t (a tensor, or a list of tensors)."""
        got = output_views(self.plan, call, self.shared.snapshot)
        exp = output_views(self.plan, call, self._expected)
        return (got[0], exp[0]) if self.plan.container == "tensor" else (got, exp)


def _leaves(x, out: list) -> None:
    """The tensors of a nest of tuples and lists, in the order harness.plan's tree numbers them."""
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (tuple, list)):
        for y in x:
            _leaves(y, out)


__all__ = ["PlainSample", "plan_of"]
