"""`python -m gateway --config FILE [--host H] [--port P]`: serve the Speech API with uvicorn."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from .settings import DEFAULT_PORT, Settings, SettingsError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__)
    parser.add_argument("--config", required=True, help="deployment JSON (written by `triton-tts serve`)")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--triton-url", help="override the config's Triton gRPC address (host:port)")
    parser.add_argument("--custom-voice-dir", help="precomputed voices (custom_voice_manifest.json + .safetensors)")
    parser.add_argument("--allowed-local-media-path", help="allow file:// ref_audio under this directory")
    parser.add_argument("--allow-private-urls", action="store_true",
                        help="let http(s) ref_audio reach private/loopback addresses (trusted networks only)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_file(args.config)
        overrides = {
            "triton_url": args.triton_url,
            "custom_voice_dir": args.custom_voice_dir,
            "allowed_local_media_path": args.allowed_local_media_path,
            "allow_private_urls": True if args.allow_private_urls else None,
        }
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if overrides:
            settings = dataclasses.replace(settings, **overrides)
        from .app import create_app

        app = create_app(settings)
    except SettingsError as exc:
        print(f"gateway: error: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    # A session.config may carry a base64 ref_audio: the protocol layer's frame limit matches it.
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5,
                ws_max_size=max(settings.ws_max_config_bytes, settings.ws_max_text_bytes) + 1024)
    return 0


if __name__ == "__main__":
    sys.exit(main())
