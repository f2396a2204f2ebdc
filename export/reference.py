"""Importing a family's reference implementation (its upstream package, used by export and parity checks) when
that package imports, at import time, modules the served models never use (and that need not be installed).

`stubbed_imports` puts inert stand-ins for exactly those modules in place while the package is first imported,
then removes them again.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import sys
import types
from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def stubbed_imports(module: str, stubbed: Sequence[str]) -> Iterator[None]:
    """Import `module`, unless it already is, while each module of `stubbed` not imported yet stands in as an
    empty module (a dotted one also as its parent's attribute); the stand-ins are removed once `module` is
    imported: it keeps its own references, and later imports of the real modules are not shadowed."""
    added: list[str] = []
    if module not in sys.modules:
        for name in stubbed:
            if name not in sys.modules:
                stub = types.ModuleType(name)
                stub.__spec__ = importlib.machinery.ModuleSpec(name, None)
                sys.modules[name] = stub
                added.append(name)
    for name in added:
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, sys.modules[name])
    try:
        importlib.import_module(module)
    finally:
        for name in added:
            sys.modules.pop(name, None)
    yield
