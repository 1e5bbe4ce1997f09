"""Kind: patch the worker from another process with ptrace. Source: pygpubench's ptrace (a forked helper attaches
to the benchmark process and pokes its memory; PTRACE_POKEDATA ignores page protections).

On its first call this submission makes the worker dumpable again (prctl: the sandbox made it non-dumpable, which
the process may undo for itself), forks a child that PTRACE_ATTACHes to the worker, writes with PTRACE_POKEDATA the
address of a slow replacement into the pointer the guard reads its window through (guardmem.timer_slot: the GOT
slot of clock_gettime on the CPU, the cuEventElapsedTime table entry on a GPU), detaches and exits. From then on
the window reads 1/8 of the real time. Outputs are honest_torch's. Where ptrace is refused the patch does not
happen and the time is real. A correct harness must fail the case (its own bracket disagrees) or report the real
time."""
import ctypes
import os
import signal

import torch

import guardmem
from honest_torch import custom_kernel as _honest

PTRACE_POKEDATA, PTRACE_ATTACH, PTRACE_DETACH, PR_SET_DUMPABLE = 5, 16, 17, 4
_done = []


def _poke(slot: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    child = os.fork()
    if child == 0:
        signal.alarm(5)
        code = 1
        target = os.getppid()
        if libc.ptrace(PTRACE_ATTACH, target, None, None) == 0:
            os.waitpid(target, 0x40000000)  # __WALL: wait for the stop
            code = 0 if libc.ptrace(PTRACE_POKEDATA, target, slot, value) == 0 else 2
            libc.ptrace(PTRACE_DETACH, target, None, None)
        os._exit(code)
    os.waitpid(child, 0)


def custom_kernel(data):
    if not _done:
        _done.append(True)
        _poke(*guardmem.timer_slot(torch.cuda.is_available()))
    return _honest(data)
