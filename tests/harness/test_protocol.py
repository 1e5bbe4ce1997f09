"""harness.protocol: messages round-trip, and anything else is refused with what was expected and what came."""
from __future__ import annotations

import pytest

from harness import protocol as P
from harness.protocol import BufferRef
from harness.problem import OutputMeta


def test_round_trip_keeps_types():
    reply = P.RunReply(1500.0, 15, (P.Container("builtins.list", True),),
                       ((OutputMeta("torch.Tensor", True, "torch.float16", (4, 8, 1), "cuda:0"),),), ((True,),), 0,
                       ("sys.setprofile hook",), ("sys.addaudithook",), (), (), 120.5, "")
    back = P.decode(P.encode(reply), (P.RunReply,))
    assert back == reply and back.metas[0][0].shape == (4, 8, 1) and back.kernel_ns == 120.5
    assert back.containers[0] == P.Container("builtins.list", True, "") and back.refused == ("sys.addaudithook",)
    failed = P.Failed("entry", "MissingEntryPoint", "", callables=("kernel", "helper"))
    assert P.decode(P.encode(failed), (P.Failed,)) == failed
    m = P.Map(BufferRef("cuda", 10, 0, "ab" * 64), BufferRef("memfd", 5), BufferRef("memfd", 2))
    assert P.decode(P.encode(m)) == m
    run = P.Run(((64, 128, 256), (40, 256, 512)), 15, "time", watch=False, host_offset=8192, ahead=True, seq=7)
    assert P.decode(P.encode(run), (P.Run,)) == run and P.encode(P.Closed(2.5)) == '{"msg":"Closed","elapsed_ns":2.5}'
    assert P.decode('{"msg": "Closed"}', (P.Closed,)) == P.Closed(0.0)
    cal = P.Calibrate(3, BufferRef("cuda", 16, 0, "cd" * 64), profiler=True)
    assert P.decode(P.encode(cal), (P.Calibrate,)) == cal
    assert P.decode('{"msg": "Calibrate", "seq": 1}', (P.Calibrate,)).flags == P.NO_BUFFER
    load = P.Load("/x/submission.py", "nvfp4_gemm")  # the worker's ``task`` is that problem's package
    assert P.decode(P.encode(load), (P.Load,)) == load
    assert P.decode('{"msg": "Load", "path": "s.py"}', (P.Load,)).problem == "nvfp4_group_gemm"


@pytest.mark.parametrize("line, message", [
    ('{"msg": "Run", "sizes": [[1, 8, 64]], "calls": "15", "kind": "time"}', "Run.calls: expected int, got str"),
    ('{"msg": "Run", "sizes": [[1, 8, 64]], "kind": "time"}', "Run: object missing required field calls"),
    ('{"msg": "Load", "path": "x", "evil": 1}', "Load: unknown field(s) ['evil']"),
    ('{"msg": "Calibrate", "seq": 1, "profiler": "yes"}', "Calibrate.profiler: expected bool, got str"),
    ('{"msg": "Nope"}', "expected one of Calibrate, Load, Map, Run, Exit, Loaded, Failed, Mapped, Closed, RunReply, "
                        "Oversized, got 'Nope'"),
    ('[1, 2]', "expected a message object with a 'msg' name, got '[1, 2]'"),
    ('not json', "expected a JSON message, got 'not json'"),
])
def test_bad_messages_are_refused_with_a_reason(line, message):
    with pytest.raises(P.ProtocolError) as err:
        P.decode(line)
    assert str(err.value).startswith(message)


def test_expected_classes_are_enforced():
    with pytest.raises(P.ProtocolError, match="expected one of RunReply, Failed, got 'Loaded'"):
        P.decode(P.encode(P.Loaded("cpu", "native")), (P.RunReply, P.Failed))


def test_a_nested_field_is_checked_where_it_is():
    with pytest.raises(P.ProtocolError, match=r"^RunReply.metas\[0\]\[0\].type_name: expected str, got int$"):
        P.from_dict({"msg": "RunReply", "elapsed_ns": 1.0, "calls": 1, "containers": [],
                     "metas": [[{"type_name": 3, "plain_tensor": True}]], "copied": []})
    with pytest.raises(P.ProtocolError, match=r"^Run.sizes\[0\]\[0\]: expected int, got float$"):
        P.decode('{"msg": "Run", "sizes": [[1.5, 8, 64]], "calls": 15, "kind": "time"}')


def test_a_bool_is_not_a_number():
    with pytest.raises(P.ProtocolError, match=r"RunReply.elapsed_ns: expected float, got bool"):
        P.from_dict({"msg": "RunReply", "elapsed_ns": True, "calls": 1, "containers": [], "metas": [],
                     "copied": []})
