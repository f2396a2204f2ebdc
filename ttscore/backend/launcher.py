"""`python -m ttscore.backend.launcher`: the bundled tritonserver run in the foreground (the command line over
ttscore.backend.triton_server)."""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ttscore.backend.triton_install import server_env
from ttscore.backend.triton_server import (
    DEFAULT_GRPC_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    TritonServer,
    TritonServerError,
)


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
