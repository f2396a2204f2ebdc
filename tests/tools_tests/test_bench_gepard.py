"""Gepard-1.0's bench package (triton_tts/bench/gepard): found by the shared benches, its checkpoint runs every
request to the frame cap, its speed reference (perf/gepard_reference.py, the backbone over its K/V cache) makes
the parity reference's frames, and its bench requests carry only Gepard's fields."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from triton_tts.bench import common, compare
from ttscore.contract import gepard as spec

ROOT = Path(__file__).resolve().parents[2]


def test_found_by_the_shared_benches() -> None:
    bench = common.bench_family(spec.FAMILY)
    assert bench.FAMILY == spec.FAMILY
    assert "real" in bench.SIZES


@pytest.fixture(scope="module")
def bench_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return common.bench_family(spec.FAMILY).make_checkpoint(tmp_path_factory.mktemp("gepard-bench") / "ckpt", "tiny")


def test_its_checkpoint_never_stops_by_itself(bench_checkpoint: Path) -> None:
    from ttscore.runtime.families.gepard.checkpoint import read_checkpoint

    info = read_checkpoint(bench_checkpoint)
    assert info.stop_threshold > 1.0  # a sigmoid never passes it: max_new_tokens ends every request


@pytest.mark.parity
def test_speed_reference_makes_the_parity_references_frames(bench_checkpoint: Path) -> None:
    import refenv

    try:
        exe = refenv.python("ref5")
    except refenv.RefEnvError as exc:
        refenv.missing(str(exc))
    done = subprocess.run([str(exe), str(ROOT / "perf" / "gepard_reference.py"), str(bench_checkpoint), "--check",
                           "--frames", "6"], capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"frames": [6, 6], "equal": True}


def test_triton_requests_carry_only_its_fields() -> None:
    data = compare.speech_input(spec.FAMILY, {"speaker": None}, 6)["data"]
    assert len(data) == len(compare.TEXTS)
    for row in data:
        assert row["max_new_tokens"] == [6]
        assert set(row) <= {"text", "max_new_tokens", "seed"}
