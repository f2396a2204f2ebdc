"""Streaming, size-limited reads of request bodies (framework-free; python-multipart does the parsing).

Starlette's `request.form()` spools a whole file part to disk before the handler sees it, so the
spec's 10 MB upload limit could only be checked after reading everything. These helpers consume the
body as it arrives (`request.stream()` in Starlette/FastAPI) and raise UploadTooLarge as soon as a
limit is passed, without reading the rest.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping
from dataclasses import dataclass, field

from ttscore.contract.errors import InvalidRequest

from .errors import UploadTooLarge

DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_FIELD_BYTES = 64 * 1024
DEFAULT_MAX_PARTS = 16
_OVERHEAD_BYTES = 64 * 1024  # boundaries and part headers on top of the payload limits


async def read_limited(
    chunks: AsyncIterable[bytes], limit: int, *, param: str | None = "audio_sample", what: str = "File size"
) -> bytes:
    """Concatenate `chunks`, raising UploadTooLarge as soon as more than `limit` bytes have arrived."""
    buf = bytearray()
    async for chunk in chunks:
        buf += chunk
        if len(buf) > limit:
            raise UploadTooLarge(limit, param, what)
    return bytes(buf)


def check_content_length(value: str | None, limit: int, *, param: str | None = "audio_sample") -> None:
    """Reject early from the Content-Length header (when present) before reading any of the body."""
    if value is None:
        return
    try:
        n = int(value)
    except ValueError:
        raise InvalidRequest("Invalid Content-Length header", None) from None
    if n > limit:
        raise UploadTooLarge(limit, param, "Request body")


@dataclass(frozen=True)
class FormFile:
    filename: str | None
    content_type: str | None
    data: bytes


@dataclass
class MultipartForm:
    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, FormFile] = field(default_factory=dict)

    def field(self, name: str) -> str | None:
        return self.fields.get(name)

    def file(self, name: str) -> FormFile | None:
        return self.files.get(name)


def max_body_bytes(max_file_bytes: int, max_field_bytes: int, max_parts: int) -> int:
    return max_file_bytes + max_parts * max_field_bytes + _OVERHEAD_BYTES


async def parse_multipart_form(
    content_type: str | None,
    chunks: AsyncIterable[bytes],
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    file_limits: Mapping[str, int] | None = None,
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
    max_parts: int = DEFAULT_MAX_PARTS,
    content_length: str | None = None,
) -> MultipartForm:
    """Parse multipart/form-data from a stream of body chunks, enforcing every limit while reading.

    A part with a filename is a file (limit `file_limits[name]`, else `max_file_bytes`; exceeding it
    raises UploadTooLarge with `param` = the part name); other parts are UTF-8 text fields of at most
    `max_field_bytes`. A part named in `file_limits` is a file even without a filename (curl's
    `-F name=<file` sends one that way). Later parts of the same name replace earlier ones.
    """
    from python_multipart.multipart import MultipartParser, parse_options_header

    ctype, params = parse_options_header(content_type or "")
    if ctype.lower() != b"multipart/form-data":
        raise InvalidRequest("Expected a multipart/form-data request body", None)
    boundary = params.get(b"boundary")
    if not boundary:
        raise InvalidRequest("multipart/form-data body without a boundary", None)
    limit_total = max_body_bytes(max([max_file_bytes, *(file_limits or {}).values()]), max_field_bytes, max_parts)
    check_content_length(content_length, limit_total)

    form = MultipartForm()
    state: dict[str, object] = {"ended": False}
    header_field = bytearray()
    header_value = bytearray()
    headers: dict[bytes, bytes] = {}
    body = bytearray()
    parts = 0
    current: dict[str, object] = {}
    errors: list[InvalidRequest] = []

    def on_part_begin() -> None:
        nonlocal parts
        parts += 1
        headers.clear()
        body.clear()
        current.clear()
        if parts > max_parts:
            errors.append(InvalidRequest(f"Too many form parts (at most {max_parts})", None))

    def on_header_field(data: bytes, start: int, end: int) -> None:
        header_field.extend(data[start:end])

    def on_header_value(data: bytes, start: int, end: int) -> None:
        header_value.extend(data[start:end])

    def on_header_end() -> None:
        headers[bytes(header_field).strip().lower()] = bytes(header_value).strip()
        header_field.clear()
        header_value.clear()

    def on_headers_finished() -> None:
        disposition, opts = parse_options_header(headers.get(b"content-disposition", b""))
        if disposition.lower() != b"form-data" or b"name" not in opts:
            errors.append(InvalidRequest("multipart part without a form-data name", None))
            return
        name = opts[b"name"].decode("utf-8", "replace")
        filename = opts.get(b"filename")
        is_file = filename is not None or name in (file_limits or {})
        current["name"] = name
        current["is_file"] = is_file
        current["filename"] = filename.decode("utf-8", "replace") if filename is not None else None
        current["content_type"] = headers.get(b"content-type", b"").decode("latin-1") or None
        current["limit"] = (file_limits or {}).get(name, max_file_bytes) if is_file else max_field_bytes

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if errors or "name" not in current:
            return
        body.extend(data[start:end])
        limit = int(current["limit"])  # type: ignore[call-overload]
        if len(body) > limit:
            name = str(current["name"])
            if current["is_file"]:
                errors.append(UploadTooLarge(limit, name))
            else:
                errors.append(InvalidRequest(f"Form field '{name}' is too long (at most {limit} bytes)", name))

    def on_part_end() -> None:
        if errors or "name" not in current:
            return
        name = str(current["name"])
        if current["is_file"]:
            form.files[name] = FormFile(
                current["filename"], current["content_type"], bytes(body)  # type: ignore[arg-type]
            )
        else:
            try:
                form.fields[name] = bytes(body).decode("utf-8")
            except UnicodeDecodeError:
                errors.append(InvalidRequest(f"Form field '{name}' is not valid UTF-8", name))

    def on_end() -> None:
        state["ended"] = True

    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": on_part_begin,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_headers_finished": on_headers_finished,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
            "on_end": on_end,
        },
    )
    received = 0
    async for chunk in chunks:
        if not chunk:
            continue
        received += len(chunk)
        if received > limit_total:
            raise UploadTooLarge(limit_total, None, "Request body")
        try:
            parser.write(chunk)
        except Exception as exc:  # python-multipart raises its own error types
            raise InvalidRequest(f"Malformed multipart/form-data body: {exc}", None) from None
        if errors:
            raise errors[0]  # stop reading: the rest of the body is never consumed
    if not state["ended"]:
        raise InvalidRequest("Incomplete multipart/form-data body", None)
    return form
