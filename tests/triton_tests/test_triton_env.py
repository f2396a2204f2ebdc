"""ttscore.backend.triton_install, triton_server and perf_analyzer: locating the bundled server, backend directory, environment, ports."""

from __future__ import annotations

import os
import subprocess

import pytest

from ttscore.backend import perf_analyzer, triton_install, triton_server

pytestmark = pytest.mark.unit


def test_free_ports_are_distinct():
    ports = triton_server.free_ports(3)
    assert len(set(ports)) == 3 and all(1024 < p < 65536 for p in ports)


def test_backend_directory_has_backend_and_stub(tmp_path):
    root = triton_install.backend_directory(tmp_path)
    files = sorted(p.name for p in (root / "python").iterdir())
    assert files == ["libtriton_python.so", "triton_python_backend_stub", "triton_python_backend_utils.py"]
    assert os.access(root / "python" / "triton_python_backend_stub", os.X_OK)
    assert triton_install.backend_directory(tmp_path) == root  # cached


def test_server_env_and_args(tmp_path):
    env = triton_install.server_env(base={"PATH": "/usr/bin"})
    assert env["LD_LIBRARY_PATH"].split(os.pathsep)[0].endswith("nvidia_pytriton.libs")
    assert str(triton_install.PACKAGE_ROOT) in env["PYTHONPATH"].split(os.pathsep)
    assert env["PATH"].endswith("/usr/bin")
    args = triton_server.server_args(tmp_path, "/b", 1, 2, 3, 4, ["--log-verbose=1"])
    assert f"--model-repository={tmp_path}" in args and "--exit-timeout-secs=4" in args
    assert args[-1] == "--log-verbose=1" and "--disable-auto-complete-config" in args


def test_server_binary_runs():
    proc = subprocess.run(
        [str(triton_install.tritonserver_binary()), "--help"], env=triton_install.server_env(), capture_output=True,
        text=True, timeout=60,
    )
    assert "--model-repository" in proc.stdout + proc.stderr


def test_perf_analyzer_runs_with_its_libraries():
    proc = subprocess.run(
        [str(perf_analyzer.perf_analyzer_binary()), "--version"], env=perf_analyzer.perf_analyzer_env(),
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0 and "2.51.0" in proc.stdout + proc.stderr


def test_start_refuses_a_missing_repository(tmp_path):
    server = triton_server.TritonServer(tmp_path / "missing")
    with pytest.raises(triton_server.TritonServerError, match="does not exist"):
        server.start()
    assert server.stop() is None
