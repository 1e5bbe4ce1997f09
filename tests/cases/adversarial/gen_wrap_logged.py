"""gen_precompute.py, counting: wraps the input generators it can find in the worker (task.inputs.generate_input
and generate_many, task.sample_buffers.draw_official) at import, and writes to WRAP_LOG how often any of them ran in
this process. The worker draws nothing (the parent does), so the count must stay 0."""
import os

import task.sample_buffers as _ta
import task.inputs as _ti
from honest_torch import custom_kernel as _honest

_calls = [0]


def _wrap(module, name):
    original = getattr(module, name)

    def wrapped(*args, **kwargs):
        _calls[0] += 1
        return original(*args, **kwargs)

    setattr(module, name, wrapped)


for _m, _n in ((_ti, "generate_input"), (_ti, "generate_many"), (_ta, "draw_official"), (_ta, "write_input")):
    _wrap(_m, _n)


def custom_kernel(data):
    with open(os.environ["WRAP_LOG"], "w") as f:
        f.write(str(_calls[0]))
    return _honest(data)
