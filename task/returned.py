"""What a submission returned, described in plain fields: the worker describes each returned object
(task.check.describe) and the parent judges the description (task.check.validate_container) without the object.
Imports nothing heavy, so the messages that carry it (harness.protocol) load without torch."""
from __future__ import annotations

from harness.problem import OutputMeta as _OutputMeta


#: It lives with the problem contract (harness.problem), which judges it; kept importable from here.
OutputMeta = _OutputMeta
