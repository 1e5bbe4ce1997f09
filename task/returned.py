"""What a submission returned, described in plain fields: the worker describes each returned object
(task.check.describe) and the parent judges the description (task.check.validate_container) without the object.
Imports nothing heavy, so the messages that carry it (harness.protocol) load without torch."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutputMeta:
    """What one returned object was, as the worker saw it (so the parent can judge without the object)."""

    type_name: str
    plain_tensor: bool      # exactly torch.Tensor (no subclass)
    dtype: str = ""
    shape: tuple[int, ...] = ()
    device: str = ""
    tensor_subclass: bool = False   # a subclass of torch.Tensor (its dtype/shape are not read: its code)
