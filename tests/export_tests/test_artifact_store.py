"""The tests' artifact store (tests/artifacts.py): reused only while nothing that made an entry changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from artifacts import CODE, ROOT, ArtifactStore, code_hash

pytestmark = pytest.mark.unit


def _tree(tmp_path: Path) -> Path:
    """A copy of the code the hash covers (and the pins), to edit."""
    root = tmp_path / "checkout"
    for folder in CODE:
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "requirements.txt", root / "requirements.txt")
    return root


class Exporter:
    def __init__(self) -> None:
        self.calls: list[tuple[Path, str]] = []

    def __call__(self, checkpoint: Path, out: Path, *, precision: str = "fp32", lora: Path | None = None) -> None:
        self.calls.append((checkpoint, precision))
        out.mkdir(parents=True)
        (out / "manifest.json").write_text(json.dumps({"from": (checkpoint / "weights.bin").read_text(),
                                                       "precision": precision}))


def _make(log: list[Path]):
    def make(out: Path) -> None:
        log.append(out)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        (out / "weights.bin").write_text("w0")
    return make


def test_one_changed_line_under_export_changes_the_code_hash_and_re_exports(tmp_path):
    root = _tree(tmp_path)
    before = code_hash(root)
    assert code_hash(root) == before  # stable
    exporter, made = Exporter(), []
    store = ArtifactStore(tmp_path / "cache", code=before, exporter=exporter)
    art = store.export(store.checkpoint("tiny", _make(made)))
    assert ArtifactStore(tmp_path / "cache", code=before, exporter=exporter).export(
        store.checkpoint("tiny", _make(made))) == art  # another session, same code: reused
    assert len(exporter.calls) == 1 and len(made) == 1

    target = root / "export" / "exporter.py"
    target.write_text(target.read_text().replace("PRECISIONS = (", "PRECISIONS  = (", 1))
    after = code_hash(root)
    assert after != before
    again = ArtifactStore(tmp_path / "cache", code=after, exporter=exporter)
    art2 = again.export(again.checkpoint("tiny", _make(made)))
    assert art2 != art and len(exporter.calls) == 2 and len(made) == 2
    # A pin or a new file counts too.
    (root / "requirements.txt").write_text((root / "requirements.txt").read_text() + "\n# a change\n")
    assert code_hash(root) != after
    (root / "ttscore" / "runtime" / "new_module.py").write_text("X = 1\n")
    assert code_hash(root) not in (before, after)


def test_a_checkpoint_or_an_export_changed_by_a_test_is_made_again(tmp_path):
    exporter, made = Exporter(), []
    store = ArtifactStore(tmp_path / "cache", code="c0", exporter=exporter)
    ckpt = store.checkpoint("tiny", _make(made))
    art = store.export(ckpt)
    assert store.export(ckpt) == art and store.built == {"checkpoint": 1, "export": 1}  # the session's memo

    # The next session: an export someone wrote into is exported again.
    (art / "manifest.json").write_text("{}")
    fresh = ArtifactStore(tmp_path / "cache", code="c0", exporter=exporter)
    assert fresh.export(fresh.checkpoint("tiny", _make(made))) == art
    assert json.loads((art / "manifest.json").read_text())["from"] == "w0"
    assert fresh.built == {"checkpoint": 0, "export": 1}

    # A checkpoint someone wrote into is made again (and so is its export, keyed by content).
    (ckpt / "weights.bin").write_text("changed")
    fresh = ArtifactStore(tmp_path / "cache", code="c0", exporter=exporter)
    assert (fresh.checkpoint("tiny", _make(made)) / "weights.bin").read_text() == "w0"
    assert fresh.built["checkpoint"] == 1 and len(made) == 2


def test_keys_separate_precision_lora_maker_arguments_and_sources(tmp_path):
    exporter, made = Exporter(), []
    store = ArtifactStore(tmp_path / "cache", code="c0", exporter=exporter)
    ckpt = store.checkpoint("tiny", _make(made))
    fp32, int8 = store.export(ckpt), store.export(ckpt, precision="int8")
    assert fp32 != int8 and [p for _, p in exporter.calls] == ["fp32", "int8"]
    lora = tmp_path / "adapter"
    lora.mkdir()
    (lora / "a.safetensors").write_text("a")
    assert store.export(ckpt, lora=lora) not in (fp32, int8)
    assert store.checkpoint("tiny", _make(made), seed=1) != ckpt
    script = tmp_path / "maker.py"
    script.write_text("v1")
    first = store.checkpoint("tiny", _make(made), sources=[script])
    script.write_text("v2")
    assert store.checkpoint("tiny", _make(made), sources=[script]) != first


def test_a_failed_build_leaves_nothing_that_looks_valid(tmp_path):
    def broken(out: Path) -> None:
        out.mkdir(parents=True)
        (out / "half.bin").write_text("x")
        raise RuntimeError("cut short")

    store = ArtifactStore(tmp_path / "cache", code="c0", exporter=Exporter())
    with pytest.raises(RuntimeError):
        store.checkpoint("tiny", broken)
    made: list[Path] = []
    assert (store.checkpoint("tiny", _make(made)) / "weights.bin").is_file() and len(made) == 1
