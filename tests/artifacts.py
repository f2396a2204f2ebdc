"""The tests' one artifact store: tiny checkpoints and their exports, made once and reused while the code
that makes them is unchanged.

Every fixture that needs a family's checkpoint or its export asks the store (`STORE.checkpoint`,
`STORE.export`) instead of building one in the session's temp folder:

- a checkpoint is keyed by its name, the hash of the code that produces artifacts (`code_hash`:
  export/, ttscore/contract, ttscore/runtime, the requirement pins, and the maker's own files, such as a
  foreign checkpoint's script under tests/) and the maker's arguments; its content fingerprint is
  recorded when it is made and checked when it is reused, so a checkpoint a test changed is made again;
- an export is keyed by the checkpoint's content (ttscore.runtime.weights.checkpoint_fingerprint), the
  code hash, the precision and the LoRA adapter's content; what it wrote (each file's size and mtime) is
  recorded and checked on reuse, so an export a test changed is exported again.

So a change to one line under export/ changes every key and re-exports (tests/export_tests/
test_artifact_store.py), and nothing stale is ever reused. Within one session the store is the memo;
across sessions it is a folder: `TTS_TEST_CACHE`, else build/test-cache in the checkout (`make clean`
empties it). Each family's export tests still run one fresh export of their own, validated against
PyTorch, outside the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
CACHE_ENV = "TTS_TEST_CACHE"
# The code whose change must re-export: what writes checkpoints and artifacts, and what it imports.
CODE = ("export", "ttscore/contract", "ttscore/runtime")
PINS = ("requirements.txt", "requirements-nodeps.txt", "requirements-ref5.txt", "requirements-ref5-sources.txt")
KEEP_DAYS = 3  # entries of other code versions unused for longer are removed when a session starts
RECORD = ".store.json"


def code_hash(root: Path = ROOT, code: Iterable[str] = CODE, pins: Iterable[str] = PINS) -> str:
    """sha256 over every .py file under `code` and the pin files (path and content)."""
    h = hashlib.sha256()
    files: list[Path] = []
    for folder in code:
        files += sorted(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)
    files += [root / p for p in pins if (root / p).is_file()]
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _listing(folder: Path) -> dict[str, list[int]]:
    return {p.relative_to(folder).as_posix(): [p.stat().st_size, p.stat().st_mtime_ns]
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != RECORD}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder per entry, across processes (two test sessions sharing TTS_TEST_CACHE)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class ArtifactStore:
    """Checkpoints and exports under `root`, keyed as the module says. `code`: the code hash (given in
    tests of the store itself); `exporter(checkpoint, out, precision=, lora=)`: export.exporter's by
    default. `built` counts what this instance made (not reused), by kind."""

    def __init__(self, root: Path | None = None, *, code: str | None = None,
                 exporter: Callable[..., Any] | None = None) -> None:
        default = Path(os.environ.get(CACHE_ENV) or ROOT / "build" / "test-cache")
        self.root = Path(root or default)
        self._code = code
        self._exporter = exporter
        self._memo: dict[str, Path] = {}
        self.built: dict[str, int] = {"checkpoint": 0, "export": 0}
        self._pruned = False

    @property
    def code(self) -> str:
        if self._code is None:
            self._code = code_hash()
        return self._code

    def _place(self, kind: str, key: str) -> Path:
        if not self._pruned:
            self._prune()
        return self.root / self.code / kind / key

    def _prune(self) -> None:
        """Entries of other code versions that no session used for KEEP_DAYS."""
        self._pruned = True
        if not self.root.is_dir():
            return
        cutoff = time.time() - KEEP_DAYS * 86400
        for version in self.root.iterdir():
            if version.is_dir() and version.name != self.code and version.stat().st_mtime < cutoff:
                shutil.rmtree(version, ignore_errors=True)

    def _valid(self, place: Path, check: Callable[[dict[str, Any]], bool]) -> bool:
        try:
            record = json.loads((place / RECORD).read_text())
        except (OSError, ValueError):
            return False
        return check(record)

    def checkpoint(self, name: str, make: Callable[[Path], object], *, sources: Iterable[Path] = (),
                   **args: Any) -> Path:
        """The checkpoint `make(out)` writes, made once per key: `name` (a folder name: the checkpoint's
        directory is `<entry>/<name>`), the code hash, `sources` (the maker's own files outside the code
        hash, e.g. a script under tests/) and `args` (what the maker was called with, as JSON)."""
        extra = hashlib.sha256()
        for p in sources:
            extra.update(Path(p).read_bytes())
        extra.update(json.dumps(args, sort_keys=True, default=str).encode())
        key = f"{name}-{extra.hexdigest()[:12]}"
        if key in self._memo:
            return self._memo[key]
        place = self._place("checkpoints", key)
        out = place / name
        with _locked(place.parent / f".{key}.lock"):
            if not self._valid(place, lambda r: r.get("fingerprint") == _fingerprint(out)):
                shutil.rmtree(place, ignore_errors=True)
                place.mkdir(parents=True)
                make(out)
                self.built["checkpoint"] += 1
                (place / RECORD).write_text(json.dumps({"fingerprint": _fingerprint(out), "args": args},
                                                       default=str))
            os.utime(place.parent.parent)  # this code version is in use
        self._memo[key] = out
        return out

    def export(self, checkpoint: Path, *, precision: str = "fp32", lora: Path | None = None) -> Path:
        """`checkpoint`'s artifacts (export.exporter.export_checkpoint), exported once per key."""
        key_src = {"checkpoint": _fingerprint(checkpoint), "precision": precision,
                   "lora": _fingerprint(lora) if lora is not None else None}
        key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()[:16]
        if key in self._memo:
            return self._memo[key]
        place = self._place("artifacts", key)
        out = place / "artifacts"
        with _locked(place.parent / f".{key}.lock"):
            if not self._valid(place, lambda r: r.get("files") == _listing(out) and bool(r["files"])):
                shutil.rmtree(place, ignore_errors=True)
                place.mkdir(parents=True)
                options: dict[str, Any] = {"precision": precision}
                if lora is not None:
                    options["lora"] = lora
                exporter = self._exporter
                if exporter is None:
                    from export.exporter import export_checkpoint as exporter
                exporter(checkpoint, out, **options)
                self.built["export"] += 1
                (place / RECORD).write_text(json.dumps({"key": key_src, "files": _listing(out)}))
            os.utime(place.parent.parent)
        self._memo[key] = out
        return out


def _fingerprint(folder: Path) -> str | None:
    from ttscore.runtime.weights import checkpoint_fingerprint

    return checkpoint_fingerprint(folder) if folder.is_dir() else None


STORE = ArtifactStore()


def checkpoint_fixture(name: str, checkpoint: str, make: Callable[[Path], object], *, sources: Iterable[Path] = (),
                       require: Callable[[], object] | None = None) -> Any:
    """A session fixture `name`: the store's checkpoint `checkpoint` that `make(out)` writes where the store
    has none (`sources`: the maker's own files, as STORE.checkpoint takes them); `require()` first, which
    skips (refenv.missing) without what making or using it needs."""
    import pytest

    @pytest.fixture(scope="session", name=name)
    def fixture() -> Path:
        if require is not None:
            require()
        return STORE.checkpoint(checkpoint, make, sources=sources)

    return fixture


def tiny_fixture(name: str, checkpoint: str, maker: str) -> Any:
    """checkpoint_fixture for a tiny checkpoint made by `maker` ("module:function", called as
    function(out, seed=0), imported when the fixture first runs)."""
    import importlib

    def make(out: Path) -> object:
        module, function = maker.split(":")
        return getattr(importlib.import_module(module), function)(out, seed=0)

    return checkpoint_fixture(name, checkpoint, make)


def export_fixture(name: str, checkpoint_fixture: str) -> Any:
    """A session fixture `name`: the store's export of the checkpoint that fixture `checkpoint_fixture` gives."""
    import pytest

    @pytest.fixture(scope="session", name=name)
    def fixture(request: pytest.FixtureRequest) -> Path:
        return STORE.export(request.getfixturevalue(checkpoint_fixture))

    return fixture
