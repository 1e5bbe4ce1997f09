"""The problems fp4bench serves, one folder each: ``problems/<name>/plug.py`` defines ``PROBLEM``, the problem behind
harness/problem.py's contract; folders starting with ``_`` hold code several problems share. The harness finds a
plug by name (harness.plugs) and never imports a problem by an import statement. Nothing here imports torch."""
