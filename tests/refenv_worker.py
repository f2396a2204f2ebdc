"""A reference environment's fork server (tests/refenv.py starts one per environment and talks to it).

Every reference script used to start a fresh interpreter that imported torch, transformers and the
reference's modules before doing a few milliseconds of work on a tiny checkpoint. This process pays
those imports once (`PRELOAD`, imported and never run: no torch op runs here, so no thread pool
exists to be broken by a fork), then forks one child per request. A child runs the script exactly as
`python SCRIPT IN.npz OUT.npz ARGS...` would (`__name__ == "__main__"`, its folder first on sys.path,
the request's folder as its working directory, stdout and stderr to a log there), so nothing one
script does (module stubs in sys.modules, seeds, patched functions) reaches the next: each child starts
from the same freshly imported state. (A fresh interpreter seeds torch's global generator at random;
here every child inherits the same random seed: a reference that needs a seed sets one either way.)

Protocol, one JSON object a line: in `{"script", "argv", "cwd", "log"}`; out `{"pid": N}` as soon as the
child is forked (so the caller can kill it on a timeout), then `{"rc": exit status}` (negative: the
signal that ended it). Ends when its stdin closes.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import sys
import traceback

PRELOAD = (
    "numpy", "torch", "safetensors.torch", "transformers", "transformers.modeling_utils",
    "transformers.models.qwen2.modeling_qwen2", "transformers.models.qwen3.modeling_qwen3",
    "transformers.models.llama.modeling_llama", "transformers.models.mistral.modeling_mistral",
    "einops",
)


def preload() -> None:
    for name in PRELOAD:
        with contextlib.suppress(Exception):  # an environment without it: its scripts import what they need
            importlib.import_module(name)


def child(request: dict) -> None:
    code = 1
    try:
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(request["cwd"])
        script = request["script"]
        sys.argv = [script, *request["argv"]]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> None:
    preload()
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(request)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
