"""perf_analyzer, which ships in the tritonclient 2.51 wheel: its binary and the libraries it needs."""

from __future__ import annotations

import contextlib
import os
import shutil
import sysconfig
from pathlib import Path

from ttscore.backend.triton_install import TritonEnvError, cache_dir, server_libs_dir, venv_bin_dir

PERF_ANALYZER_LIBS = {
    # soname the binary asks for -> prefix of the auditwheel-renamed copy inside nvidia_pytriton.libs
    "libb64.so.0d": "libb64-",
    "libcudart.so.12": "libcudart-",
}


def perf_analyzer_binary() -> Path:
    """perf_analyzer from the tritonclient wheel (installed into <venv>/bin by pip)."""
    candidates = [venv_bin_dir() / "perf_analyzer", Path(sysconfig.get_paths()["scripts"]) / "perf_analyzer"]
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


