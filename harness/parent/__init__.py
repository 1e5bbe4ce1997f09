"""TRUSTED: finds variants, starts and confines workers, draws inputs, judges every output and every window.

Everything that decides a verdict or a time lives here, in the parent process; the worker only reports facts.
"""
