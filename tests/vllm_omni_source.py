"""vLLM-Omni 0.30.0's own code, read from its release wheel (`make setup` puts it in .venv-ref5/wheels/, or
VLLM_OMNI_WHEEL names it) without installing vLLM: `definitions` executes the named top-level functions,
classes and constants of one source file, so a test can run the exact request-to-prompt code vLLM-Omni
serves with, on the project's own tokenizers; `run_with_wheel` runs a reference script (tests/<family>_reference.py,
tests/<family>_foreign.py: vLLM-Omni's modules loaded from REFERENCE_WHEEL) in a family's reference environment;
`foreign_fixture` is the session fixture of the checkpoint a tests/<family>_foreign.py script writes."""

from __future__ import annotations

import ast
import contextlib
import os
import types
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

WHEEL = "vllm_omni-0.30.0-py3-none-any.whl"


def wheel(env: str = "VLLM_OMNI_WHEEL") -> Path | None:
    """The wheel the environment variable `env` names, else the one `make setup` downloads beside ref5."""
    import refenv

    given = os.environ.get(env)
    places = [Path(given)] if given else []
    with contextlib.suppress(refenv.RefEnvError):
        places.append(refenv.python("ref5").parents[1] / "wheels" / WHEEL)
    return next((p for p in places if p.is_file()), None)


# The wheel the reference scripts load vLLM-Omni's modules from (VOXTRAL_VLLM_OMNI_WHEEL overrides).
REFERENCE_WHEEL = wheel("VOXTRAL_VLLM_OMNI_WHEEL")


def require_wheel() -> Path:
    """REFERENCE_WHEEL; refenv.missing (skip, or fail under make test) without it."""
    if REFERENCE_WHEEL is None:
        import refenv

        refenv.missing(f"the {WHEEL} wheel (make setup downloads it into .venv-ref5/wheels/)")
    assert REFERENCE_WHEEL is not None
    return REFERENCE_WHEEL


def run_with_wheel(family: str, script: Path, *args: str, inputs: Mapping[str, np.ndarray] | None = None,
                   timeout_s: float = 300) -> dict[str, np.ndarray]:
    """`script` in `family`'s reference environment with REFERENCE_WHEEL as its first argument, then `args`
    (refenv.run); refenv.missing without the wheel."""
    import refenv

    wheel_path = require_wheel()
    return refenv.run(refenv.env_for(family), script, inputs or {}, [str(wheel_path), *args], timeout_s=timeout_s)


def foreign_fixture(name: str, checkpoint: str, family: str,
                    require: Callable[[], object] = require_wheel) -> Any:
    """The session fixture `name` of the store's checkpoint `checkpoint` that tests/<family>_foreign.py writes
    with run_with_wheel (a foreign checkpoint: built by vLLM-Omni's or the reference's own classes and init);
    the script is part of the store's key, and `require()` skips first without what it needs."""
    from artifacts import TESTS, checkpoint_fixture

    script = TESTS / f"{family}_foreign.py"
    return checkpoint_fixture(name, checkpoint, lambda out: run_with_wheel(family, script, str(out)),
                              sources=[script], require=require)


def source(path: str) -> str:
    """The text of `path` (e.g. "vllm_omni/.../prompt.py") in the wheel; the test is skipped, saying so,
    where the wheel is not given."""
    found = wheel()
    if found is None:
        import refenv

        refenv.missing(f"vLLM-Omni's code not read: no {WHEEL} (make setup puts it in .venv-ref5/wheels/; "
                       "or set VLLM_OMNI_WHEEL)")
    with zipfile.ZipFile(found) as zf:
        return zf.read(path).decode("utf-8")


def _names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def definitions(path: str, names: tuple[str, ...], **namespace: Any) -> types.SimpleNamespace:
    """The top-level definitions `names` of `path`, executed in the file's order in one namespace that
    starts with the file's plain-library imports (`re`, `math`, `typing`, ...) and `namespace` (stand-ins
    for vLLM's own objects); a missing name fails the test (the wheel's layout changed)."""
    tree = ast.parse(source(path))
    wanted = set(names)
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if module and module.split(".")[0] in ("re", "math", "typing", "collections", "dataclasses",
                                                   "__future__", "unicodedata", "functools", "json"):
                body.append(node)
        elif wanted.intersection(_names(node)):
            body.append(node)
    found = {n for node in body for n in _names(node)}
    missing = wanted - found
    assert not missing, f"{path} no longer defines {sorted(missing)}"
    scope: dict[str, Any] = {"__name__": f"vllm_omni_{Path(path).stem}", **namespace}
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), scope)
    return types.SimpleNamespace(**{n: scope[n] for n in names})
