"""``task`` for a submission: the run's problem package, as the official runner's task.py is.

The official runner writes the problem's ``task.py`` beside ``submission.py``, so a submission says ``from task
import input_t, output_t``; fp4bench's nvfp4_group_gemm variants also import ``task.formats`` (export inlines it).
``alias_task(name)`` makes ``import task``, ``from task import input_t`` and ``import task.<sub>`` resolve to the
package ``problems.<name>`` and its submodules: the same module objects under a second name, never a second copy
(a submodule's state, e.g. a cache, is shared). The worker calls it before it imports a submission; tests and tools
that import a submission file themselves call it too.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

from harness import plugs

#: The name a submission imports its problem by.
ALIAS = "task"


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """First on ``sys.meta_path``: finds ``task.<sub>`` as ``<package>.<sub>``, imported under its own name and
    handed back as it is (``exec_module`` runs nothing); a ``task.<sub>`` the package lacks is missing, whatever
    another finder (an editable install's, a folder on sys.path) would find. Other names are left to the others."""

    def __init__(self) -> None:
        self.package = ""

    def find_spec(self, fullname, path=None, target=None):
        if not self.package or not fullname.startswith(ALIAS + "."):
            return None
        real = self.package + fullname[len(ALIAS):]
        if importlib.util.find_spec(real) is None:
            raise ModuleNotFoundError(f"No module named {fullname!r} ({ALIAS} is {self.package})", name=fullname)
        return importlib.util.spec_from_loader(fullname, self, origin=real)

    def create_module(self, spec) -> ModuleType:
        return importlib.import_module(spec.origin)

    def exec_module(self, module: ModuleType) -> None:
        pass


_finder = _Finder()


def alias_task(name: str) -> ModuleType:
    """Make ``task`` (and ``task.<sub>``) problem ``name``'s package ``problems.<name>``; returns that package.

    Replaces an earlier alias: ``task`` modules imported before keep the objects they hold, later imports see the
    new problem. Raises CaseError (harness.problem) naming the known problems for an unknown ``name``."""
    plugs.get(name)
    package = importlib.import_module(f"{plugs.PACKAGE}.{name}")
    for key in [k for k in sys.modules if k == ALIAS or k.startswith(ALIAS + ".")]:
        del sys.modules[key]
    sys.modules[ALIAS] = package
    _finder.package = package.__name__
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    return package
