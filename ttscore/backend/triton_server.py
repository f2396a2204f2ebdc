"""A tritonserver process: its flags, free ports, and the subprocess started, awaited ready and stopped.

On GPU hosts the container image `nvcr.io/nvidia/tritonserver:24.10-py3` (same Triton 2.51) is used
instead (docker-compose.yml); `server_args()` is the one place that lists the server flags, and
tests/tools_tests/test_compose.py checks the compose command against it. The server binary and its environment:
ttscore.backend.triton_install.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

from ttscore.backend.triton_install import backend_directory, server_env, tritonserver_binary

log = logging.getLogger(__name__)

DEFAULT_HTTP_PORT = 8000
DEFAULT_GRPC_PORT = 8001
DEFAULT_METRICS_PORT = 8002
# On SIGTERM Triton waits this long for in-flight requests (default 30 s) before exiting.
DEFAULT_EXIT_TIMEOUT_S = 5
# Where the python backend keeps each stub's shared-memory region (a tmpfs file: RAM). A server that exits
# cleanly removes its regions; a killed one leaves them, 1 MiB or more per stub, until the host reboots.
SHM_DIR = Path("/dev/shm")
SHM_PREFIX_OPTION = "shm-region-prefix-name"


class TritonServerError(RuntimeError):
    """The server process failed to start, died, or did not become ready in time."""


def server_args(
    model_repository: Path | str,
    backend_dir: Path | str,
    http_port: int = DEFAULT_HTTP_PORT,
    grpc_port: int = DEFAULT_GRPC_PORT,
    metrics_port: int = DEFAULT_METRICS_PORT,
    exit_timeout_s: int = DEFAULT_EXIT_TIMEOUT_S,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """tritonserver flags (without the binary). The single list docker-compose.yml must mirror."""
    return [
        f"--model-repository={model_repository}",
        f"--backend-directory={backend_dir}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        f"--exit-timeout-secs={exit_timeout_s}",
        # Committed configs are complete; never let the server invent fields.
        "--disable-auto-complete-config",
        # Explicit model control (every model loaded at start) enables the repository API, which
        # the gateway's health monitor uses to reload a model whose stub process died: Triton 2.51
        # neither restarts such a stub nor reports the model unready (model_repository/README.md).
        "--model-control-mode=explicit",
        "--load-model=*",
        *extra_args,
    ]


# --- ports --------------------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; tiny race until the server binds)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free ports (sockets held together so the OS cannot hand out one twice)."""
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


# --- the server process -------------------------------------------------------------------------


def _tail(path: Path, max_lines: int = 60) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-max_lines:])


class TritonServer:
    """A tritonserver subprocess on given ports; `with TritonServer(...) as server:` starts, waits
    for readiness and always stops it."""

    def __init__(
        self,
        model_repository: Path | str,
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        extra_args: Sequence[str] = (),
        log_file: Path | str | None = None,
        exit_timeout_s: int = DEFAULT_EXIT_TIMEOUT_S,
        ready_timeout_s: float = 120.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.model_repository = Path(model_repository)
        if http_port is None or grpc_port is None or metrics_port is None:
            ports = free_ports(3)
            http_port = http_port or ports[0]
            grpc_port = grpc_port or ports[1]
            metrics_port = metrics_port or ports[2]
        self.http_port = http_port
        self.grpc_port = grpc_port
        self.metrics_port = metrics_port
        self.extra_args = list(extra_args)
        self.exit_timeout_s = exit_timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.log_file = Path(log_file) if log_file else self.model_repository.parent / "tritonserver.log"
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_handle: object | None = None
        self._starts = 0
        # This server's own region prefix, so that stop() can remove what a killed server left behind
        # without touching another server's regions (None: the caller chose one in extra_args).
        self.shm_prefix: str | None = (
            None if any(SHM_PREFIX_OPTION in a for a in self.extra_args)
            else f"triton_tts_{os.getpid()}_{secrets.token_hex(4)}_")

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        return [
            str(tritonserver_binary()),
            *server_args(
                self.model_repository,
                backend_directory(),
                self.http_port,
                self.grpc_port,
                self.metrics_port,
                self.exit_timeout_s,
                [*self.extra_args, *([f"--backend-config=python,{SHM_PREFIX_OPTION}={self.shm_prefix}"]
                                     if self.shm_prefix else [])],
            ),
        ]

    def start(self) -> TritonServer:
        if self._proc is not None:
            raise TritonServerError("server already started")
        if not self.model_repository.is_dir():
            raise TritonServerError(f"model repository {self.model_repository} does not exist")
        cmd = self.command()
        env = self._env if self._env is not None else server_env()
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        # A restart (triton_tts.supervisor) appends: the log of the run that died stays readable.
        handle = open(self.log_file, "ab" if self._starts else "wb")  # noqa: SIM115  (closed in stop())
        self._starts += 1
        self._log_handle = handle
        log.info("starting %s (log: %s)", " ".join(cmd), self.log_file)
        # Own process group: stop() can signal the server and every python-backend stub it forked.
        self._proc = subprocess.Popen(
            cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        return self

    def log_tail(self, max_lines: int = 60) -> str:
        return _tail(self.log_file, max_lines)

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        """The process's exit status once it exited (None while it runs or before it started)."""
        return self._proc.poll() if self._proc is not None else None

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Poll /v2/health/ready until it answers 200; fail fast with the log tail if the process
        exits (e.g. a model failed to load) or the deadline passes."""
        deadline = time.monotonic() + (self.ready_timeout_s if timeout_s is None else timeout_s)
        while True:
            if self._proc is None:
                raise TritonServerError("server not started")
            code = self._proc.poll()
            if code is not None:
                raise TritonServerError(
                    f"tritonserver exited with code {code} before becoming ready; log tail:\n{self.log_tail()}"
                )
            if self.is_ready():
                return
            if time.monotonic() > deadline:
                raise TritonServerError(f"tritonserver not ready after the deadline; log tail:\n{self.log_tail()}")
            time.sleep(0.25)

    def stop(self, timeout_s: float | None = None) -> int | None:
        """SIGTERM (Triton drains for up to --exit-timeout-secs), then SIGKILL the process group."""
        proc = self._proc
        if proc is None:
            return None
        grace = self.exit_timeout_s + 5.0 if timeout_s is None else timeout_s
        try:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    log.warning("tritonserver (pid %d) ignored SIGTERM; killing it", proc.pid)
            # Stubs left behind by a crashed or killed server would hold shared memory forever.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            self._remove_shm_regions()
            return proc.returncode
        finally:
            self._proc = None
            if self._log_handle is not None:
                self._log_handle.close()  # type: ignore[attr-defined]
                self._log_handle = None

    def _remove_shm_regions(self) -> None:
        """Delete the shared-memory regions a killed server (or its killed stubs) left in SHM_DIR."""
        if not self.shm_prefix:
            return
        left = list(SHM_DIR.glob(f"{self.shm_prefix}*"))
        for path in left:
            with contextlib.suppress(OSError):
                path.unlink()
        if left:
            log.info("removed %d shared-memory region(s) left by tritonserver in %s", len(left), SHM_DIR)

    def __enter__(self) -> TritonServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()



@contextlib.contextmanager
def running_server(model_repository: Path | str, **kwargs: object) -> Iterator[TritonServer]:
    """`with running_server(repo) as server:` -- free ports, ready on entry, stopped on exit."""
    server = TritonServer(model_repository, **kwargs)  # type: ignore[arg-type]
    with server:
        yield server


