"""The web dashboard: a single-page app served by the API at /ui, same tokens as the REST API.

The page is static (static/: index.html, app.js, app.css and the vendored preact, htm
and uPlot in static/vendor/); it holds no data and needs no token to load. Everything it
shows comes from the REST API through `fetch` with the user's token as the Bearer header,
so the dashboard can see and do exactly what the token can. The token is kept in the
tab's sessionStorage and never put in a URL.

`mount(app)` adds /ui (the page) and /ui/static (its files); app.py also includes
nodes.py's GET /v1/nodes (capacity and allocation: the one thing the page needed that
no REST route said).
`SecurityHeaders` gives every /ui answer a Content-Security-Policy that allows nothing but
the API's own origin: no inline script, no other host, no framing.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
PREFIX = "/ui"

# Self only. img-src allows blob: for the results download link the page makes from a
# fetched body (the token cannot go in a plain link); style-src needs no 'unsafe-inline'
# because preact and uPlot set styles through the DOM, which CSP does not restrict.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class SecurityHeaders:
    """ASGI middleware: the dashboard's security headers on every answer under /ui."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != PREFIX and not path.startswith(PREFIX + "/"):
            return await self.app(scope, receive, send)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def mount(app: FastAPI) -> None:
    """Serve the dashboard at /ui (the page) and /ui/static (its files)."""

    @app.get(PREFIX, include_in_schema=False)
    def ui_root() -> RedirectResponse:
        # Relative URLs in the page resolve against /ui/, not /.
        return RedirectResponse(PREFIX + "/", status_code=308)

    @app.get(PREFIX + "/", include_in_schema=False)
    def ui_page() -> FileResponse:
        # no-cache: a new version of the page is picked up on the next load.
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount(PREFIX + "/static", StaticFiles(directory=STATIC), name="ui-static")
