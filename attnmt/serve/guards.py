"""What stands between the network and the app: the Host check, the body limit, strict JSON.

- ``HostCheck`` answers 400 to a request whose ``Host`` header is not on the allow-list
  (loopback names by default). A browser page from another site can make a loopback server's name
  resolve to 127.0.0.1 (DNS rebinding), but its requests still carry the foreign ``Host``.
- ``BodyLimit`` answers 413 to bodies over the limit before the app reads them, also for chunked
  uploads that carry no ``Content-Length``.
- ``StrictJSONRoute`` parses request bodies as RFC 8259 JSON: ``NaN``, ``Infinity``, numbers that
  overflow a float (``1e400``) and lone UTF-16 surrogates (``"\\ud800"``) are 422 errors instead of
  values that break decoding or the JSON of the answer.

Every answer they give is the server's JSON error body (``error_response``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def safe_json(value: Any) -> Any:
    """``value`` with everything JSON cannot carry made printable: exceptions and other objects
    become strings, bytes are decoded, NaN/±Infinity become strings, lone surrogates are escaped."""
    if isinstance(value, dict):
        return {str(safe_json(k)): safe_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe_json(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = value if isinstance(value, str) else str(value)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_response(status: int, message: str, detail: Any = None) -> JSONResponse:
    """The one error body of the server: ``{"error": "one line", "detail": ...}``."""
    message = " ".join(str(safe_json(message)).split())
    return JSONResponse(
        {"error": message, "detail": safe_json(detail) if detail is not None else message}, status
    )


def _host_name(header: str) -> str:
    """``example.org:8000`` → ``example.org``; ``[::1]:8000`` → ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class HostCheck:
    """Answer 400 unless the ``Host`` header names an allowed host (``*`` allows any)."""

    def __init__(self, app, allowed: tuple[str, ...] | list[str]):
        self.app = app
        self.allowed = {h.strip().lower().strip("[]") for h in allowed}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or "*" in self.allowed:
            return await self.app(scope, receive, send)
        header = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        name = _host_name(header)
        if name not in self.allowed:
            allowed = ", ".join(sorted(self.allowed))
            response = error_response(
                400,
                f"Host header {header!r} is not served here (allowed: {allowed}); "
                "start the server with --allow-host NAME to add a name",
            )
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)


class BodyLimit:
    """Reject request bodies over ``limit`` bytes with 413 before the app parses them (also for
    chunked uploads that carry no Content-Length)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                return await error_response(400, "bad Content-Length header")(scope, receive, send)
            if size > self.limit:
                return await self._too_large(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                return await self._too_large(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send):
        response = error_response(413, f"request body is larger than the limit of {self.limit} bytes")
        await response(scope, receive, send)


def _no_constant(name: str):
    raise HTTPException(422, f"{name} is not a JSON number; send finite numbers only")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise HTTPException(422, f"the number {text[:40]} is out of range")
    return value


def _check_unicode(value: Any, where: str = "body") -> None:
    """Lone surrogates cannot be encoded as UTF-8: refuse them where they are."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise HTTPException(
                422, f"{where}: invalid Unicode (lone surrogate U+{ord(value[err.start]):04X})"
            ) from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_unicode(k, where)
            _check_unicode(v, k if where == "body" else f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_unicode(v, f"{where}[{i}]")


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as err:
                raise json.JSONDecodeError("invalid UTF-8", body.decode("latin-1"), err.start) from None
            value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
            _check_unicode(value)
            self._json = value
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose JSON bodies are parsed by ``StrictJSONRequest``."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def strict(request: Request):
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict
