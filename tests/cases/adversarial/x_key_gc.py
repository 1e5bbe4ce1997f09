"""Kind: steal the result channel's signing key through the garbage collector and answer with forged, signed
replies. Source: issue 41 (kind 2); the kind of pygpubench's heap_sig_scan / aes_key_recovery (recover the
secret that authenticates results, then forge the result stream), through Python objects here.

At import, gc.get_objects() finds the channel's Writer (an object with ``_key`` bytes and ``_fd``): its HMAC key and
the result descriptor. From then on every request is answered by forge.Forger: correct outputs copied to the
output buffer, a RunReply signed with the stolen key whose time is 1/8 of the real one; the worker's own replies
are sent to /dev/null. Nothing of the harness is modified. A correct harness must not accept the worker's word for
the window's time (the key lives in the process the submission controls): it fails the case (its own bracket of
the window disagrees) or reports the real time."""
import forge
from forge import Forger

_writer = forge.writer()  # its key, if the channel still had one; b"" since it carries none
custom_kernel = Forger([_writer._key], _writer._fd)
