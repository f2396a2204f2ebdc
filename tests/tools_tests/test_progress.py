"""Stages of the long CLI jobs (triton_tts.progress): a live display on a terminal, plain lines
otherwise, nothing with --quiet; the exporter's stage callback drives it."""

from __future__ import annotations

import io
import re

import pytest

from triton_tts.cli import build_parser
from triton_tts.progress import Stages

pytestmark = pytest.mark.unit


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    with Stages("export X", quiet=False, stream=out) as s:
        s.hook(1, 3, "talker")
        s.hook(2, 3, "code predictor")
        s.stage("manifest")
    lines = out.getvalue().splitlines()
    assert [re.sub(r" \(\+[\d.]+ s\)$", "", line) for line in lines[:3]] == [
        "export X: [1/3] talker", "export X: [2/3] code predictor", "export X: [3/3] manifest"]
    assert re.fullmatch(r"export X: done in [\d.]+ s", lines[3]) and len(lines) == 4


def test_a_failure_is_reported():
    out = io.StringIO()
    with pytest.raises(RuntimeError), Stages("job", total=2, stream=out) as s:
        s.stage("first")
        raise RuntimeError("boom")
    assert out.getvalue().splitlines()[-1].startswith("job: failed in ")


def test_quiet_prints_nothing():
    out = io.StringIO()
    with Stages("job", total=2, quiet=True, stream=out, terminal=True) as s:
        s.stage("a")
        s.stage("b")
    assert out.getvalue() == ""


def test_terminal_gets_a_live_display():
    out = io.StringIO()
    with Stages("export X", total=2, stream=out, terminal=True) as s:
        s.hook(1, 2, "talker")
        s.hook(2, 2, "code2wav")
    text = out.getvalue()
    assert "\x1b[" in text  # drawn with terminal control sequences, not log lines
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "export X" in plain and "2/2" in plain and "done in" in plain


@pytest.mark.parametrize("argv", [
    ["export", "--checkpoint", "c", "--out", "o", "--quiet"],
    ["serve", "-q"],
    ["prepare", "--demo", "--artifacts", "a", "--repository", "r", "--gateway-config", "g", "--quiet"],
    ["precompute-voice", "--artifacts", "a", "--voice-name", "v", "--ref-audio", "x.wav", "--output-dir", "d", "-q"],
])
def test_quiet_flag(argv):
    assert build_parser().parse_args(argv).quiet is True
