"""Shared fixtures. Generic on purpose: anything model-specific lives in the test modules.

- `fake_pb_utils`: the recording fake of triton_python_backend_utils, installed in sys.modules.
- `dummy_artifacts`: a hand-made artifacts dir (tiny ONNX graphs with the GraphSpec names).
- `triton_server`: a factory that renders a model repository into tmp, starts the REAL tritonserver
  (ttscore.backend.triton_server) on free ports, waits for readiness with a deadline, fails fast with the log
  tail if the process dies, and always stops every server it started at the end of the module
  (`session_triton_server`: of the session); a failed test that used one reports the servers' state and log.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from artifacts import export_fixture, tiny_fixture

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:  # `import fakes...` from any test module
    sys.path.insert(0, str(TESTS_DIR))

pytest_plugins = ["timing", "model_fixtures", "e2e_fixtures", "breeze_tts_2_fixtures", "e2e_speech"]


# Fixtures that make or serve exported checkpoints (the *_fixtures.py plugins, the store's fixtures made by
# artifacts.tiny_fixture/export_fixture, the VoxCPM2 ones below, a real tritonserver): a test that takes one, directly or through another fixture, is marked `artifacts`
# so that `make test-fast` (-m "not artifacts ...") leaves it to `make test`.
HEAVY_FIXTURES = {"triton_server", "session_triton_server", "voxcpm2_tiny", "voxcpm2_artifacts", "voxcpm2_lora",
                  "voxcpm2_lora_artifacts"}


def _heavy(fixturedef: Any) -> bool:
    module = getattr(fixturedef.func, "__module__", "") or ""
    return (fixturedef.argname in HEAVY_FIXTURES or module == "artifacts"
            or (module.endswith("_fixtures") and module != "gateway_fixtures"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        if any(_heavy(d) for defs in info.name2fixturedefs.values() for d in defs):
            item.add_marker(pytest.mark.artifacts)


def _settle_heap() -> None:
    """Collect, then move every object alive now out of the garbage collector's sight (gc.freeze).

    A worker holds a million objects after its imports and session fixtures (torch, transformers, loaded
    pipelines): every full collection walks them all, ~0.3-0.6 s each, and the exporters run a full
    collection between stages (export.memory.release_memory), so a tiny Qwen3-TTS export took 19.6 s in such a
    process against 14.5 s with them frozen (measured here). What is frozen lives for the session anyway;
    what tests make later is collected as before."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_collection_finish(session: pytest.Session) -> None:
    _settle_heap()  # the test modules and what they import


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: Any) -> Iterator[None]:
    yield
    if fixturedef.scope == "session":
        _settle_heap()  # a session fixture's objects live until the end


@pytest.fixture(autouse=True)
def _no_process_wide_onnx_pool() -> Iterator[None]:
    """ONNX Runtime's shared pool (`thread_pool: shared`, `--thread-pool shared`) is process-wide and
    one-way: once a test asks for it in the pytest process, every later per-session pool fails. A
    test that needs it runs it in a subprocess (tests/runtime_tests/test_thread_pool.py)."""
    yield
    onnx_runtime = sys.modules.get("ttscore.runtime.onnx")
    assert not getattr(onnx_runtime, "_shared_pool", None), "a test turned on ONNX Runtime's process-wide pool"


_TINY = 2.2250738585072014e-308  # the smallest normal double: a third of it is subnormal, 0 when flushed


@pytest.fixture(scope="session")
def _float_environment() -> Any:
    """The pytest thread's floating-point environment at the start (ttscore...words.float_environment_kept)."""
    import ctypes
    import ctypes.util

    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    env = ctypes.create_string_buffer(256)
    libm.fegetenv(env)
    return libm, env


@pytest.fixture(autouse=True)
def _subnormals_kept(_float_environment: Any) -> Iterator[None]:
    """A native library built with -ffast-math (nagisa's DyNet, which qwen-asr imports) switches the thread that
    loads it to flushing subnormals to zero; every later test of the worker would then compute differently (and
    hypothesis refuses to draw floats). The environment is restored after any test that changed it."""
    yield
    if not _TINY / 3 > 0:
        libm, env = _float_environment
        libm.fesetenv(env)
        assert _TINY / 3 > 0


@pytest.fixture(scope="session", autouse=True)
def _isolated_speaker_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A gateway built without an explicit speaker_samples_dir must never touch ~/.cache."""
    import os

    old = os.environ.get("SPEAKER_SAMPLES_DIR")
    os.environ["SPEAKER_SAMPLES_DIR"] = str(tmp_path_factory.mktemp("speakers-default"))
    yield
    if old is None:
        os.environ.pop("SPEAKER_SAMPLES_DIR", None)
    else:
        os.environ["SPEAKER_SAMPLES_DIR"] = old


@pytest.fixture
def fake_pb_utils() -> Iterator[Any]:
    from fakes.loader import install_fake_pb_utils

    module = install_fake_pb_utils()
    module.Logger.clear()
    module.MetricFamily.clear()
    yield module
    module.Logger.clear()
    module.MetricFamily.clear()


@pytest.fixture(scope="session")
def dummy_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fakes.artifacts import make_artifacts

    return make_artifacts(tmp_path_factory.mktemp("dummy_artifacts"))


ServerFactory = Callable[..., Any]
_servers: list[Any] = []  # every tritonserver this process started, for the failure report below
_stopping: list[threading.Thread] = []  # servers of finished modules, draining in the background


def _server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """start(repository=None, *, models=None, settings=None, artifacts_dir=None,
    model_overrides=None, extra_args=(), env=None, ready_timeout_s=120) -> running TritonServer.

    `repository=None` renders the committed model_repository (only `models`, with `settings` and
    `artifacts_dir`, via ttscore.backend.repository); a path is copied as it is. `model_overrides` maps a
    model name to a file that replaces its 1/model.py in the copy. At the end of the fixture's scope every
    server it started is stopped in the background (each drains for seconds; the next module need not wait).
    """
    from ttscore.backend import triton_install, triton_server
    from ttscore.backend.repository import render_repository

    started: list[triton_server.TritonServer] = []

    def start(
        repository: Path | None = None,
        *,
        models: Sequence[str] | None = None,
        settings: Mapping[str, Any] | None = None,
        artifacts_dir: Path | None = None,
        model_overrides: Mapping[str, Path] | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        ready_timeout_s: float = 120.0,
    ) -> triton_server.TritonServer:
        work = tmp_path_factory.mktemp("triton")
        repo = work / "model_repository"
        if repository is None:
            render_repository(repo, settings, artifacts_dir=artifacts_dir, models=models)
        else:
            shutil.copytree(repository, repo, ignore=shutil.ignore_patterns("__pycache__"))
        for model, path in (model_overrides or {}).items():
            shutil.copy(path, repo / model / "1" / "model.py")
        server_env = triton_install.server_env()
        server_env.update(env or {})
        server = triton_server.TritonServer(
            repo, extra_args=extra_args, log_file=work / "tritonserver.log", env=server_env,
            ready_timeout_s=ready_timeout_s,
        )
        started.append(server)
        _servers.append(server)
        server.start()
        try:
            server.wait_ready()
        except triton_server.TritonServerError as exc:
            server.stop()
            pytest.fail(str(exc), pytrace=False)
        return server

    yield start
    for server in started:
        thread = threading.Thread(target=server.stop, name=f"stop tritonserver {server.pid}", daemon=True)
        thread.start()
        _stopping.append(thread)


@pytest.fixture(scope="module")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """The servers of one test module (stopped when it ends: a worker runs many modules, and a server with
    its stubs holds hundreds of MB)."""
    yield from _server_factory(tmp_path_factory)


@pytest.fixture(scope="session")
def session_triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """The same factory for session fixtures (tests/e2e_fixtures.py's shared stack)."""
    yield from _server_factory(tmp_path_factory)


def pytest_sessionfinish(session: pytest.Session) -> None:
    for thread in _stopping:
        thread.join(60)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used a tritonserver reports the servers' state: a 503 from the gateway then
    says whether Triton had died (with its exit code) or was up, and what its log said last."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or not ({"triton_server", "session_triton_server"} & set(getattr(item, "fixturenames", ()))):
        return
    for server in [s for s in _servers if s.pid is not None][-4:]:  # not yet stopped by their fixture
        state = "running" if server.is_alive() else f"not running (exit code {server.exit_code})"
        report.sections.append((f"tritonserver {server.grpc_url} ({server.log_file})",
                                f"{state}; log tail:\n{server.log_tail(25)}"))


# --- VoxCPM2 (tests/export_tests/test_voxcpm2_*.py): one tiny checkpoint and its export for the whole session.
voxcpm2_tiny = tiny_fixture("voxcpm2_tiny", "VoxCPM2-tiny", "export.voxcpm2.tiny:make_tiny_voxcpm2")
voxcpm2_artifacts = export_fixture("voxcpm2_artifacts", "voxcpm2_tiny")


@pytest.fixture(scope="session")
def voxcpm2_lora(voxcpm2_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny native LoRA adapter for voxcpm2_tiny (`triton-tts make-tiny-lora`)."""
    from export.voxcpm2.tiny import make_tiny_lora

    return make_tiny_lora(voxcpm2_tiny, tmp_path_factory.mktemp("vxlora") / "tiny-adapter", seed=0)


@pytest.fixture(scope="session")
def voxcpm2_lora_artifacts(voxcpm2_tiny: Path, voxcpm2_lora: Path) -> Path:
    """voxcpm2_tiny exported with voxcpm2_lora merged (`export --lora`)."""
    from artifacts import STORE

    return STORE.export(voxcpm2_tiny, lora=voxcpm2_lora)
