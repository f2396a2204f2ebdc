"""triton_tts.bench.perf_analyzer: the streaming summary computed from perf_analyzer's profile export."""

from __future__ import annotations

import pytest

from triton_tts.bench import perf_analyzer as pa

pytestmark = pytest.mark.unit

MS = 1_000_000  # ns


def request(start_ms: float, arrivals_ms: list[float], samples: list[int]) -> dict:
    return {
        "timestamp": int(start_ms * MS),
        "response_timestamps": [int(t * MS) for t in arrivals_ms],
        "response_outputs": [{"audio": [0.0] * n, "frames": 1} for n in samples],
    }


def test_summarize_streaming():
    sr = 1000  # 1 sample = 1 ms of audio, to keep the arithmetic readable
    profile = {
        "experiments": [
            {
                "experiment": {"mode": "concurrency", "value": 2},
                "requests": [
                    # 100 ms audio per chunk, arriving every 50 ms: never runs dry
                    request(0, [10, 60, 110], [100, 100, 100]),
                    # 20 ms chunk, then the next one 80 ms later: an underrun
                    request(0, [30, 110], [20, 200]),
                ],
            }
        ]
    }
    [row] = pa.summarize_streaming(profile, sample_rate=sr)
    assert row["concurrency"] == 2 and row["requests"] == 2
    assert row["ttfa_ms"]["p50"] == pytest.approx(20.0)
    assert row["ttfa_ms"]["max"] == pytest.approx(30.0)
    assert row["chunk_gap_ms"]["max"] == pytest.approx(80.0)
    assert row["underrun_requests"] == 1
    assert row["audio_seconds"] == pytest.approx(0.52)
    # RTF = processing seconds per audio second: 0.110/0.3 and 0.110/0.22
    assert row["rtf"]["max"] == pytest.approx(0.5, abs=1e-3)
    assert row["audio_seconds_per_second"] == pytest.approx(0.52 / 0.110, rel=1e-3)
    assert row["chunks_per_request"] == 2.5


def test_an_empty_final_response_is_no_audio():
    """perf_analyzer 2.51 exports the empty audio of a final response after a stop (frames 0) as one
    uninitialized number; it counts as nothing, and a one-sample chunk it writes the same way as one."""
    sr = 1000
    req = request(0, [10, 60, 70], [100, 100, 0])
    req["response_outputs"][2] = {"audio": -1.25e33, "frames": 0, "finish_reason": "stop"}
    one = request(0, [10], [0])
    one["response_outputs"][0] = {"audio": 0.5, "frames": 1}
    [row] = pa.summarize_streaming({"experiments": [{"experiment": {"mode": "concurrency", "value": 1},
                                                     "requests": [req, one]}]}, sample_rate=sr)
    assert row["audio_seconds"] == pytest.approx(0.201)


def test_code2wav_input_data_shapes():
    data = pa.code2wav_input_data([3], state_size=5, groups=16)["data"][0]
    assert data["codes"]["shape"] == [3, 16] and len(data["codes"]["content"]) == 48
    assert data["state"]["shape"] == [5] and data["position"] == {"content": [0], "shape": [1]}


def test_voice_features_input_data_matches_the_ensemble_inputs():
    from ttscore.contract import tensors as triton_io  # noqa: F401  (the ensemble's public tensors are documented there)

    data = pa.voice_features_input_data(0.5, 16000)["data"][0]
    assert data["audio"]["shape"] == [8000] and len(data["audio"]["content"]) == 8000
    assert data["sample_rate"] == {"content": [16000], "shape": [1]}
    assert max(abs(x) for x in data["audio"]["content"]) < 1.0


def test_a_profile_export_that_is_not_json_is_run_again(tmp_path, monkeypatch, capsys):
    path = tmp_path / "p.json"
    runs = []

    def fake_run(args, log_path, stages=None):
        assert not path.exists()  # cleared before each run: perf_analyzer refuses to overwrite it
        runs.append(args)
        path.write_text('{"experiments": [' if len(runs) == 1 else '{"experiments": []}')

    monkeypatch.setattr(pa, "run_perf_analyzer", fake_run)
    assert pa._profile(["-m", "x"], path, tmp_path / "log") == {"experiments": []}
    assert len(runs) == 2
    assert "is not JSON" in capsys.readouterr().err


def test_a_profile_export_never_json_stops_the_bench(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    monkeypatch.setattr(pa, "run_perf_analyzer", lambda args, log_path, stages=None: path.write_text("{"))
    with pytest.raises(SystemExit, match="2 runs in a row"):
        pa._profile([], path, tmp_path / "log")
