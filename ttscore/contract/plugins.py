"""The model families every layer serves: the project's own, listed once, and those of packages outside it.

A family is one folder per layer. The project's own families are the names in `BUILTIN`; each layer's registry
finds a family's part by that layer's folder convention (`builtin_parts`), so adding a family is one name here
plus its folders. A family shipped as a package of its own is found here and registered the same way. A family
package `pkg` provides one module per layer it takes part in, each exposing `FAMILY`:

    pkg.contract   FAMILY: FamilyRules            (what the gateway and runtime check requests with)
                   WIRE: FamilyWire               (its speech_generation inputs: ttscore.contract.wire)
    pkg.runtime    FAMILY: runtime Family         (ttscore.runtime.family)
    pkg.backend    FAMILY: BackendFamily          (its Triton models: ttscore.backend.family)
    pkg.gateway    FAMILY: gateway adapter        (gateway.families)
    pkg.export     FAMILY: export entry           (export.families)

The packages come from the entry-point group `triton_tts.families` (the value is the package
name) and from `TTS_FAMILY_PACKAGES` (comma-separated package names; what tests and a Triton stub,
which inherits the environment, use). Those packages are imported from the import path, and from
the directories `PYTHONPATH` names: a Triton python stub inherits the environment but its embedded
interpreter ignores `PYTHONPATH`. Every registry is built by `registry`, which refuses a family name given twice.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable
from importlib import metadata
from types import ModuleType
from typing import TypeVar

ENTRY_POINT_GROUP = "triton_tts.families"
PACKAGES_ENV = "TTS_FAMILY_PACKAGES"
LAYERS = ("contract", "runtime", "backend", "gateway", "export")
# The project's own families, in listing order (`/v1/models`, `make-tiny --family`, the README's table).
BUILTIN = ("qwen3_tts", "voxcpm2", "breeze_tts_2", "omnivoice", "gepard", "voxtral_tts", "fish_speech", "cosyvoice3",
           "moss_tts_nano")

# The built-in forced aligner (word timestamps; no speech family): its folder name in each layer it has a part in
# (ttscore.contract.<name>, ttscore.runtime.<name>, export.<name>, ttscore.backend.<name>), found by `aligner_part`.
ALIGNER = "qwen3_forced_aligner"

T = TypeVar("T")


def builtin_parts(pattern: str, attribute: str) -> list[object]:
    """`attribute` of each built-in family's module of one layer: `pattern` formatted with the family's folder name
    (e.g. "ttscore.runtime.families.{}")."""
    return [getattr(importlib.import_module(pattern.format(name)), attribute) for name in BUILTIN]


def aligner_part(pattern: str, attribute: str) -> object:
    """`attribute` of the built-in aligner's module of one layer (`pattern` formatted with its folder name)."""
    return getattr(importlib.import_module(pattern.format(ALIGNER)), attribute)


def registry(parts: Iterable[T], name: Callable[[T], str], what: str) -> dict[str, T]:
    """The parts by family name, in order; ValueError when two parts claim one name (an external package
    cannot silently replace a family, nor two packages each other)."""
    found: dict[str, T] = {}
    for part in parts:
        key = name(part)
        if key in found:
            raise ValueError(f"{what} {key!r} is registered twice: {found[key]!r} and {part!r}")
        found[key] = part
    return found


def family_packages() -> list[str]:
    """The external family packages, entry points first, then the environment; each once."""
    names = [ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    names += [name.strip() for name in os.environ.get(PACKAGES_ENV, "").split(",") if name.strip()]
    return list(dict.fromkeys(names))


def _search_pythonpath() -> None:
    """Put the `PYTHONPATH` directories missing from the import path at its end (a Triton stub's
    interpreter leaves them out; appended, they never shadow what the path already finds)."""
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and entry not in sys.path:
            sys.path.append(entry)


def layer_modules(layer: str) -> list[ModuleType]:
    """`pkg.<layer>` of every external family package that has one (a package may skip a layer)."""
    if layer not in LAYERS:
        raise ValueError(f"unknown layer {layer!r} (one of {', '.join(LAYERS)})")
    modules = []
    packages = family_packages()
    if packages:
        _search_pythonpath()
    for package in packages:
        importlib.import_module(package)  # a missing package is an error, not a silent skip
        try:
            modules.append(importlib.import_module(f"{package}.{layer}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{layer}":
                raise
    return modules


def layer_families(layer: str) -> list[object]:
    """The `FAMILY` objects external packages give for `layer`."""
    return [module.FAMILY for module in layer_modules(layer)]
