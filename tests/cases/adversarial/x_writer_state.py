"""Kind: edit the state of the harness's result writer so that its own writes go through your code. Source:
pygpubench's file_struct (change the FILE* the harness prints its results through).

The channel's Writer keeps ``os.write`` as an instance attribute (``_write``) and its HMAC key as ``_key``. On import
this submission finds the Writer with gc.get_objects() and replaces its ``_write`` with a function that divides
a RunReply's ``elapsed_ns`` by 8, signs the frame again with the Writer's own key and writes it. The worker's
``send`` is the same bound method as before, so comparing the worker's attributes by identity sees nothing;
everything runs in the worker's main thread. Outputs are honest_torch's. A correct harness must fail the case
(its own bracket disagrees with the reported time) or report the real time."""
import forge
from honest_torch import custom_kernel  # noqa: F401

_writer = forge.writer()
_real_write = _writer._write


def _write(fd, data):
    data = bytes(data)
    view = memoryview(forge.rescaled(_writer._key, data))
    while view:
        view = view[_real_write(fd, view):]
    return len(data)  # all of what the Writer asked for, whatever length the new frame has


_writer._write = _write
