"""Kind: patch the timing guard's function pointers with ctypes. Source: issue 41 (kind 5); pygpubench's got_patch
(and test_canary_make_writeable: mprotect what you want to write).

The guard (harness/worker/guard.c, a shared object) reads the window's marks through function pointers in its own
writable data: on the CPU clock_gettime through its GOT, on a GPU cuEventElapsedTime through the driver table it
filled with dlsym. On its first call this submission finds the guard in /proc/self/maps, the slot (the GOT entry
from the ELF's relocations on disk, or the table entry by its value), makes the page writable with mprotect if
RELRO left it read-only, and stores there the address of a ctypes callback: a CLOCK_MONOTONIC that runs 8 times
slow, or an elapsed time divided by 8, for the guard alone. Outputs are honest_torch's. A correct harness must not
trust marks held in the submission's address space: it fails the case (its own bracket disagrees) or reports the
real time."""
import ctypes

import torch

import guardmem
from honest_torch import custom_kernel as _honest

_patched = []


def custom_kernel(data):
    if not _patched:  # after the first window has begun: the GPU table is filled then
        slot, fake = guardmem.timer_slot(torch.cuda.is_available())
        guardmem.make_writable(slot)
        ctypes.c_void_p.from_address(slot).value = fake
        _patched.append(slot)
    return _honest(data)
