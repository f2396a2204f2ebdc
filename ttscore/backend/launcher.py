"""Run the real Triton Inference Server that ships inside the `nvidia-pytriton` wheel (no container).

The wheel carries tritonserver 2.51 (`pytriton/tritonserver/bin`), the python backend
(`backends/python`) and one python-backend stub per Python version (`python_backend_stubs/3.X`).
Triton wants `<backend-directory>/python/` to hold `libtriton_python.so`,
`triton_python_backend_utils.py` and the stub for the interpreter that will run `model.py`, so
`backend_directory()` assembles that once in a cache directory. The server then needs the wheel's
bundled libraries on LD_LIBRARY_PATH and this virtualenv on PATH / PYTHONPATH so the stub imports
numpy (< 2, see ARCHITECTURE.md), onnxruntime and `ttscore` from here.

On GPU hosts the container image `nvcr.io/nvidia/tritonserver:24.10-py3` (same Triton 2.51) is used
instead (docker-compose.yml); `server_args()` is the one place that lists the server flags, and
tests/tools_tests/test_compose.py checks the compose command against it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

# The directory holding the `ttscore` package: the stubs import it from there (a checkout or site-packages).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]

DEFAULT_HTTP_PORT = 8000
DEFAULT_GRPC_PORT = 8001
DEFAULT_METRICS_PORT = 8002
# On SIGTERM Triton waits this long for in-flight requests (default 30 s) before exiting.
DEFAULT_EXIT_TIMEOUT_S = 5

PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
STUB_NAME = "triton_python_backend_stub"


class TritonEnvError(RuntimeError):
    """The bundled server is missing or cannot be prepared."""


class TritonServerError(RuntimeError):
    """The server process failed to start, died, or did not become ready in time."""


# --- locating the bundled server ----------------------------------------------------------------


def pytriton_dist_dir() -> Path:
    """`.../site-packages/pytriton/tritonserver` of the running interpreter's environment."""
    # find_spec, not import: pytriton's own package needs deps we do not install (--no-deps).
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonEnvError(
            "nvidia-pytriton is not installed; install it with "
            "`pip install --no-deps nvidia-pytriton==0.7.0` (it ships tritonserver 2.51)"
        )
    dist = Path(next(iter(spec.submodule_search_locations))).resolve() / "tritonserver"
    if not (dist / "bin" / "tritonserver").is_file():
        raise TritonEnvError(f"no tritonserver binary under {dist}/bin")
    return dist


def server_libs_dir() -> Path:
    """The wheel's auditwheel-bundled shared libraries (libtritonserver, libcudart, libb64, ...)."""
    libs = pytriton_dist_dir().parent.parent / "nvidia_pytriton.libs"
    if not libs.is_dir():
        raise TritonEnvError(f"missing {libs}")
    return libs


def tritonserver_binary() -> Path:
    return pytriton_dist_dir() / "bin" / "tritonserver"


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def cache_dir() -> Path:
    """Where derived files (the backend directory, library shims) live; override: TRITON_TTS_CACHE."""
    env = os.environ.get("TRITON_TTS_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "triton-tts"


def backend_directory(cache: Path | None = None) -> Path:
    """Return a `--backend-directory` whose `python/` holds the backend plus this Python's stub.

    Built once per (wheel contents, Python version) and published with an atomic rename, so
    concurrent test sessions never see a half-copied directory.
    """
    dist = pytriton_dist_dir()
    src_backend = dist / "backends" / "python"
    stub = dist / "python_backend_stubs" / python_version() / STUB_NAME
    if not stub.is_file():
        raise TritonEnvError(f"nvidia-pytriton has no python-backend stub for Python {python_version()}")
    sources = [src_backend / name for name in PYTHON_BACKEND_FILES] + [stub]
    digest = hashlib.sha256()
    for src in sources:
        st = src.stat()
        digest.update(f"{src}:{st.st_size}:{st.st_mtime_ns}".encode())
    key = f"py{python_version()}-{digest.hexdigest()[:12]}"
    root = (cache or cache_dir()) / "backends" / key
    if (root / "python" / STUB_NAME).is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = root.parent / f".{key}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "python").mkdir(parents=True)
    for src in sources:
        shutil.copy2(src, tmp / "python" / src.name)
    try:
        tmp.rename(root)
    except OSError:  # another process published it first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (root / "python" / STUB_NAME).is_file():
            raise
    return root


def _venv_bin_dir() -> Path:
    return Path(sys.executable).parent


def server_env(extra_pythonpath: Sequence[Path] = (), base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for tritonserver and its python-backend stubs.

    - LD_LIBRARY_PATH: the wheel's bundled libraries (the copied stub loses its $ORIGIN rpath).
    - PATH: this virtualenv's bin first, as pytriton does.
    - PYTHONPATH: the directory holding `ttscore` (model.py files `import ttscore`) and this environment's
      site-packages (the stub embeds the system libpython, not the venv interpreter).
    """
    env = dict(os.environ if base is None else base)
    libs = str(server_libs_dir())
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libs, env.get("LD_LIBRARY_PATH", "")) if p)
    env["PATH"] = os.pathsep.join(p for p in (str(_venv_bin_dir()), env.get("PATH", "")) if p)
    paths = [str(p) for p in extra_pythonpath]
    paths += [str(PACKAGE_ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))  # dedupe, keep order
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


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
                self.extra_args,
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
            return proc.returncode
        finally:
            self._proc = None
            if self._log_handle is not None:
                self._log_handle.close()  # type: ignore[attr-defined]
                self._log_handle = None

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


# --- perf_analyzer (ships in the tritonclient 2.51 wheel) -------------------------------------------

PERF_ANALYZER_LIBS = {
    # soname the binary asks for -> prefix of the auditwheel-renamed copy inside nvidia_pytriton.libs
    "libb64.so.0d": "libb64-",
    "libcudart.so.12": "libcudart-",
}


def perf_analyzer_binary() -> Path:
    """perf_analyzer from the tritonclient wheel (installed into <venv>/bin by pip)."""
    candidates = [_venv_bin_dir() / "perf_analyzer", Path(sysconfig.get_paths()["scripts"]) / "perf_analyzer"]
    found = shutil.which("perf_analyzer")
    if found:
        candidates.append(Path(found))
    for cand in candidates:
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    raise TritonEnvError(
        "perf_analyzer not found: it ships in the tritonclient==2.51.0 wheel "
        "(`pip install tritonclient[grpc]==2.51.0` puts it in <venv>/bin)"
    )


def _find_system_lib(soname: str) -> Path | None:
    for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if (Path(d) / soname).exists():
            return Path(d) / soname
    if soname.startswith("libcudart"):  # pip install nvidia-cuda-runtime-cu12
        for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
            cand = Path(site) / "nvidia" / "cuda_runtime" / "lib" / soname
            if cand.exists():
                return cand
    return None


def perf_analyzer_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """LD_LIBRARY_PATH for perf_analyzer: libb64.so.0d and libcudart.so.12.

    Uses system / pip copies when present (apt `libb64-0d`, pip `nvidia-cuda-runtime-cu12`);
    otherwise symlinks the identical libraries that nvidia-pytriton already bundles under their
    original sonames in a cache directory, so no extra install is needed.
    """
    env = dict(os.environ if base is None else base)
    dirs: list[str] = []
    shim = cache_dir() / "perf_analyzer_libs"
    for soname, prefix in PERF_ANALYZER_LIBS.items():
        found = _find_system_lib(soname)
        if found is not None:
            dirs.append(str(found.parent))
            continue
        bundled = sorted(server_libs_dir().glob(prefix + "*"))
        if not bundled:
            raise TritonEnvError(f"{soname} not found (apt-get install libb64-0d / pip install nvidia-cuda-runtime-cu12)")
        shim.mkdir(parents=True, exist_ok=True)
        link = shim / soname
        if not link.exists() or link.resolve() != bundled[0].resolve():
            tmp = shim / f".{soname}.{os.getpid()}"
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            tmp.symlink_to(bundled[0])
            tmp.replace(link)
        dirs.append(str(shim))
    if env.get("LD_LIBRARY_PATH"):
        dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(dict.fromkeys(dirs))
    return env


@contextlib.contextmanager
def running_server(model_repository: Path | str, **kwargs: object) -> Iterator[TritonServer]:
    """`with running_server(repo) as server:` -- free ports, ready on entry, stopped on exit."""
    server = TritonServer(model_repository, **kwargs)  # type: ignore[arg-type]
    with server:
        yield server


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m ttscore.backend.launcher --model-repository R`: run the bundled server in the foreground
    (Ctrl-C stops it), or print the exact command and environment with --print-command."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ttscore.backend.launcher", description=main.__doc__)
    parser.add_argument("--model-repository", required=True)
    parser.add_argument("--http-port", type=int, default=DEFAULT_HTTP_PORT)
    parser.add_argument("--grpc-port", type=int, default=DEFAULT_GRPC_PORT)
    parser.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT)
    parser.add_argument("--log-file", default=None)
    parser.add_argument("--ready-timeout", type=float, default=300.0)
    parser.add_argument("--print-command", action="store_true")
    args, extra = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = TritonServer(
        Path(args.model_repository).resolve(), args.http_port, args.grpc_port, args.metrics_port,
        extra_args=extra, log_file=args.log_file, ready_timeout_s=args.ready_timeout,
    )
    if args.print_command:
        env = server_env()
        for key in ("LD_LIBRARY_PATH", "PYTHONPATH", "PATH"):
            print(f"{key}={env[key]}")
        print(" ".join(server.command()))
        return 0
    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # unwinds through `with server:`, which stops the server

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    try:
        with server:
            print(f"ready: http {server.http_url} grpc {server.grpc_url} metrics {server.metrics_url} "
                  f"(log: {server.log_file})", flush=True)
            while server.is_alive():
                time.sleep(0.5)
            print(f"tritonserver exited; log tail:\n{server.log_tail()}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 0
    except TritonServerError as exc:
        print(str(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
