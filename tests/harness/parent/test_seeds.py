"""Seeds (harness.parent.seeds): the secret combination, a fresh seed per call."""
import pytest

from harness.parent.seeds import case_seed, combine, sample_seeds, secret_from_env


def test_cantor_combination():
    assert combine(1111, 0) == 1111 + 1111 * 1112 // 2
    assert combine(0, 0) == 0 and combine(1, 2) == 1 + 3 * 4 // 2 and combine(2, 1) == 8
    assert case_seed(1111, None) == 1111 and case_seed(1111, 5) == combine(1111, 5)


def test_secret_from_env():
    assert secret_from_env({}) is None
    assert secret_from_env({"POPCORN_SEED": "42"}) == 42
    with pytest.raises(ValueError, match="POPCORN_SEED must be a non-negative integer, got 'abc'"):
        secret_from_env({"POPCORN_SEED": "abc"})


def test_every_input_seed_is_fresh():
    s = 1111
    timed = [x for i in range(100) for x in sample_seeds(s, i, 15)]
    warm = [x for i in range(3) for x in sample_seeds(s, i, 15, warmup=True)]
    assert sample_seeds(s, 0, 3) == [s + 42, s + 84, s + 126]  # the official sequence
    assert len(set(timed)) == len(timed) and not set(timed) & set(warm) and s not in timed + warm


def test_a_combined_seed_too_large_names_both_seeds_and_the_bound():
    assert case_seed(6_000_000_000, 70_000_000) < 2**64  # a sum under 6.07e9 fits
    with pytest.raises(ValueError, match=r"^case seed 6000000000 combined with secret seed 80000000 gives \d+, which "
                                         r"does not fit torch.manual_seed \(expected < 2\*\*64\): the two must add up "
                                         r"to less than about 6.07e9$"):
        case_seed(6_000_000_000, 80_000_000)


def test_a_timed_run_given_no_secret_draws_one_and_the_other_modes_do_not():
    """Without a secret every input follows from the public spec seeds; a timed run draws one (below 2**32,
    and small enough that every case seed combined with it fits torch), keeps one it was given, and test or
    profile runs draw the official cases' own inputs."""
    from harness.parent.seeds import secret_for
    drawn = {secret_for(None, mode, [1111, 7]) for mode in ("benchmark", "leaderboard", "compare") for _ in range(5)}
    assert len(drawn) > 1 and all(0 <= s < 2**32 for s in drawn)
    assert secret_for(None, "test", [1111]) is None and secret_for(None, "profile", [1111]) is None
    assert secret_for(12345, "leaderboard", [1111]) == 12345
    big = 6_000_000_000  # a spec seed near the limit: the secret shrinks so the combination still fits
    assert case_seed(big, secret_for(None, "benchmark", [big])) < 2**64
