"""Kind (GPU): find the reference's buffers in device memory and zero them, then return zeros. Source: pygpubench's
gpu_scan_zeros (probe the device address space with cuMemGetAddressRange, memset what looks like the expected
outputs).

On its first call this submission probes the device addresses within 1 GiB of its own output, in 2 MiB steps, with
cuMemGetAddressRange_v2, and zeroes every allocation found except the one holding its inputs (the worker's scratch,
the L2-clear buffer, the buffers mapped from the parent); every call returns its c buffers zeroed, computing
nothing. In fp4bench the expected outputs live only in the parent's own memory, which no worker maps. A correct
harness must fail the case: the outputs are wrong and the reference is out of reach. On the CPU it returns zeros."""
import ctypes

import torch

_scanned = []


def _zero_neighbours(anchor: int) -> None:
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                          ctypes.c_uint64]
    cu.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
    base, size = ctypes.c_uint64(), ctypes.c_size_t()

    def allocation(ptr):
        return (base.value, size.value) if cu.cuMemGetAddressRange_v2(base, size, ptr) == 0 else None

    own = allocation(anchor)
    step, found = 2 << 20, set()
    for ptr in range(max(anchor - (1 << 30), step) & ~(step - 1), anchor + (1 << 30), step):
        hit = allocation(ptr)
        if hit and hit != own:
            found.add(hit)
    torch.cuda.synchronize()
    for b, n in found:
        cu.cuMemsetD8_v2(b, 0, n)
    torch.cuda.synchronize()


def custom_kernel(data):
    if torch.cuda.is_available() and not _scanned:
        _scanned.append(True)
        _zero_neighbours(data[0][0][2].data_ptr())
    out = []
    for _, _, c in data[0]:
        c.zero_()
        out.append(c)
    return out
