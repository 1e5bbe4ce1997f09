"""The UNTRUSTED side: the only code that imports a submission. Runs in its own process (python -m harness.worker).

It generates inputs, calls the submission, times the calls and sends raw times and outputs back through an
authenticated channel (harness.channel). It never sees expected outputs and judges nothing.
"""
