"""Cheat: returns tensor subclasses that would compute their values only when first read (after the timer)."""
import torch

from honest_torch import custom_kernel as _honest


class LazyTensor(torch.Tensor):
    pass


def custom_kernel(data):
    return [c.as_subclass(LazyTensor) for c in _honest(data)]
