"""Helper of the x_guard_*.py and x_ptrace.py cases (not a submission itself): where the worker's timing guard
(harness/worker/guard.c, built into guard-*.so) lies in this process's memory, and slow stand-ins for what it
reads its marks with.

``timer_slot()`` is the pointer the guard calls to read the window: on the CPU the GOT slot of clock_gettime, on a
GPU the ``cu.event_elapsed_ms`` entry of the driver table it fills with dlsym (found by its value), each paired
with a replacement that makes the window read 1/8 of the real time. Reads only /proc/self/maps, the guard's file
(ELF section headers and relocations) and ctypes."""
import ctypes
import struct
import time

PAGE = 4096
SLOW = 8.0
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def maps() -> list[tuple[int, int, str, str]]:
    """(start, end, perms, path) of every mapping."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in parts[0].split("-"))
            out.append((start, end, parts[1], parts[5].strip() if len(parts) > 5 else ""))
    return out


def guard() -> tuple[str, int]:
    """(path, load address) of the guard's shared object."""
    found = [(s, p) for s, _, _, p in maps() if "/guard-" in p and p.endswith(".so")]
    if not found:
        raise RuntimeError("the guard's shared object is not mapped")
    start, path = min(found)
    return path, start


def writable_regions() -> list[tuple[int, int]]:
    """The guard's writable data: its rw mappings and the anonymous mapping right after them (the rest of .bss)."""
    path, _ = guard()
    regions, all_maps = [], maps()
    for i, (s, e, perms, p) in enumerate(all_maps):
        if p == path and "w" in perms:
            regions.append((s, e))
            nxt = all_maps[i + 1] if i + 1 < len(all_maps) else None
            if nxt and nxt[0] == e and nxt[3] == "" and "w" in nxt[2]:
                regions.append((nxt[0], nxt[1]))
    return regions


def got_slot(symbol: str) -> int:
    """The address of ``symbol``'s slot in the guard's global offset table (its .rela.plt / .rela.dyn entry)."""
    path, base = guard()
    elf = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
    dynsym = next(s for s in sections if s[1] == 11)  # SHT_DYNSYM
    strtab = sections[dynsym[6]]
    index = None
    for i in range(dynsym[5] // 24):
        name_at, = struct.unpack_from("<I", elf, dynsym[4] + 24 * i)
        start = strtab[4] + name_at
        if elf[start:elf.index(b"\0", start)] == symbol.encode():
            index = i
            break
    for s in sections:
        if s[1] == 4:  # SHT_RELA
            for j in range(s[5] // 24):
                offset, info, _ = struct.unpack_from("<QQq", elf, s[4] + 24 * j)
                if info >> 32 == index:
                    return base + offset
    raise RuntimeError(f"no relocation for {symbol} in {path}")


def make_writable(addr: int) -> None:
    """mprotect the page of ``addr`` read-write if it is not (a GOT under full RELRO is read-only)."""
    for s, e, perms, _ in maps():
        if s <= addr < e and "w" not in perms:
            if libc.mprotect(addr & ~(PAGE - 1), PAGE, 3) != 0:
                raise OSError(ctypes.get_errno(), "mprotect")


class timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


CLOCK_GETTIME = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(timespec))
_real_clock = CLOCK_GETTIME(("clock_gettime", libc))
_since = time.monotonic_ns()


@CLOCK_GETTIME
def slow_clock(clock_id, ts):
    """clock_gettime for the guard alone: CLOCK_MONOTONIC runs SLOW times slower than the real one."""
    rc = _real_clock(clock_id, ts)
    if rc == 0 and clock_id == time.CLOCK_MONOTONIC:
        now = ts.contents.tv_sec * 10**9 + ts.contents.tv_nsec
        fake = _since + int((now - _since) / SLOW)
        ts.contents.tv_sec, ts.contents.tv_nsec = divmod(fake, 10**9)
    return rc


def address(cfunc) -> int:
    return ctypes.cast(cfunc, ctypes.c_void_p).value


ELAPSED = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p)
_elapsed = []


@ELAPSED
def slow_elapsed(ms, start, end):
    """cuEventElapsedTime for the guard alone: SLOW times less than the real one."""
    rc = _elapsed[0](ms, start, end)
    if rc == 0:
        ms[0] = ms[0] / SLOW
    return rc


def cu_slot(name: str) -> int:
    """Where the guard keeps the driver function ``name`` (dlsym'd at its first CUDA window): the word of its
    writable data equal to that function's address."""
    driver = ctypes.CDLL("libcuda.so.1")
    want = address(getattr(driver, name))
    for start, end in writable_regions():
        words = (ctypes.c_uint64 * ((end - start) // 8)).from_address(start)
        for i, w in enumerate(words):
            if w == want:
                return start + 8 * i
    raise RuntimeError(f"{name} not found in the guard's data")


def timer_slot(cuda: bool) -> tuple[int, int]:
    """(the address of the pointer the guard reads its window through, the address to put there instead)."""
    if not cuda:
        return got_slot("clock_gettime"), address(slow_clock)
    driver = ctypes.CDLL("libcuda.so.1")
    for name in ("cuEventElapsedTime_v2", "cuEventElapsedTime"):
        try:
            slot = cu_slot(name)
        except (AttributeError, RuntimeError):
            continue
        _elapsed.append(ELAPSED((name, driver)))
        return slot, address(slow_elapsed)
    raise RuntimeError("the guard's cuEventElapsedTime pointer was not found")
