"""fp4bench's trusted side: finds variants, runs them in worker processes, times, checks, reports.

Nothing in this package imports a submission except harness.worker, which runs in its own process.
"""
