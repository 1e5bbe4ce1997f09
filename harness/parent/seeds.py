"""Seeds: the official secret-seed combination and the seed of every input a run generates.

Within one case every input gets its own seed, so no two calls ever see the same contents: the correctness
call uses the case seed s, as the official draw does; timed sample i, call j has seed s + 42 * (1 + i * calls + j),
warm-up inputs sit between those (+21), so warm-up contents never come back timed; and those seeds are drawn from
only through ``draw_seed``, keyed with a secret of the parent's. A timed run given no secret seed draws one
(``secret_for``): the spec seeds are public, so without it a submission could draw every sample itself before it is
sent; and with the keyed draws, recovering one sample's generator state from its bytes predicts no other sample.
"""
from __future__ import annotations

import hashlib
import math
import os
import secrets

from harness.parent.settings import TIMED_MODES

SECRET_ENV = "POPCORN_SEED"
#: torch.manual_seed accepts seeds below 2**64.
_SEED_LIMIT = 2**64


def combine(a: int, b: int) -> int:
    """The official combination of a case seed ``a`` and the secret seed ``b``: a + (a+b)(a+b+1)/2 (Cantor)."""
    return a + (a + b) * (a + b + 1) // 2


def secret_from_env(environ=os.environ) -> int | None:
    """POPCORN_SEED as an int, or None when unset. Raises ValueError naming the variable for a non-integer."""
    raw = environ.get(SECRET_ENV)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{SECRET_ENV} must be a non-negative integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{SECRET_ENV} must be a non-negative integer, got {value}")
    return value


def fresh_secret(case_seeds: list[int]) -> int:
    """A random secret seed for a timed run given none (--seed or POPCORN_SEED): without one every input follows
    from the public spec seeds, and a submission can draw the samples the parent will send before they are sent.
    Below 2**32 (torch's CPU generator keeps 32 bits of a seed) and small enough that ``case_seed`` of every one of
    ``case_seeds`` stays below 2**64."""
    room = math.isqrt(2 * _SEED_LIMIT) - 2 - max(case_seeds, default=0)  # combine(a, b) < 2**64 for a + b < room
    return secrets.randbelow(max(1, min(2**32, room)))


def secret_for(secret: int | None, mode: str, case_seeds: list[int]) -> int | None:
    """The secret seed a run of ``mode`` uses: ``secret`` when given; else, in a timed mode, a ``fresh_secret``;
    else None (test and profile modes draw the official cases' own inputs)."""
    return secret if secret is not None or mode not in TIMED_MODES else fresh_secret(case_seeds)


#: The parent's key for the draws of warm-up and timed samples, from the OS's randomness, per process: never in a
#: record, an environment or anything the worker reads.
_DRAW_KEY = secrets.token_bytes(32)


def draw_seed(seed: int) -> int:
    """The seed a warm-up or timed sample's input is actually drawn from: ``seed`` (``sample_seeds``'s, public
    arithmetic on the case seed) hashed with the parent's key (blake2b, 63 bits). Seeds of one case then share
    no arithmetic: a worker that recovers one sample's generator state from its bytes (a CPU generator's output
    gives it away) learns nothing of the next sample's, nor of the case seed. The correctness call keeps the
    official seed, bit for bit."""
    digest = hashlib.blake2b(seed.to_bytes(16, "little", signed=True), key=_DRAW_KEY, digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def case_seed(seed: int, secret: int | None) -> int:
    """The seed a case's inputs are drawn from: the spec's seed, combined with the secret when there is one."""
    s = seed if secret is None else combine(seed, secret)
    if s >= _SEED_LIMIT:
        if secret is None:
            raise ValueError(f"case seed {s} does not fit torch.manual_seed (expected < 2**64)")
        raise ValueError(f"case seed {seed} combined with secret seed {secret} gives {s}, which does not fit "
                         f"torch.manual_seed (expected < 2**64): the two must add up to less than about 6.07e9")
    return s


def sample_seeds(seed: int, sample: int, calls: int, warmup: bool = False) -> list[int]:
    """Seeds of the ``calls`` inputs of timed (or warm-up) sample number ``sample`` of a case seeded ``seed``."""
    base = seed + 42 * (1 + sample * calls) + (21 if warmup else 0)
    return [base + 42 * j for j in range(calls)]

