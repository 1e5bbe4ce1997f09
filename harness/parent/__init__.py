"""TRUSTED: finds variants, starts and confines workers, draws inputs, judges every output and every window.

Everything that decides a verdict or a time lives here, in the parent process; the worker only reports facts.
One case's lifecycle: ``session`` (a worker with the submission loaded), ``case_runner`` (a case's phases:
correctness, warm-up, timed samples, each reply judged), ``case_attempt`` (one case to its result); ``runner`` and
``compare`` are the two schedules over it; ``judge`` turns the worker's facts into every verdict and message.
"""
