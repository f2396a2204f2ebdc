"""ref_audio locators: data URLs, http(s) with SSRF protection, redirects, limits, timeouts; file://."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from voices_audio import wav

from gateway.voices import sources
from gateway.voices.errors import UploadTooLarge
from gateway.voices.sources import RefAudioSettings, is_public_address, load_ref_audio
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.unit

AUDIO = wav(1.0)
LOCAL = RefAudioSettings(allow_private_urls=True, timeout_s=5.0)


def load(value: str, settings: RefAudioSettings = LOCAL) -> bytes:
    return asyncio.run(load_ref_audio(value, settings))


def refused(value: str, settings: RefAudioSettings = LOCAL, match: str | None = None) -> InvalidRequest:
    with pytest.raises(InvalidRequest, match=match) as e:
        load(value, settings)
    assert e.value.param == "ref_audio"
    return e.value


# --- a local HTTP server ----------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    hosts: list[str] = []

    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        Handler.hosts.append(self.headers.get("Host", ""))
        path = self.path
        if path == "/audio.wav":
            self._send(200, AUDIO, "audio/wav")
        elif path == "/octet":
            self._send(200, AUDIO, "application/octet-stream")
        elif path == "/html":
            self._send(200, b"<html>nope</html>", "text/html; charset=utf-8")
        elif path == "/fake-audio":
            self._send(200, b"this is not audio at all" * 4, "audio/wav")
        elif path == "/missing":
            self._send(404, b"no", "text/plain")
        elif path.startswith("/redirect/"):
            n = int(path.rsplit("/", 1)[1])
            self.send_response(302)
            self.send_header("Location", "/audio.wav" if n <= 1 else f"/redirect/{n - 1}")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/redirect-abs-private":
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.2:{self.server.server_port}/audio.wav")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/redirect-file":
            self.send_response(302)
            self.send_header("Location", "file:///etc/passwd")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/big":
            self._send(200, AUDIO + b"\x00" * 300_000, "audio/wav")
        elif path == "/big-chunked":
            self.send_response(200)
            self.send_header("Content-Type", "audio/wav")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for _ in range(200):
                    self.wfile.write(b"4000\r\n" + b"\x00" * 0x4000 + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
        elif path == "/slow-headers":
            time.sleep(3)
            self._send(200, AUDIO, "audio/wav")
        elif path == "/drip":
            self.send_response(200)
            self.send_header("Content-Type", "audio/wav")
            self.send_header("Content-Length", str(len(AUDIO)))
            self.end_headers()
            try:
                for i in range(0, len(AUDIO), 100):
                    self.wfile.write(AUDIO[i : i + 100])
                    self.wfile.flush()
                    time.sleep(0.1)  # each read is fast, the whole download is not
            except OSError:
                pass
        else:
            self._send(404, b"", "text/plain")

    def _send(self, status, data, ctype):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(data)


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


# --- http(s) ----------------------------------------------------------------------------------------


def test_fetches_audio_when_private_urls_are_allowed(server):
    assert load(f"{server}/audio.wav") == AUDIO
    assert load(f"{server}/octet") == AUDIO


def test_loopback_is_refused_by_default(server):
    err = refused(f"{server}/audio.wav", RefAudioSettings(), "non-public address \\(127.0.0.1\\)")
    assert "127.0.0.1" in err.message


@pytest.mark.parametrize(
    "url",
    ["http://localhost/x.wav", "http://10.1.2.3/x.wav", "http://192.168.0.1/x.wav", "http://169.254.169.254/latest",
     "http://[::1]/x.wav", "http://[::ffff:127.0.0.1]/x.wav", "http://0.0.0.0/x.wav", "http://224.0.0.1/x.wav",
     "http://100.64.0.1/x.wav", "http://[fe80::1]/x.wav", "http://2130706433/x.wav"],
)
def test_private_and_special_addresses_are_refused_without_connecting(url, monkeypatch):
    import httpx

    def no_connect(*a, **k):
        raise AssertionError("connected although the address is not public")

    monkeypatch.setattr(httpx.AsyncClient, "send", no_connect)
    refused(url, RefAudioSettings(), "non-public|cannot be resolved")


@pytest.mark.parametrize(
    ("addr", "public"),
    [("8.8.8.8", True), ("93.184.216.34", True), ("2606:4700::1", True), ("127.0.0.1", False), ("10.0.0.1", False),
     ("172.16.5.4", False), ("192.168.1.1", False), ("169.254.1.1", False), ("100.64.0.1", False),
     ("224.0.0.251", False), ("239.1.1.1", False), ("255.255.255.255", False), ("240.0.0.1", False),
     ("0.0.0.0", False), ("::1", False), ("::", False), ("fc00::1", False), ("fe80::1", False), ("ff02::1", False),
     ("::ffff:10.0.0.1", False), ("::ffff:8.8.8.8", True), ("2002:0a00:0001::1", False), ("64:ff9b::7f00:1", False),
     ("2001:0::1", False)],
)
def test_address_classification(addr, public):
    assert is_public_address(ipaddress.ip_address(addr)) is public


def test_every_resolved_address_must_be_public(monkeypatch):
    async def resolve(host, port):
        return ["93.184.216.34", "10.0.0.7"]  # one public, one private: refused

    monkeypatch.setattr(sources, "resolve_host", resolve)
    err = refused("http://mixed.example/x.wav", RefAudioSettings(), "non-public")
    assert "10.0.0.7" in err.message


def test_connects_to_the_checked_address_with_the_original_host_header(server, monkeypatch):
    """No second DNS lookup: the request goes to the resolved address, Host keeps the name."""
    port = server.rsplit(":", 1)[1]
    seen = []

    async def resolve(host, port_):
        seen.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(sources, "resolve_host", resolve)
    Handler.hosts.clear()
    assert load(f"http://audio.example:{port}/audio.wav") == AUDIO
    assert seen == ["audio.example"] and Handler.hosts == [f"audio.example:{port}"]


def test_redirects_are_followed_up_to_the_limit(server):
    assert load(f"{server}/redirect/3", RefAudioSettings(allow_private_urls=True, max_redirects=3)) == AUDIO
    refused(f"{server}/redirect/3", RefAudioSettings(allow_private_urls=True, max_redirects=2), "more than 2")
    refused(f"{server}/redirect/1", RefAudioSettings(allow_private_urls=True, max_redirects=0), "more than 0")


def test_every_redirect_hop_is_checked_again(server, monkeypatch):
    allowed = ipaddress.ip_address("127.0.0.1")

    def only_first_loopback(ip):  # 127.0.0.1 plays "public", 127.0.0.2 does not
        return ip == allowed

    monkeypatch.setattr(sources, "is_public_address", only_first_loopback)
    assert load(f"{server}/audio.wav", RefAudioSettings()) == AUDIO
    err = refused(f"{server}/redirect-abs-private", RefAudioSettings(), "non-public")
    assert "127.0.0.2" in err.message
    refused(f"{server}/redirect-file", LOCAL, "unsupported scheme 'file'")


def test_non_audio_responses_are_refused(server):
    refused(f"{server}/html", match="content-type 'text/html', not audio")
    refused(f"{server}/fake-audio", match="not a supported audio file")
    refused(f"{server}/missing", match="HTTP 404")


def test_size_limit_from_content_length_and_while_streaming(server):
    small = RefAudioSettings(allow_private_urls=True, max_bytes=200_000)
    with pytest.raises(UploadTooLarge, match="ref_audio exceeds"):
        load(f"{server}/big", small)
    with pytest.raises(UploadTooLarge):
        load(f"{server}/big-chunked", small)


def test_timeouts(server):
    quick = RefAudioSettings(allow_private_urls=True, timeout_s=0.5)
    t0 = time.monotonic()
    refused(f"{server}/slow-headers", quick, "timed out|longer than")
    refused(f"{server}/drip", quick, "longer than 0.5s")  # a slow drip hits the overall deadline
    assert time.monotonic() - t0 < 3.0


def test_connection_errors_are_clear(server):
    port = server.rsplit(":", 1)[1]
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed_port = s.getsockname()[1]
    s.close()
    assert port != str(closed_port)
    refused(f"http://127.0.0.1:{closed_port}/x.wav", LOCAL, "could not fetch ref_audio URL")


def test_allowed_media_domains(server, monkeypatch):
    async def resolve(host, port):
        return ["127.0.0.1"]

    monkeypatch.setattr(sources, "resolve_host", resolve)
    port = server.rsplit(":", 1)[1]
    only = RefAudioSettings(allow_private_urls=True, allowed_media_domains=("cdn.example",))
    assert load(f"http://CDN.example:{port}/audio.wav", only) == AUDIO
    refused(f"http://other.example:{port}/audio.wav", only, "not in the allowed media domains")


def test_https_pins_the_address_and_keeps_sni(monkeypatch):
    import httpx

    captured = {}

    async def resolve(host, port):
        return ["93.184.216.34"]

    async def send(self, request, stream=False):
        captured["url"] = str(request.url)
        captured["host"] = request.headers["host"]
        captured["sni"] = request.extensions.get("sni_hostname")
        return httpx.Response(200, headers={"content-type": "audio/wav"}, content=AUDIO, request=request)

    monkeypatch.setattr(sources, "resolve_host", resolve)
    monkeypatch.setattr(httpx.AsyncClient, "send", send)
    assert load("https://media.example/v/a.wav", RefAudioSettings()) == AUDIO
    assert captured == {"url": "https://93.184.216.34/v/a.wav", "host": "media.example", "sni": "media.example"}


# --- data: ------------------------------------------------------------------------------------------


def data_url(data: bytes, mime: str = "audio/wav") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def test_data_urls():
    assert load(data_url(AUDIO)) == AUDIO
    assert load(data_url(AUDIO, "")) == AUDIO
    assert load(data_url(AUDIO, "application/octet-stream")) == AUDIO
    urlsafe = "data:audio/wav;base64," + base64.urlsafe_b64encode(AUDIO).decode().rstrip("=")
    assert load(urlsafe) == AUDIO
    b64 = base64.b64encode(AUDIO).decode()
    wrapped = "data:audio/wav;base64," + "\r\n".join(b64[i : i + 76] for i in range(0, len(b64), 76))
    assert load(wrapped) == AUDIO


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("data:audio/wav;base64,!!!notbase64!!!", "not valid base64"),
        ("data:audio/wav,rawdata", "base64-encoded"),
        ("data:audio/wav;base64", "no ','"),
        ("data:text/plain;base64,aGVsbG8=", "not audio"),
        ("data:audio/wav;base64,", "empty"),
        ("data:audio/wav;base64," + base64.b64encode(b"hello world, plain text").decode(), "not a supported audio"),
    ],
)
def test_bad_data_urls(value, fragment):
    refused(value, match=fragment)


def test_data_url_size_limit_is_checked_before_decoding():
    with pytest.raises(UploadTooLarge):
        load(data_url(AUDIO), RefAudioSettings(max_bytes=1000))


@pytest.mark.parametrize("value", ["", "   ", "ftp://host/a.wav", "/etc/passwd", "UklGRg==", "gopher://x"])
def test_unsupported_locators(value):
    refused(value)


# --- file:// ----------------------------------------------------------------------------------------


@pytest.fixture
def media(tmp_path):
    root = tmp_path / "media"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.wav").write_bytes(AUDIO)
    (tmp_path / "secret.wav").write_bytes(AUDIO)
    return root


def test_file_urls_under_the_allowed_directory(media):
    s = RefAudioSettings(allowed_local_media_path=str(media))
    assert load(f"file://{media}/sub/a.wav", s) == AUDIO
    assert load(f"file://localhost{media}/sub/a.wav", s) == AUDIO
    os.symlink(media / "sub" / "a.wav", media / "link.wav")  # a symlink staying inside is fine
    assert load(f"file://{media}/link.wav", s) == AUDIO
    assert load(f"file://{media}/sub/%61.wav", s) == AUDIO  # percent-encoded path


def test_file_urls_are_refused_without_a_setting(media):
    refused(f"file://{media}/sub/a.wav", RefAudioSettings(), "disabled")


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("{root}/../secret.wav", "outside the allowed"),
        ("{root}/sub/../../secret.wav", "outside the allowed"),
        ("{root}/%2e%2e/secret.wav", "outside the allowed"),
        ("{root}/escape.wav", "outside the allowed"),  # symlink pointing out of the root
        ("{root}/nope.wav", "does not exist"),
        ("{root}/sub", "not a regular file"),
        ("{root}/fifo", "not a regular file"),
        ("{root}/empty.wav", "empty"),
        ("{root}/text.wav", "not a supported audio"),
    ],
)
def test_file_url_refusals(media, path, fragment):
    os.symlink(media.parent / "secret.wav", media / "escape.wav")
    os.mkfifo(media / "fifo")
    (media / "empty.wav").write_bytes(b"")
    (media / "text.wav").write_text("hello")
    refused("file://" + path.format(root=media), RefAudioSettings(allowed_local_media_path=str(media)), fragment)


def test_file_url_host_and_size(media):
    s = RefAudioSettings(allowed_local_media_path=str(media))
    refused(f"file://otherhost{media}/sub/a.wav", s, "local path")
    with pytest.raises(UploadTooLarge):
        load(f"file://{media}/sub/a.wav", RefAudioSettings(allowed_local_media_path=str(media), max_bytes=100))


def test_allowed_directory_given_through_a_symlink(media, tmp_path):
    alias = tmp_path / "alias"
    os.symlink(media, alias)
    s = RefAudioSettings(allowed_local_media_path=str(alias))
    assert load(f"file://{alias}/sub/a.wav", s) == AUDIO
    assert load(f"file://{media}/sub/a.wav", s) == AUDIO
    refused(f"file://{alias}/../secret.wav", s, "outside")


def test_is_under_is_not_a_string_prefix_check(tmp_path):
    (tmp_path / "media").mkdir()
    (tmp_path / "media-evil").mkdir()
    (tmp_path / "media-evil" / "a.wav").write_bytes(AUDIO)
    s = RefAudioSettings(allowed_local_media_path=str(tmp_path / "media"))
    refused(f"file://{tmp_path}/media-evil/a.wav", s, "outside")
    assert Path(tmp_path / "media-evil" / "a.wav").is_file()
