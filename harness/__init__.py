"""fp4bench's harness. Data flows one way (tests/harness/test_layering.py holds it):

- ``protocol``, ``channel``, ``buffers``, ``confine``: the boundary, shared by both sides (leaves).
- ``problem``: the contract a problem plug satisfies; ``plugs``: the registry, the harness's only way to a problem
  (``problems/<name>/plug.py``, imported by name). No harness module imports ``problems`` or ``task``.
- ``worker``: UNTRUSTED, the only code that imports a submission, in its own process; its replies are claims.
- ``parent``: TRUSTED, starts workers, draws inputs, times every window itself, judges.
- ``results``: records, statistics, rankings, the store. ``report``: how results are shown. ``cli``: commands.
"""
from pathlib import Path

#: The repository root: configs/, submissions/ and the default results store live under it.
ROOT = Path(__file__).resolve().parent.parent
