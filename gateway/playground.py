"""The browser playground: `GET /` and its two assets under `/static/` (gateway/static/, shipped as
package data). Open without an API key (gateway.auth): the page holds no secret; it asks for the key
and sends it with every API call it makes."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from .errors import not_found

# Exactly these files: a fixed table, so no request path ever reaches the file system.
_ASSETS = {
    "playground.js": "text/javascript; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
}
# Revalidate on every load, so a page never runs against an older or newer gateway than its own.
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


def _read(name: str) -> bytes:
    return resources.files(__package__).joinpath("static").joinpath(name).read_bytes()


router = APIRouter(include_in_schema=False)


@router.get("/")
async def page() -> Response:
    return Response(_read("index.html"), media_type="text/html; charset=utf-8", headers=_HEADERS)


@router.get("/static/{name}")
async def asset(name: str) -> Response:
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise not_found(f"No static file '{name}'", None)
    return Response(_read(name), media_type=media_type, headers=_HEADERS)
