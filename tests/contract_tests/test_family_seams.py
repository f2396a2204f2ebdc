"""A model family is its own folders: shared code does not name a family (issue 18).

Counts the source files of the shared layers whose *code* (identifiers, attribute names, string
literals; docstrings and comments aside) names a served model family, outside the family folders
(a path component or file named after the family) and the registries. The bar is at most
`MAX_SHARED_FILES_NAMING_A_FAMILY` such files.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("ttscore", "gateway", "export", "perf")
# The words that name a family in code: every family's name and its spellings.
FAMILY_WORDS = re.compile(r"qwen|voxcpm|breeze|omnivoice|gepard|voxtral|fish|cosyvoice", re.IGNORECASE)
# Where naming families is the job: the one list of built-in families every layer's registry reads.
REGISTRIES = {"ttscore/contract/plugins.py"}
MAX_SHARED_FILES_NAMING_A_FAMILY = 3

pytestmark = pytest.mark.unit


def _in_family_place(rel: Path) -> bool:
    return any(FAMILY_WORDS.search(part) for part in rel.parts)


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def family_mentions(source: str) -> list[str]:
    """The tokens of `source` (code only) that name a family."""
    skip = _docstring_lines(ast.parse(source))
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.NAME, tokenize.STRING) and not (
            hasattr(tokenize, "FSTRING_MIDDLE") and tok.type == tokenize.FSTRING_MIDDLE
        ):
            continue
        if tok.start[0] in skip:
            continue
        if FAMILY_WORDS.search(tok.string):
            found.append(f"{tok.start[0]}:{tok.string[:60]}")
    return found


def shared_files_naming_a_family() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for top in SOURCE_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if _in_family_place(rel) or rel.as_posix() in REGISTRIES or "model_repository" in rel.parts:
                continue
            hits = family_mentions(path.read_text())
            if hits:
                out[rel.as_posix()] = hits
    return out


def test_the_counter_sees_code_not_comments() -> None:
    src = '"""Qwen3-TTS doc."""\n# voxcpm2 comment\nx = 1\n'
    assert family_mentions(src) == []
    assert family_mentions('name = "qwen3_tts"\n') == ['1:"qwen3_tts"']
    assert family_mentions("from ttscore.contract import voxcpm2\n") == ["1:voxcpm2"]


def test_shared_code_names_no_family() -> None:
    offenders = shared_files_naming_a_family()
    report = "\n".join(f"  {path}: {', '.join(hits[:4])}" for path, hits in offenders.items())
    assert len(offenders) <= MAX_SHARED_FILES_NAMING_A_FAMILY, (
        f"{len(offenders)} shared source files name a model family (at most "
        f"{MAX_SHARED_FILES_NAMING_A_FAMILY}); move the code into the family's folder:\n{report}"
    )


if __name__ == "__main__":  # python tests/contract_tests/test_family_seams.py: the current list
    for rel, hits in shared_files_naming_a_family().items():
        print(f"{rel}: {len(hits)}  {', '.join(hits[:6])}")
