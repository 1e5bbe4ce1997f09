"""TRUSTED: finds variants, starts and confines workers, draws inputs, judges every output and every window.

Everything that decides a verdict or a time lives here, in the parent process; the worker only reports facts.
``cases`` is one case's lifecycle (load, correctness, warm-up, timed samples); ``runner`` and ``compare`` are the
two schedules over it; ``judge`` turns the worker's facts into every verdict and message.
"""
