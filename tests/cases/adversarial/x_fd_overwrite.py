"""Kind: write fake results to every descriptor, then exit before the harness runs. Source: pygpubench's
fd_overwrite (find the pipes by fstat, write a fake result, os._exit(0) at import).

At import this submission writes to every pipe it holds a complete, well-formed result frame (fp4bench's framing
from harness/channel.py: a Loaded reply, then a RunReply with a tiny time) signed with a key of its own guess,
plus ``check: pass`` lines, and exits with status 0 before the worker could answer anything. No frame carries the
channel's key, so the parent must skip them all as stray bytes. A correct harness must not take any of it as a
result: the case ends without a time (today as a CRASH, "the worker process exited with code 0"; the test asks for
a FAIL that says why)."""
import os
import secrets
import stat

import forge

_fake = [{"msg": "Loaded", "device": "cpu", "window": "native"},
         {"msg": "RunReply", "elapsed_ns": 15.0, "calls": 1, "containers": [], "metas": [], "copied": []}]
_payload = b"".join(forge.frame(secrets.token_bytes(32), h) for h in _fake) + b"check: pass\n" * 4

for fd in range(3, 256):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, _payload)
    except OSError:
        continue
os._exit(0)
