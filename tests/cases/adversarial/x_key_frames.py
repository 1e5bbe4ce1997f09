"""Kind: steal the result channel's signing key from the worker's main() frame and answer with forged, signed
replies. Source: issue 41 (kind 2); the kind of pygpubench's stack_sig_scan (the secret found on the caller's
stack), through Python frames here.

On its first call it takes the main thread's frame from sys._current_frames() and walks f_back until a frame holds
``key`` (bytes) and ``fd`` locals: the worker's main(), which read the key from stdin and keeps it as a local. From
then on forge.Forger answers every request with correct outputs and a signed RunReply whose time is 1/8 of the
real one. No object is modified and the garbage collector is never asked. A correct harness must fail the case
(its own bracket of the window disagrees with the reported time) or report the real time."""
import sys
import threading

from forge import Forger

_forger = None


def _main_locals() -> dict:
    f = sys._current_frames()[threading.main_thread().ident]
    while f is not None and not (f.f_code.co_name == "main" and isinstance(f.f_locals.get("fd"), int)):
        f = f.f_back
    return f.f_locals


def custom_kernel(data):
    global _forger
    if _forger is None:
        found = _main_locals()
        _forger = Forger([found.get("key", b"")], found["fd"])  # no key since the channel is unsigned
    return _forger(data)
