"""The runaway guard's command-line options (triton-tts serve / prepare --runaway-factor / --runaway-min-s, their
TTS_RUNAWAY_* environment defaults) reach every speech_generation model's parameters; bad values are usage errors."""

from __future__ import annotations

import argparse

import pytest
from deploy_plans import served_from_manifest

from triton_tts.serve import (
    RUNAWAY_FACTOR_ENV,
    RUNAWAY_MIN_S_ENV,
    ServeError,
    add_runaway_args,
    generation_params,
    plan_deployment,
)

pytestmark = pytest.mark.unit


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_runaway_args(parser)
    return parser.parse_args(argv)


def test_options_and_environment_defaults(monkeypatch, tmp_path):
    assert generation_params(parse([])) == {}  # the committed config's defaults stay
    assert generation_params(parse(["--runaway-factor", "2.5", "--runaway-min-s", "6"])) == {
        "runaway_factor": "2.5", "runaway_min_s": "6"}
    monkeypatch.setenv(RUNAWAY_FACTOR_ENV, "0")
    monkeypatch.setenv(RUNAWAY_MIN_S_ENV, "")
    args = parse([])
    assert generation_params(args) == {"runaway_factor": "0"}
    served = [served_from_manifest(tmp_path, n, {"family": "qwen3_tts", "variant": "custom_voice"}) for n in "ab"]
    plan = plan_deployment(served, None, generation=generation_params(args))
    assert [plan["settings"][f"speech_generation_{n}"]["parameters"]["runaway_factor"] for n in "ab"] == ["0", "0"]


def test_bad_values_are_refused(monkeypatch, capsys):
    monkeypatch.setenv(RUNAWAY_FACTOR_ENV, "lots")
    with pytest.raises(SystemExit) as exc:
        parse([])
    assert exc.value.code == 2 and "--runaway-factor" in capsys.readouterr().err
    monkeypatch.delenv(RUNAWAY_FACTOR_ENV)
    with pytest.raises(ServeError, match="--runaway-min-s must be a finite number >= 0"):
        generation_params(parse(["--runaway-min-s", "-1"]))
