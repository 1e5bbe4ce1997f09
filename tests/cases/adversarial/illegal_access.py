"""Fault (GPU): a kernel reads far outside its allocation: a sticky CUDA error that poisons the context.
The harness must fail this case with the CUDA error and run the next case in a fresh worker."""
import torch


def custom_kernel(data):
    a = data[0][0][0]
    if a.device.type != "cuda":
        raise RuntimeError("illegal_access needs a GPU")
    import triton
    import triton.language as tl

    @triton.jit
    def _bad(ptr):
        tl.store(ptr + (1 << 40), 1.0)

    _bad[(1,)](torch.empty(1, device=a.device))
    torch.cuda.synchronize()
    return []
