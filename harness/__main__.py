"""``python -m harness ...`` from the repo root, with no install: a missing dependency is named in one line."""
import sys

try:
    from harness.cli.commands import main
except ModuleNotFoundError as exc:
    sys.exit(f"fp4bench: the Python package {exc.name!r} is missing; install the project (pip install -e .) or "
             f"that package (pip install {exc.name}; pyproject.toml lists every dependency)")

main()
