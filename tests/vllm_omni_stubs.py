"""Stand-ins for the modules vLLM-Omni 0.30.0's model code imports, so that the tests/<family>_reference.py
scripts import its modules from the release wheel without vLLM (in a reference environment): a stand-in
module answers every missing attribute with a placeholder class that is subscriptable and whose every
attribute is a no-op decorator factory (e.g. MULTIMODAL_REGISTRY.register_processor(...)(cls))."""

from __future__ import annotations

import sys
import types
import zipfile


class _Meta(type):
    def __getitem__(cls, item: object) -> type:
        return cls

    def __getattr__(cls, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: (lambda f: f)


class Placeholder(metaclass=_Meta):
    """What a stand-in module gives for a name it does not define."""


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return Placeholder


def stub(name: str, path: list[str] | None = None, **attrs: object) -> types.ModuleType:
    """Installs a stand-in module `name` (a package whose submodules are searched in `path`) with `attrs`."""
    mod = _StubModule(name)
    mod.__path__ = path or []  # type: ignore[attr-defined]
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def extract(wheel: str, where: str, prefixes: str | tuple[str, ...]) -> None:
    """The wheel's Python files under `prefixes` (paths inside it), extracted below `where`."""
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith(prefixes) and name.endswith(".py"):
                zf.extract(name, where)
