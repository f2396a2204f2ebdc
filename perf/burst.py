"""A burst of concurrent streaming requests against a running gateway: who is admitted, who is refused and how fast
(issue 42's admission control, as an operator sees it).

    .venv/bin/python perf/burst.py --url http://127.0.0.1:8091 --requests 200 --out perf/results/burst/burst.json

First a few requests one at a time (the unloaded time to first audio), then `--requests` raw audio streams at once,
then one more request (the server serves normally right after). Every request ends in exactly one of: admitted
(audio to the end), refused (503 / 429 with Retry-After and the error body), error (anything else, with its message)
or hung (no end within --request-timeout: must be 0). Reported: the unloaded TTFA, the admitted ones' TTFA p50/p95
against it, the refusals' latency (response headers) p50/p95/max, the admission limits from /ready, and a plot of
every request's TTFA or refusal time. A client of the HTTP API only: each request on its own connection, opened
before the burst is let go, HTTP/1.1 written by hand on asyncio streams and timed from its first byte sent (an HTTP
client library's per-request work, ~5 ms a request in one process, would otherwise be measured as the server's);
httpx for /ready, matplotlib for the plot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

TEXT = "Hello there, this is a short sentence to speak."


async def one(url: str, body: dict[str, Any], timeout: float, go: asyncio.Event | None = None) -> dict[str, Any]:
    """One request over its own connection, opened first (so a burst measures the server, not the client's
    connection setup): HTTP/1.1 by hand on asyncio streams, timed from the request's first byte sent."""
    u = urlsplit(url)
    rec: dict[str, Any] = {}
    payload = json.dumps(body).encode()
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(u.hostname, u.port or 80)
            if go is not None:
                await go.wait()
            t0 = time.perf_counter()
            rec["t0"] = t0
            writer.write(head + payload)
            status_line = await reader.readline()
            rec["status"] = int(status_line.split()[1])
            headers = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                k, _, v = line.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            rec["headers_s"] = time.perf_counter() - t0
            if rec["status"] != 200:
                data = await reader.read()
                rec["retry_after"] = headers.get("retry-after")
                try:
                    rec["message"] = json.loads(data)["error"]["message"]
                except (ValueError, KeyError, TypeError):
                    rec["message"] = data[:200].decode("utf-8", "replace")
                rec["outcome"] = "refused" if rec["status"] in (429, 503) and rec["retry_after"] else "error"
                return rec
            size = 0
            while chunk := await reader.read(65536):
                if size == 0:
                    rec["ttfa_s"] = time.perf_counter() - t0  # the first body bytes (the chunked framing's first)
                size += len(chunk)
            rec["bytes"] = size
            rec["outcome"] = "admitted" if size else "error"
            rec["end_s"] = time.perf_counter() - t0
    except TimeoutError:
        rec["outcome"] = "hung"
    except (OSError, ValueError, IndexError) as exc:
        rec["outcome"], rec["message"] = "error", repr(exc)
    finally:
        if writer is not None:
            writer.close()
    return rec


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, max(0, round(q / 100 * (len(v) - 1))))], 4)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    body = {"model": args.model, "input": TEXT, "voice": args.voice, "response_format": "pcm", "stream_format": "audio",
            "max_new_tokens": args.max_new_tokens}
    body = {k: v for k, v in body.items() if v is not None}
    async with httpx.AsyncClient(base_url=args.url, timeout=args.request_timeout) as client:
        ready = (await client.get("/ready")).json()
    unloaded = [await one(args.url, body, args.request_timeout) for _ in range(args.baseline)]
    go = asyncio.Event()  # every connection is open before any request is sent
    tasks = [asyncio.create_task(one(args.url, body, args.request_timeout, go)) for _ in range(args.requests)]
    await asyncio.sleep(args.connect_s)
    t_burst = time.perf_counter()
    go.set()
    burst = list(await asyncio.gather(*tasks))
    for r in burst:  # when each request's first byte left, from the moment the burst was let go
        r["start"] = r.pop("t0", t_burst) - t_burst
    burst_s = time.perf_counter() - t_burst
    after = await one(args.url, body, args.request_timeout)
    async with httpx.AsyncClient(base_url=args.url, timeout=args.request_timeout) as client:
        ready_after = (await client.get("/ready")).json()
    base = [r["ttfa_s"] for r in unloaded if r.get("outcome") == "admitted"]
    admitted = [r for r in burst if r["outcome"] == "admitted"]
    refused = [r for r in burst if r["outcome"] == "refused"]
    unloaded_ttfa = statistics.median(base) if base else None
    summary = {
        "requests": args.requests, "burst_seconds": round(burst_s, 3),
        "admission_limits": ready.get("admission", {}).get("limits"),
        "unloaded_ttfa_s": None if unloaded_ttfa is None else round(unloaded_ttfa, 4),
        "admitted": len(admitted), "refused": len(refused),
        "errors": sum(r["outcome"] == "error" for r in burst), "hung": sum(r["outcome"] == "hung" for r in burst),
        "admitted_ttfa_s": {"p50": pct([r["ttfa_s"] for r in admitted], 50),
                            "p95": pct([r["ttfa_s"] for r in admitted], 95)},
        "refusal_s": {"p50": pct([r["headers_s"] for r in refused], 50), "p95": pct([r["headers_s"] for r in refused], 95),
                      "max": pct([r["headers_s"] for r in refused], 100)},
        "refused_with_retry_after": sum(bool(r.get("retry_after")) for r in refused),
        "statuses": sorted({r.get("status") for r in burst if r.get("status")}),
        "after_burst": {"outcome": after["outcome"], "ttfa_s": after.get("ttfa_s")},
        "refused_total_after": ready_after.get("admission", {}).get("refused"),
    }
    if unloaded_ttfa and summary["admitted_ttfa_s"]["p95"]:
        summary["admitted_ttfa_p95_vs_unloaded"] = round(summary["admitted_ttfa_s"]["p95"] / unloaded_ttfa, 2)
        # Issue 42's bound on the admitted: 2 x the unloaded TTFA x the generations that can be ahead of one
        # (the model's running bound, and its queue where streams queue).
        limits = summary["admission_limits"] or {}
        ahead = limits.get("running_per_model", 0) + (limits.get("queued_per_model", 0)
                                                       if limits.get("queue_streams", True) else 0)
        if ahead:
            summary["bound_s"] = round(2 * unloaded_ttfa * ahead, 3)
            summary["admitted_within_bound"] = summary["admitted_ttfa_s"]["p95"] <= summary["bound_s"]
    return {"summary": summary, "unloaded": unloaded, "burst": burst, "after": after}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for outcome, key, color, label in (("admitted", "ttfa_s", "tab:blue", "admitted: time to first audio"),
                                       ("refused", "headers_s", "tab:red", "refused (503 + Retry-After): response time"),
                                       ("error", "end_s", "black", "error")):
        rows = [r for r in result["burst"] if r["outcome"] == outcome and r.get(key) is not None]
        ax.scatter([r["start"] * 1000 for r in rows], [r[key] * 1000 for r in rows], s=12, c=color, label=label)
    s = result["summary"]
    if s["unloaded_ttfa_s"]:
        ax.axhline(s["unloaded_ttfa_s"] * 1000, color="tab:green", ls="--", label="unloaded TTFA")
    ax.set_yscale("log")
    ax.set_xlabel("request sent (ms after the burst began)")
    ax.set_ylabel("ms")
    ax.set_title(f"{s['requests']} concurrent streams: {s['admitted']} admitted, {s['refused']} refused, "
                 f"{s['hung']} hung")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8091")
    ap.add_argument("--model", default=None, help="the served model (default: the gateway's default)")
    ap.add_argument("--voice", default="vivian")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--baseline", type=int, default=5, help="requests one at a time before the burst")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--request-timeout", type=float, default=120.0)
    ap.add_argument("--connect-s", type=float, default=2.0, help="time given to open every connection first")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every request (and a .png plot beside it)")
    args = ap.parse_args(argv)
    result = asyncio.run(main_async(args))
    print(json.dumps(result["summary"], indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        plot(result, args.out.with_suffix(".png"))
    s = result["summary"]
    return 1 if s["hung"] or s["errors"] or s["after_burst"]["outcome"] != "admitted" else 0


if __name__ == "__main__":
    sys.exit(main())
