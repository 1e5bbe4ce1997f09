"""The parent's bracket rule (harness.parent.bracket): when strikes fail a case, on made-up samples (CPU)."""
from __future__ import annotations

import torch

from harness.parent.bracket import Bracket, Margin, Measured

CASE = "g2_n4096_k1536"
WINDOW_NS = 200_000.0
HONEST = Measured(bracket_ns=WINDOW_NS + 300_000, copy_ns=3_000, snapshot_ns=60_000)
FORGED = Measured(bracket_ns=WINDOW_NS + 900_000, copy_ns=3_000, snapshot_ns=60_000)
SLOW_COPY = Measured(bracket_ns=WINDOW_NS + 300_000, copy_ns=900_000, snapshot_ns=60_000)


def cuda_bracket() -> Bracket:
    """A CUDA bracket's rule without a GPU: gap 290 us, tolerance 20 us, 3 % of the window."""
    br = Bracket(torch.device("cpu"))
    br.cuda = True
    br.margin = Margin(290_000.0, 20_000.0, 0.03, 8, cuda=True)
    return br


def judge_all(br: Bracket, samples: list[Measured]) -> list[bool]:
    return [br.judge(CASE, WINDOW_NS, m)[0] for m in samples]


def test_the_margin_allows_the_gap_the_tolerance_the_share_of_the_window_and_the_absorbed_copy():
    m = Margin(290_000.0, 20_000.0, 0.03, 8, cuda=True)
    assert m.allowed_ns(WINDOW_NS, snapshot_ns=60_000, copy_ns=3_000) == 290_000 + 20_000 + 6_000 + 87_000
    assert m.copy_allowed_ns(60_000) == 2 * 290_000 + 2 * 60_000 + 100_000


SHAVED = Measured(bracket_ns=WINDOW_NS + 500_000, copy_ns=3_000, snapshot_ns=60_000)  # 1.24x its allowance


def test_a_grossly_forged_time_fails_at_the_third_sample():
    br = cuda_bracket()
    assert judge_all(br, [FORGED] * 3) == [False, False, True]
    assert br.judge(CASE, WINDOW_NS, FORGED)[1].startswith(
        "the time the worker reported disagrees with the parent's bracket in 4 of 4 samples (the last: window "
        "200.0 us, bracket 1100.0 us, more than the 403.0 us an honest worker leaves)")


def test_a_slightly_shaved_time_on_every_sample_fails_at_the_eighth():
    br = cuda_bracket()
    assert judge_all(br, [SHAVED] * 8) == [False] * 7 + [True]


def test_strikes_in_the_first_samples_then_none_pass():
    """Six strikes (1.24x over) in the first six samples, then 94 honest ones: no early failure, and 6 of 100 is
    within the 10 % the verdict allows."""
    br = cuda_bracket()
    assert not any(judge_all(br, [SHAVED] * 6 + [HONEST] * 94))
    assert br.verdict(CASE) == (False, "")


def test_strikes_spread_over_more_than_a_tenth_fail_once_the_case_is_done():
    br = cuda_bracket()
    assert not any(judge_all(br, ([FORGED] + [HONEST] * 7) * 12 + [HONEST] * 4))  # 12 of 100, never most
    assert br.gross[CASE] == 12
    fail, sentence = br.verdict(CASE)
    assert fail and "in 12 of 100 samples" in sentence


def test_a_short_case_that_strikes_every_sample_fails():
    br = cuda_bracket()
    assert judge_all(br, [SHAVED] * 3) == [False] * 3
    assert br.verdict(CASE)[0] is True


def test_slow_copies_fail_above_a_fifth_of_the_samples():
    within, beyond = cuda_bracket(), cuda_bracket()
    judge_all(within, ([SLOW_COPY] + [HONEST] * 4) * 20)  # 20 of 100
    judge_all(beyond, ([SLOW_COPY] * 2 + [HONEST] * 3) * 20)  # 40 of 100
    assert within.verdict(CASE) == (False, "")
    fail, sentence = beyond.verdict(CASE)
    assert fail and sentence.startswith("the worker's copy of its outputs after its window was too long in 40 of "
                                        "100 samples (the last: 900.0 us, more than the 800.0 us")


def test_a_struck_sample_is_charged_the_parents_bracket_less_the_gap_an_agreeing_one_its_window():
    """A forger who strikes too few samples to fail the case still gains nothing on them: each struck sample
    counts as the parent measured it (bracket - honest gap), never as the worker's claim."""
    br = cuda_bracket()
    assert br.charged_ns(WINDOW_NS, HONEST) == WINDOW_NS
    assert br.charged_ns(WINDOW_NS, FORGED) == WINDOW_NS + 900_000 - 290_000
    assert br.charged_ns(WINDOW_NS, SHAVED) == WINDOW_NS + 500_000 - 290_000
    never = Measured(bracket_ns=WINDOW_NS + 900_000, copy_ns=3_000, snapshot_ns=60_000, signalled=False)
    assert br.charged_ns(WINDOW_NS, never) == WINDOW_NS  # such a sample fails the case (judge) instead
