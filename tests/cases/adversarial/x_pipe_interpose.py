"""Kind: interpose a pipe between the worker and the parent. Source: pygpubench's pipe_interpose (dup2 a pipe over
the result descriptor, a thread filters what the harness writes); its thread_fd (a background thread watching the
result stream) is the same kind.

On import this submission takes the channel's key and descriptor from the Writer (gc), keeps a duplicate of the
descriptor and dup2()s a new pipe over it, so the worker's frames now go to the pipe. A thread reads them, divides
each RunReply's ``elapsed_ns`` by 8, signs the frame again with the key and writes it to the real pipe. The
thread works right after each reply, outside the timed window, so the thread watch may see it; the forged time is
there either way. Outputs are honest_torch's. A correct harness must fail the case: its own bracket disagrees with
the reported time, or the thread's work outside the window is seen."""
import os
import struct
import threading

import forge
from honest_torch import custom_kernel  # noqa: F401

_writer = forge.writer()
_saved = os.dup(_writer._fd)
_read, _write = os.pipe()
os.dup2(_write, _writer._fd)
os.close(_write)


def _read_exactly(n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(_read, n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _filter() -> None:
    prefix = len(forge.MAGIC) + 16  # the unsigned layout of harness/channel.py
    try:
        while True:
            head = _read_exactly(prefix)
            hlen, plen = struct.unpack_from("<QQ", head, len(forge.MAGIC))
            data = forge.rescaled(_writer._key, head + _read_exactly(hlen + plen))
            view = memoryview(data)
            while view:
                view = view[os.write(_saved, view):]
    except (EOFError, OSError):
        return


threading.Thread(target=_filter, daemon=True, name="interpose").start()
