"""Kind: write the timing guard's memory through /proc/self/mem. Source: issue 41 (kind 5); pygpubench's
proc_mem_bypass (/proc/self/mem writes ignore page protections, so neither RELRO nor mprotect nor mseal stops them).

The same target as x_guard_got.py by another road: the pointer through which the guard reads the window (the GOT
slot of clock_gettime on the CPU, its cuEventElapsedTime table entry on a GPU) gets the address of a replacement
that makes the window read 1/8 of the real time, written with pwrite on /proc/self/mem (the worker may write its
own /proc entry: CUDA needs it) without changing any page's protection. Outputs are honest_torch's. A correct
harness must fail the case (its own bracket disagrees) or report the real time."""
import os
import struct

import torch

import guardmem
from honest_torch import custom_kernel as _honest

_patched = []


def custom_kernel(data):
    if not _patched:
        slot, fake = guardmem.timer_slot(torch.cuda.is_available())
        fd = os.open("/proc/self/mem", os.O_RDWR)
        os.pwrite(fd, struct.pack("<Q", fake), slot)
        os.close(fd)
        _patched.append(slot)
    return _honest(data)
