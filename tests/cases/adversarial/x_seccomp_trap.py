"""Kind: intercept the worker's result writes at the system-call level. Source: pygpubench's seccomp_trap.

On import this submission takes the channel's key and descriptor from the Writer (gc), keeps a duplicate of the
descriptor, installs a C-level SIGSYS handler with sigaction (a ctypes callback: Python's signal module, which the
guard scrubs, never sees it) and a seccomp filter that traps write() on the result descriptor alone (allowed
without privileges: the sandbox already set no_new_privs). Each reply the worker writes then lands in the handler,
which reads the buffer from the saved registers, divides a RunReply's ``elapsed_ns`` by 8, signs the frame again,
writes it to the duplicate and makes write() return the full count. Outputs are honest_torch's. x86-64 Linux only
(elsewhere it changes nothing). A correct harness must fail the case (its own bracket disagrees with the reported
time) or report the real time."""
import ctypes
import os
import platform
import struct

import forge
from honest_torch import custom_kernel  # noqa: F401

SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, NR_WRITE, SIGSYS, SA_SIGINFO = 317, 1, 1, 31, 4
RET_TRAP, RET_ALLOW = 0x00030000, 0x7FFF0000
GREGS, RSI, RDX, RAX = 40, 9, 12, 13  # ucontext_t: uc_mcontext.gregs at byte 40; REG_RSI, REG_RDX, REG_RAX

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.write.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_writer = forge.writer()
_key, _saved = _writer._key, os.dup(_writer._fd)


@HANDLER
def _on_sigsys(_sig, _info, context):
    regs = (ctypes.c_uint64 * 23).from_address(context + GREGS)
    count = regs[RDX]
    data = forge.rescaled(_key, ctypes.string_at(regs[RSI], count))
    done = 0
    while done < len(data):
        done += max(libc.write(_saved, data[done:], len(data) - done), 0)
    regs[RAX] = count


def _install(fd: int) -> None:
    action = ctypes.create_string_buffer(152)  # struct sigaction: handler, sa_mask (128), sa_flags, sa_restorer
    struct.pack_into("<Q", action, 0, ctypes.cast(_on_sigsys, ctypes.c_void_p).value)
    struct.pack_into("<i", action, 136, SA_SIGINFO)
    if libc.sigaction(SIGSYS, action, None) != 0:
        raise OSError(ctypes.get_errno(), "sigaction")
    program = b"".join(struct.pack("<HBBI", *insn) for insn in (
        (0x20, 0, 0, 0),                # load the system call number
        (0x15, 0, 3, NR_WRITE),         # write? else allow
        (0x20, 0, 0, 16),               # load args[0] (low half)
        (0x15, 0, 1, fd),               # our descriptor? else allow
        (0x06, 0, 0, RET_TRAP),
        (0x06, 0, 0, RET_ALLOW)))
    filt = ctypes.create_string_buffer(program)
    fprog = struct.pack("<HxxxxxxQ", len(program) // 8, ctypes.addressof(filt))
    if libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, 0, ctypes.c_char_p(fprog)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")


if platform.machine() == "x86_64":
    _install(_writer._fd)
