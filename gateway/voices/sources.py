"""Fetching `ref_audio` from the locators the spec allows: base64 data URL, http(s) URL, file:// URI.

Server-side request forgery is the risk here, so:
- http(s): the host is resolved once and *every* address must be public (not private, loopback,
  link-local, multicast, reserved, unspecified, CGNAT, or an IPv4 address embedded in IPv6), unless
  `allow_private_urls` is set. The connection then goes to the address that was checked (the URL is
  rewritten to it, with the original Host header and TLS SNI), so DNS rebinding between check and
  connect is impossible. Redirects are followed by hand, at most `max_redirects`, each hop checked
  the same way. The whole fetch has one deadline (`timeout_s`), the body one byte limit
  (`max_bytes`, checked from Content-Length first and then while streaming). Proxies from the
  environment are ignored (they would bypass the address check).
- file://: only when `allowed_local_media_path` is set, and only files whose real path (symlinks
  resolved) lies under it; '..' is refused before the filesystem is touched.
- Every failure is InvalidRequest(param="ref_audio") with a message saying what was wrong.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import logging
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from ttscore.contract.errors import InvalidRequest

from .audio_io import sniff_container
from .errors import UploadTooLarge

logger = logging.getLogger(__name__)

PARAM = "ref_audio"
SCHEME_ERROR = "ref_audio must be a URL (http/https), base64 data URL (data:...), or file URI (file://...)"
NOT_AUDIO = "ref_audio is not a supported audio file (wav, mp3, flac, ogg, aac, webm, mp4)"
_REDIRECTS = (301, 302, 303, 307, 308)
_AUDIO_LIKE_TYPES = {
    "application/ogg", "application/octet-stream", "binary/octet-stream", "video/mp4", "video/webm", "video/ogg",
}


@dataclass(frozen=True)
class RefAudioSettings:
    max_bytes: int = 10 * 1024 * 1024
    timeout_s: float = 15.0  # whole fetch, all redirects included
    connect_timeout_s: float = 5.0
    max_redirects: int = 3
    allow_private_urls: bool = False
    allowed_local_media_path: str | os.PathLike[str] | None = None
    allowed_media_domains: tuple[str, ...] = ()  # non-empty: only these host names (exact, case-insensitive)


async def load_ref_audio(value: str, settings: RefAudioSettings | None = None) -> bytes:
    """The bytes of the audio file `value` points at (decoding is the caller's job)."""
    s = settings or RefAudioSettings()
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest("ref_audio is empty", PARAM)
    value = value.strip()
    scheme = value.split(":", 1)[0].lower() if ":" in value else ""
    if scheme == "data":
        data = decode_data_url(value, s.max_bytes)
    elif scheme in ("http", "https"):
        data = await fetch_url(value, s)
    elif scheme == "file":
        data = await asyncio.to_thread(read_local_file, value, s)
    else:
        raise InvalidRequest(SCHEME_ERROR, PARAM)
    if sniff_container(data) is None:
        raise InvalidRequest(NOT_AUDIO, PARAM)
    return data


# --- data: ---------------------------------------------------------------------------------------


def decode_data_url(value: str, max_bytes: int) -> bytes:
    header, sep, payload = value[len("data:"):].partition(",")
    if not sep:
        raise InvalidRequest("ref_audio data URL has no ',' before its data", PARAM)
    params = [p.strip().lower() for p in header.split(";")]
    media_type = params[0]
    if "base64" not in params[1:]:
        raise InvalidRequest("ref_audio data URL must be base64-encoded (data:audio/...;base64,...)", PARAM)
    if media_type and not _audio_like(media_type):
        raise InvalidRequest(f"ref_audio data URL has media type {media_type!r}, not audio", PARAM)
    payload = "".join(payload.split())
    if "%" in payload:
        payload = unquote(payload)
    if len(payload) // 4 * 3 > max_bytes + 3:  # before decoding: never allocate more than the limit
        raise UploadTooLarge(max_bytes, PARAM, "ref_audio")
    payload = payload.replace("-", "+").replace("_", "/")  # URL-safe alphabet
    payload += "=" * (-len(payload) % 4)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("ref_audio data URL is not valid base64", PARAM) from None
    if not data:
        raise InvalidRequest("ref_audio data URL is empty", PARAM)
    if len(data) > max_bytes:
        raise UploadTooLarge(max_bytes, PARAM, "ref_audio")
    return data


def _audio_like(media_type: str) -> bool:
    media_type = media_type.split(";", 1)[0].strip().lower()
    return media_type.startswith("audio/") or media_type in _AUDIO_LIKE_TYPES


# --- http(s): ------------------------------------------------------------------------------------


def is_public_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True only for globally routable unicast addresses (IPv4 embedded in IPv6 is judged as IPv4)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return is_public_address(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            return is_public_address(ip.sixtofour)
        if ip.teredo is not None:
            return False
        if ip in _NAT64:
            return is_public_address(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return bool(
        ip.is_global
        and not (ip.is_multicast or ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved
                 or ip.is_unspecified)
    )


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


async def resolve_host(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (an IP literal resolves to itself)."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidRequest(f"ref_audio URL host {host!r} cannot be resolved ({exc})", PARAM) from None
    addresses: list[str] = []
    for info in infos:
        addr = str(info[4][0]).split("%", 1)[0]  # drop an IPv6 zone id
        if addr not in addresses:
            addresses.append(addr)
    if not addresses:
        raise InvalidRequest(f"ref_audio URL host {host!r} has no addresses", PARAM)
    return addresses


async def _checked_address(host: str, port: int, s: RefAudioSettings) -> str:
    addresses = await resolve_host(host, port)
    if not s.allow_private_urls:
        for addr in addresses:
            if not is_public_address(ipaddress.ip_address(addr)):
                raise InvalidRequest(
                    f"ref_audio URL host {host!r} resolves to a private, loopback or otherwise non-public "
                    f"address ({addr}); such URLs are refused",
                    PARAM,
                )
    return addresses[0]


async def fetch_url(url: str, s: RefAudioSettings) -> bytes:
    try:
        return await asyncio.wait_for(_fetch(url, s), timeout=s.timeout_s)
    except asyncio.TimeoutError:
        raise InvalidRequest(f"ref_audio URL took longer than {s.timeout_s:g}s to download", PARAM) from None


async def _fetch(url: str, s: RefAudioSettings) -> bytes:
    import httpx

    current = url
    for _hop in range(s.max_redirects + 1):
        try:
            target = httpx.URL(current)
        except Exception:  # httpx.InvalidURL and friends
            raise InvalidRequest("ref_audio URL is malformed", PARAM) from None
        if target.scheme not in ("http", "https"):
            raise InvalidRequest(f"ref_audio URL redirected to unsupported scheme {target.scheme!r}", PARAM)
        host = target.host
        if not host:
            raise InvalidRequest("ref_audio URL has no host", PARAM)
        if s.allowed_media_domains and host.lower() not in {d.lower() for d in s.allowed_media_domains}:
            raise InvalidRequest(f"ref_audio URL host {host!r} is not in the allowed media domains", PARAM)
        port = target.port or (443 if target.scheme == "https" else 80)
        address = await _checked_address(host, port, s)
        # Connect to the address that was checked; Host header and SNI keep the original name.
        pinned = target.copy_with(host=address)
        headers = {"Host": target.netloc.decode("ascii"), "Accept": "audio/*, */*;q=0.1",
                   "Accept-Encoding": "identity", "User-Agent": "triton-tts-gateway"}
        extensions = {"sni_hostname": host} if target.scheme == "https" and not _is_ip(host) else {}
        timeout = httpx.Timeout(s.timeout_s, connect=s.connect_timeout_s)
        try:
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False) as client:
                request = client.build_request("GET", pinned, headers=headers, extensions=extensions)
                response = await client.send(request, stream=True)
                try:
                    if response.status_code in _REDIRECTS:
                        location = response.headers.get("location")
                        if not location:
                            raise InvalidRequest("ref_audio URL redirect has no Location", PARAM)
                        current = str(target.join(location))
                        continue
                    if response.status_code != 200:
                        raise InvalidRequest(f"ref_audio URL returned HTTP {response.status_code}", PARAM)
                    ctype = response.headers.get("content-type", "")
                    if ctype and not _audio_like(ctype):
                        raise InvalidRequest(
                            f"ref_audio URL returned content-type {ctype.split(';')[0].strip()!r}, not audio", PARAM
                        )
                    length = response.headers.get("content-length")
                    if length is not None and length.isdigit() and int(length) > s.max_bytes:
                        raise UploadTooLarge(s.max_bytes, PARAM, "ref_audio")
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > s.max_bytes:
                            raise UploadTooLarge(s.max_bytes, PARAM, "ref_audio")
                    if not body:
                        raise InvalidRequest("ref_audio URL returned an empty body", PARAM)
                    return bytes(body)
                finally:
                    await response.aclose()
        except InvalidRequest:
            raise
        except httpx.TimeoutException:
            raise InvalidRequest(f"ref_audio URL timed out ({s.timeout_s:g}s)", PARAM) from None
        except httpx.HTTPError as exc:
            raise InvalidRequest(f"could not fetch ref_audio URL ({type(exc).__name__}: {exc})", PARAM) from None
    raise InvalidRequest(f"ref_audio URL redirected more than {s.max_redirects} times", PARAM)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


# --- file: ---------------------------------------------------------------------------------------


def read_local_file(value: str, s: RefAudioSettings) -> bytes:
    if not s.allowed_local_media_path:
        raise InvalidRequest("file:// ref_audio is disabled on this server (no allowed local media path)", PARAM)
    parts = urlsplit(value)
    if parts.netloc not in ("", "localhost"):
        raise InvalidRequest("file:// ref_audio must name a local path (file:///path)", PARAM)
    raw = url2pathname(parts.path)
    if "\x00" in raw or not os.path.isabs(raw):
        raise InvalidRequest("file:// ref_audio must be an absolute path", PARAM)
    outside = InvalidRequest("file:// ref_audio is outside the allowed local media directory", PARAM)
    configured = Path(os.path.abspath(os.fspath(s.allowed_local_media_path)))
    try:
        root = configured.resolve(strict=True)
    except OSError:
        logger.error("allowed_local_media_path %s does not exist", configured)
        raise outside from None
    # Lexical check first ('..' collapsed), so paths outside the root are refused without any
    # filesystem access (no existence oracle); then the real path, which catches symlink escapes.
    lexical = Path(os.path.normpath(raw))
    if not (_is_under(lexical, configured) or _is_under(lexical, root)):
        raise outside
    try:
        real = lexical.resolve(strict=True)
    except FileNotFoundError:
        raise InvalidRequest("file:// ref_audio does not exist", PARAM) from None
    except OSError as exc:
        raise InvalidRequest(f"file:// ref_audio cannot be opened ({exc.strerror})", PARAM) from None
    if not _is_under(real, root):
        raise outside
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)  # no FIFO hangs
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise InvalidRequest(f"file:// ref_audio cannot be opened ({exc.strerror})", PARAM) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidRequest("file:// ref_audio is not a regular file", PARAM)
        if st.st_size > s.max_bytes:
            raise UploadTooLarge(s.max_bytes, PARAM, "ref_audio")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(s.max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > s.max_bytes:
        raise UploadTooLarge(s.max_bytes, PARAM, "ref_audio")
    if not data:
        raise InvalidRequest("file:// ref_audio is empty", PARAM)
    return data


def _is_under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
