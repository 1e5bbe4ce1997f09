"""Kind: inline detour of the timer's code. Source: pygpubench's function_detour (overwrite the prologue of the
function that reads the elapsed time with a jump to your own).

The guard's ``elapsed_ns`` (C) returns the window's time. This submission takes its C entry point from the builtin
function object (PyCFunctionObject.m_ml->ml_meth), makes that page of the guard's code writable with mprotect,
and writes over its first 12 bytes ``movabs rax, <callback>; jmp rax`` (x86-64), the callback being a ctypes
function that returns the submission's own measure of the window divided by 8. Outputs are honest_torch's. A
correct harness must not take the time from code in the submission's address space: it fails the case (its own
bracket disagrees) or reports the real time. Elsewhere than x86-64 it changes nothing."""
import ctypes
import gc
import platform
import struct
import time

import guardmem
from honest_torch import custom_kernel as _honest

_span = {"first": 0, "last": 0}
ELAPSED_NS = ctypes.CFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p)


@ELAPSED_NS
def _fake_elapsed(_self, _unused):
    return float((_span["last"] - _span["first"]) / 8)


def _detour() -> None:
    guard = next(m for m in gc.get_objects() if type(m).__name__ == "module" and getattr(m, "HELD_IN", "") == "C")
    method_def = ctypes.c_void_p.from_address(id(guard.elapsed_ns) + 16).value  # PyCFunctionObject.m_ml
    code = ctypes.c_void_p.from_address(method_def + 8).value                  # PyMethodDef.ml_meth
    if guardmem.libc.mprotect(code & ~(guardmem.PAGE - 1), 2 * guardmem.PAGE, 7) != 0:
        raise OSError(ctypes.get_errno(), "mprotect")
    ctypes.memmove(code, b"\x48\xb8" + struct.pack("<Q", guardmem.address(_fake_elapsed)) + b"\xff\xe0", 12)


if platform.machine() == "x86_64":
    _detour()


def custom_kernel(data):
    start = time.perf_counter_ns()
    if start - _span["last"] > 1_000_000:  # more than 1 ms since the last call returned: a new window
        _span["first"] = start
    out = _honest(data)
    _span["last"] = time.perf_counter_ns()
    return out
