"""Seeds: the official secret-seed combination and the seed of every input a run generates.

Within one case every input gets its own seed, so no two calls ever see the same contents: the correctness
call uses the case seed s; timed sample i, call j uses s + 42 * (1 + i * calls + j) (sample 0 is the official
sequence, seed + 42 each); warm-up inputs sit between those (+21), so warm-up contents never come back timed.
"""
from __future__ import annotations

import os

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

