"""`python -m gateway --config FILE [--host H] [--port P]`: serve the Speech API with uvicorn.

SIGTERM or Ctrl-C drains (gateway.drain): no new requests, the ones in flight finish for up to
`drain_timeout_s`, then the process exits with status 0. A second signal ends the drain (what
is still running gets SHUTDOWN_GRACE_S, then is cut); a third stops at once.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import logging.handlers
import socket
import sys
from queue import SimpleQueue
from types import FrameType

import uvicorn

from .drain import Drain
from .settings import API_KEYS_ENV, DEFAULT_PORT, TRITON_URLS_ENV, Settings, SettingsError

logger = logging.getLogger(__name__)

# After the drain, what is still open (idle keep-alive connections, a request cut by the drain
# time) gets this long before uvicorn cancels it.
SHUTDOWN_GRACE_S = 5


class DrainingServer(uvicorn.Server):
    """uvicorn's Server, except that the first SIGTERM/SIGINT starts a drain instead of stopping:
    the server stops when nothing is in flight or the drain time is up. Exits normally either way
    (uvicorn re-raises the signals it handled, which would make the exit status 128+15)."""

    def __init__(self, config: uvicorn.Config, drain: Drain, drain_timeout_s: float) -> None:
        super().__init__(config)
        self.drain = drain
        self.drain_timeout_s = drain_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._signalled = False

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        watcher = asyncio.create_task(self._stop_when_drained())
        try:
            await super().serve(sockets)
        finally:
            watcher.cancel()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler: it may interrupt the loop anywhere, so it only schedules the drain.
        if self._signalled or self._loop is None:
            logger.warning("second signal: stopping without waiting for the drain")
            self.force_exit = self.should_exit
            self.should_exit = True
            return
        self._signalled = True
        self._loop.call_soon_threadsafe(self.drain.begin)

    async def _stop_when_drained(self) -> None:
        await self.drain.started.wait()
        if not await self.drain.wait_idle(self.drain_timeout_s):
            logger.warning("drain time (%gs) is up: %d request(s) still in flight are cut",
                           self.drain_timeout_s, self.drain.in_flight)
        else:
            logger.info("drained: nothing in flight")
        self.should_exit = True


# The loggers whose handlers write from a thread (log_off_the_loop): the root's (the gateway's own lines) and
# uvicorn's, its access log among them (a line a request).
LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access")


class _Enqueue(logging.handlers.QueueHandler):
    """Puts the record on the queue as it is: formatting it (and writing it) is the listener thread's."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


class Listeners:
    def __init__(self, listeners: list[logging.handlers.QueueListener]) -> None:
        self.listeners = listeners

    def stop(self) -> None:
        for listener in self.listeners:
            listener.stop()  # what was logged is written first


def log_off_the_loop(names: tuple[str, ...]) -> Listeners:
    """Each of the loggers `names` hands its records to a queue that a thread of its own formats and writes with the
    logger's former handlers, so the event loop only makes the record. Writing each line in the loop (formatting, a
    write and a flush) held a 200-request burst's refusals back: its last one came 56-72 ms after the burst with the
    access log written in the loop, 44-53 ms with it written here, 36-49 ms with no access log (perf/README.md)."""
    listeners = []
    for name in names:
        log = logging.getLogger(name)
        handlers = [h for h in log.handlers if not isinstance(h, logging.handlers.QueueHandler)]
        if not handlers:
            continue
        queue: SimpleQueue[logging.LogRecord] = SimpleQueue()
        log.handlers = [_Enqueue(queue)]
        listener = logging.handlers.QueueListener(queue, *handlers, respect_handler_level=True)
        listener.start()
        listeners.append(listener)
    return Listeners(listeners)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="deployment JSON (written by `triton-tts serve`)")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--triton-url", action="append", default=[],
                        help="Triton gRPC endpoint(s), host:port; repeatable or comma-separated, names resolved to all "
                        f"their addresses (gateway.pool). Replaces the config's triton_url(s) and ${TRITON_URLS_ENV}")
    parser.add_argument("--custom-voice-dir", help="precomputed voices (custom_voice_manifest.json + .safetensors)")
    parser.add_argument("--allowed-local-media-path", help="allow file:// ref_audio under this directory")
    parser.add_argument("--allow-private-urls", action="store_true",
                        help="let http(s) ref_audio reach private/loopback addresses (trusted networks only)")
    parser.add_argument("--api-key", action="append", default=[],
                        help=f"require this API key (repeatable; with the config's api_keys and ${API_KEYS_ENV}). "
                        "Arguments show in `ps`: prefer the config file or the environment")
    parser.add_argument("--drain-timeout", type=float,
                        help="seconds requests in flight get to finish after SIGTERM (default: the config's "
                        "drain_timeout_s, 30)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.load(args.config, triton_urls=args.triton_url, api_keys=args.api_key,
                                 custom_voice_dir=args.custom_voice_dir,
                                 allowed_local_media_path=args.allowed_local_media_path,
                                 allow_private_urls=args.allow_private_urls, drain_timeout_s=args.drain_timeout)
        from .app import create_app

        app = create_app(settings)
    except SettingsError as exc:
        print(f"gateway: error: {exc}", file=sys.stderr)
        return 2
    if settings.api_keys:
        logger.info("API keys: %d configured; requests must carry one", len(settings.api_keys))

    # What the process holds from here on (modules, schemas, routes: ~50,000 objects) leaves the garbage collector's
    # full passes: each walked all of it, 15-34 ms measured inside a 200-request burst, every request waiting.
    gc.collect()
    gc.freeze()
    # A session.config may carry a base64 ref_audio: the protocol layer's frame limit matches it.
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
                            ws_max_size=max(settings.ws_max_config_bytes, settings.ws_max_text_bytes) + 1024)
    listener = log_off_the_loop(LOGGERS)  # (after uvicorn.Config: it sets up its loggers)
    try:
        DrainingServer(config, app.state.drain, settings.drain_timeout_s).run()
    finally:
        listener.stop()  # what was logged is written
    return 0


if __name__ == "__main__":
    sys.exit(main())
