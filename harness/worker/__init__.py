"""The UNTRUSTED side: the only code that imports a submission. Runs in its own process (python -m harness.worker).

It calls the submission on inputs the parent laid in its buffers, times the calls the way the official loop does,
copies what came back into the parent's output buffer and answers through an unsigned channel (harness.channel).
Once the submission is imported, all of it is the submission's to rewrite: its answers are claims the parent checks
against its own bracket (harness.parent.bracket). It never sees expected outputs or seeds and judges nothing.
"""
