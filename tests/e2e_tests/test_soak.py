"""perf/soak.py: the soak/fault harness.

- unit: only loopback targets; kills only ever aim at one identified tritonserver and its own stubs;
  the report counts and the TTFA statistics leave out requests that overlap a fault window;
- integration: a short soak (about 20 s, no kills) against the e2e deployment behind a gateway:
  nothing hangs, no uploaded voice is lost, requests of every kind succeed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "perf"))  # perf/ holds scripts, not a package
import soak
from soak import ERROR, HUNG, OK, FaultRecord, Proc, RequestRecord, SoakConfig, SoakReport

# --- unit --------------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("url", ["http://127.0.0.1:8091", "http://localhost:1", "http://[::1]:8091", "http://127.3.2.1"])
def test_loopback_urls_are_accepted(url):
    soak.check_loopback(url)


@pytest.mark.unit
@pytest.mark.parametrize("url", ["http://10.0.0.5:8091", "http://example.com", "ftp://127.0.0.1", "http://0.0.0.0:8091"])
def test_other_urls_are_refused(url):
    with pytest.raises(ValueError):
        soak.check_loopback(url)


@pytest.mark.unit
def test_config_is_checked_before_anything_is_sent():
    with pytest.raises(ValueError, match="mix"):
        SoakConfig(mix={"speak": 1.0}).validate()
    with pytest.raises(ValueError, match="positive"):
        SoakConfig(concurrency=0).validate()
    with pytest.raises(ValueError, match="loopback"):
        soak.run_soak(SoakConfig(url="http://192.168.1.1:8091"))


STUB = "/x/triton_python_backend_stub"


def procs() -> list[Proc]:
    repo = "/tmp/w/model_repository"
    return [
        Proc(100, 1, ("/venv/tritonserver", "--model-repository=/a", "--http-port=38000")),
        Proc(101, 100, (STUB, f"{repo}/speech_generation/1/model.py", "shm", "speech_generation_0_0")),
        Proc(102, 100, (STUB, f"{repo}/code2wav/1/model.py", "shm", "code2wav_0_0")),
        Proc(200, 1, ("/other/tritonserver", "--http-port=28000")),  # someone else's server
        Proc(201, 200, (STUB, "/o/model_repository/speech_generation/1/model.py")),
        Proc(300, 1, ("/bin/python", "-c", "tritonserver speech_generation")),  # names, but neither
    ]


@pytest.mark.unit
def test_tritonserver_is_identified_never_guessed():
    ps = procs()
    assert soak.find_tritonserver(ps, http_port=38000).pid == 100
    assert soak.find_tritonserver(ps, pid=200).pid == 200
    with pytest.raises(LookupError, match="2 tritonserver processes"):
        soak.find_tritonserver(ps)
    with pytest.raises(LookupError, match="not a running tritonserver"):
        soak.find_tritonserver(ps, pid=300)
    assert soak.find_tritonserver(ps[:3]).pid == 100  # the only one running


@pytest.mark.unit
def test_only_the_servers_own_stubs_of_the_model_are_targets():
    ps = procs()
    assert [p.pid for p in soak.find_stubs(ps, 100, "speech_generation")] == [101]
    assert [p.pid for p in soak.find_stubs(ps, 100, "code2wav")] == [102]
    assert soak.find_stubs(ps, 100, "voice_features") == []
    # the repository path itself never matches: only the model directory counts
    assert soak.find_stubs(ps, 100, "model_repository") == []


@pytest.mark.unit
def test_list_processes_reads_proc(tmp_path):
    proc = tmp_path / "42"
    proc.mkdir()
    (proc / "stat").write_text("42 (name with ) paren) S 7 42 42 0 -1\n")
    (proc / "cmdline").write_bytes(b"/bin/tritonserver\0--http-port=1\0")
    (tmp_path / "self").mkdir()
    assert soak.list_processes(tmp_path) == [Proc(42, 7, ("/bin/tritonserver", "--http-port=1"))]


@pytest.mark.unit
def test_kill_with_an_ambiguous_server_kills_nothing_and_says_why(monkeypatch):
    monkeypatch.setattr(soak, "list_processes", procs)
    killed: list[int] = []
    monkeypatch.setattr(soak.os, "kill", lambda pid, sig: killed.append(pid))
    fault = FaultRecord("kill_stub", 5.0)
    soak._kill(fault, SoakConfig(), soak._Clock(0.0))
    assert killed == [] and fault.at is None and "2 tritonserver processes" in fault.note
    fault = FaultRecord("kill_stub", 5.0)
    soak._kill(fault, SoakConfig(triton_http_port=38000), soak._Clock(0.0))
    assert killed == [101] and fault.pids == [101] and fault.target == "speech_generation"
    fault = FaultRecord("kill_server", 9.0)
    soak._kill(fault, SoakConfig(triton_pid=100), soak._Clock(0.0))
    assert killed == [101, 100] and fault.at is not None


@pytest.mark.unit
def test_only_the_deadline_makes_a_request_hung():
    import asyncio

    runner = soak.Runner(SoakConfig(request_timeout_s=0.2), client=None, clock=soak._Clock(0.0), run_id="t")

    async def forever(rec, text):
        rec.ttfa = 0.01
        await asyncio.sleep(3600)

    async def handshake_timeout(rec, text):
        raise TimeoutError("timed out during opening handshake")

    runner._stream = forever
    runner._websocket = handshake_timeout
    hung = asyncio.run(runner.run("stream", "x"))
    assert hung.outcome == HUNG and hung.end is None and "0.2 s" in hung.message
    failed = asyncio.run(runner.run("websocket", "x"))
    assert failed.outcome == ERROR and not failed.clear and failed.end is not None
    assert "opening handshake" in failed.message


@pytest.mark.unit
def test_a_dead_gateway_is_reported_not_hammered():
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = SoakConfig(url=f"http://127.0.0.1:{port}", duration_s=1.5, concurrency=2, error_backoff_s=0.5)
    report = soak.run_soak(cfg)
    s = report.summary()
    assert 2 <= s["sent"] <= 12  # paused after each refusal instead of thousands of them
    assert s["failed_transport"] == s["sent"] and s["hung"] == 0
    assert report.voices_check_error is not None and not report.passed
    assert report.wall_s < 10


def record(kind: str, start: float, end: float | None, outcome: str, ttfa: float | None = None,
           clear: bool = False) -> RequestRecord:
    return RequestRecord(kind=kind, start=start, end=end, outcome=outcome, ttfa=ttfa, clear=clear)


@pytest.mark.unit
def test_report_counts_and_leaves_fault_windows_out_of_ttfa():
    report = SoakReport(config={}, started_at="now")
    report.requests = [
        record("stream", 0.0, 1.0, OK, ttfa=0.1),
        record("sse", 1.0, 2.0, OK, ttfa=0.3),
        record("websocket", 9.0, 12.0, OK, ttfa=5.0),  # overlaps the stub kill at 10 s
        record("stream", 11.0, None, HUNG),
        record("speech", 12.0, 12.5, ERROR, clear=True),
        record("disconnect", 20.0, 20.2, ERROR),
        record("speech", 25.0, 25.4, OK, ttfa=0.4),
    ]
    report.faults = [FaultRecord("kill_stub", 10.0, at=10.0, recovered_after_s=4.0, window_end=14.0, target="sg")]
    s = report.summary()
    assert (s["sent"], s["succeeded"], s["failed_clear"], s["failed_transport"], s["hung"]) == (7, 4, 1, 1, 1)
    calm = s["outside_fault_windows"]
    assert calm["ttfa_streaming_n"] == 2  # the websocket at 9-12 s and the hung stream are left out
    assert calm["ttfa_p50_s"] == pytest.approx(0.2) and calm["ttfa_p99_s"] == pytest.approx(0.298)
    assert calm["speech_latency_p50_s"] == pytest.approx(0.4)
    assert s["by_kind"]["stream"] == {"sent": 2, "ok": 1, "error_clear": 0, "error_transport": 0, "hung": 1}
    assert not report.passed  # something hung
    table = report.table()
    assert "hung (must be 0)" in table and "4.0 s (sg)" in table and "FAIL" in table
    json.dumps(report.to_json())  # serialisable as it is


@pytest.mark.unit
def test_unrecovered_and_skipped_faults_and_unchecked_voices_are_reported():
    report = SoakReport(config={}, started_at="now", voices_uploaded=["a"], voices_check_error="ConnectError")
    report.faults = [  # never recovered: the window stays open to the end of the run
        FaultRecord("kill_server", 5.0, at=5.0, note="not recovered within 60 s", target="t"),
        FaultRecord("kill_stub", 90.0, note="planned after the end"),
    ]
    report.requests = [record("stream", 1.0, 2.0, OK, ttfa=0.5), record("stream", 4.0, 6.0, OK, ttfa=9.0),
                       record("stream", 70.0, 71.0, OK, ttfa=7.0)]
    table = report.table()
    assert "NOT RECOVERED: not recovered within 60 s" in table and "not done: planned after the end" in table
    assert "not checked: ConnectError" in table
    assert report.summary()["outside_fault_windows"]["ttfa_p99_s"] == 0.5
    assert report.summary()["voices_lost"] is None and not report.passed


@pytest.mark.unit
def test_mix_and_wav():
    assert soak.parse_mix("speech=3,sse") == {"speech": 3.0, "sse": 1.0}
    wav = soak.make_wav(0.5, 16000)
    assert wav[:4] == b"RIFF" and len(wav) == 44 + 2 * 8000


# --- integration -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway_url(e2e_triton, tmp_path_factory):
    from gateway_fixtures import start_gateway

    from gateway.settings import Settings
    from ttscore.backend.triton_server import free_port

    cfg = {**e2e_triton["config"], "speaker_samples_dir": str(tmp_path_factory.mktemp("soak-speakers"))}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    yield f"http://127.0.0.1:{port}"
    gw.should_exit = True
    thread.join(15)


@pytest.mark.integration
@pytest.mark.slow
def test_short_soak_without_faults(gateway_url, tmp_path):
    cfg = SoakConfig(url=gateway_url, duration_s=20, concurrency=3, max_new_tokens=8, request_timeout_s=60, seed=1)
    report = soak.run_soak(cfg)
    s = report.summary()
    print(report.table())
    assert s["hung"] == 0, report.table()
    assert s["voices_lost"] == 0 and report.voices_check_error is None
    assert s["succeeded"] > 0
    ok_kinds = {k for k, c in s["by_kind"].items() if c["ok"] > 0}
    assert {"speech", "stream", "sse", "websocket"} <= ok_kinds, s["by_kind"]
    # With nothing broken, nothing fails; the report is written where asked.
    assert s["failed_clear"] == 0 and s["failed_transport"] == 0, [r for r in report.requests if r.outcome != OK]
    out = soak.write_report(report, tmp_path / "soak.json")
    assert json.loads(out.read_text())["summary"]["passed"] is True
