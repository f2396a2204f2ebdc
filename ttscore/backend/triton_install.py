"""Where the real Triton Inference Server that ships inside the `nvidia-pytriton` wheel is, and the environment it
runs in (no container).

The wheel carries tritonserver 2.51 (`pytriton/tritonserver/bin`), the python backend
(`backends/python`) and one python-backend stub per Python version (`python_backend_stubs/3.X`).
Triton wants `<backend-directory>/python/` to hold `libtriton_python.so`,
`triton_python_backend_utils.py` and the stub for the interpreter that will run `model.py`, so
`backend_directory()` assembles that once in a cache directory. The server then needs the wheel's
bundled libraries on LD_LIBRARY_PATH and this virtualenv on PATH / PYTHONPATH so the stub imports
numpy (< 2, see ARCHITECTURE.md), onnxruntime and `ttscore` from here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

# The directory holding the `ttscore` package: the stubs import it from there (a checkout or site-packages).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]

PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
STUB_NAME = "triton_python_backend_stub"


class TritonEnvError(RuntimeError):
    """The bundled server is missing or cannot be prepared."""


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


def venv_bin_dir() -> Path:
    """This virtualenv's bin directory."""
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
    env["PATH"] = os.pathsep.join(p for p in (str(venv_bin_dir()), env.get("PATH", "")) if p)
    paths = [str(p) for p in extra_pythonpath]
    paths += [str(PACKAGE_ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))  # dedupe, keep order
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env

