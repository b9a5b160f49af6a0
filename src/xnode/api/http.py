"""gRPC-web and HTTP/JSON on one HTTP/1.1 port, for browsers and scripts.

Both call the very handlers the gRPC server registers (the same GenericRpcHandlers, decoding,
refusal mapping and use cases); this module only changes the framing:
- gRPC-web (binary): POST /<package>.<Service>/<Method>, body = gRPC frames, reply = data
  frames then a trailer frame (flag 0x80); errors before any data are trailers-only (status in
  the HTTP headers). Server streams are written frame by frame over a chunked response.
- JSON: the XIP's `option (google.api.http)` POST paths (/mls/v2/...), body "*", with the
  protobuf JSON mapping; server streams are newline-delimited JSON, one {"result": ...} or
  {"error": ...} object a line (grpc-gateway's convention).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import inspect
import json
import ssl
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import quote

import grpc
import structlog
from aiohttp import web
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health, health_pb2

from xnode.config import DEFAULT_CONNECTIONS, ConnectionLimits
from xnode.observability.metrics import HTTP_CONNECTIONS_REFUSED

log = structlog.get_logger(__name__)

GRPC_WEB = "application/grpc-web+proto"
_DATA, _TRAILER = 0x00, 0x80
_FRAME_HEADER = struct.Struct(">BI")
EXPOSED_HEADERS = "grpc-status, grpc-message"
CORS_ORIGIN = web.RequestKey("cors_origin", str)  # the allowed Origin of this request

# google.rpc.Code -> HTTP, as grpc-gateway maps them.
HTTP_STATUS = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}

HEALTH_SERVICE = "grpc.health.v1.Health"
_MLS = "xmtp.xmtpv4.message_api"
# The XIP's HTTP mappings (3.3.3) -> the gRPC method they call.
NODE_JSON_ROUTES = {
    "/mls/v2/publish-payer-envelopes": f"/{_MLS}.ReplicationApi/PublishPayerEnvelopes",
    "/mls/v2/query-envelopes": f"/{_MLS}.ReplicationApi/QueryEnvelopes",
    "/mls/v2/subscribe-envelopes": f"/{_MLS}.ReplicationApi/SubscribeEnvelopes",
    "/mls/v2/get-inbox-ids": f"/{_MLS}.ReplicationApi/GetInboxIds",
    "/mls/v2/get-newest-envelope": f"/{_MLS}.ReplicationApi/GetNewestEnvelope",
    "/mls/v2/submit-misbehavior-report": f"/{_MLS}.MisbehaviorApi/SubmitMisbehaviorReport",
    "/mls/v2/query-misbehavior-reports": f"/{_MLS}.MisbehaviorApi/QueryMisbehaviorReports",
}
_PAYER = "xmtp.xmtpv4.payer_api.PayerApi"
GATEWAY_JSON_ROUTES = {
    "/mls/v2/payer/publish-client-envelopes": f"/{_PAYER}/PublishClientEnvelopes",
    "/mls/v2/payer/get-nodes": f"/{_PAYER}/GetNodes",
}


class Aborted(Exception):
    """What `context.abort` raises here, as grpc.aio's does on a real call."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class HttpContext:
    """The part of grpc.aio.ServicerContext the handlers use."""

    metadata: tuple[tuple[str, str], ...]
    remote: str
    trailers: list[tuple[str, str | bytes]] = field(default_factory=list)
    code: grpc.StatusCode = grpc.StatusCode.OK
    details: str = ""
    started: float = field(default_factory=time.monotonic)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def time_remaining(self) -> float | None:
        """What is left of the caller's `grpc-timeout` (gRPC-web sends it as a header)."""
        timeout = grpc_timeout_s(dict(self.metadata).get("grpc-timeout", ""))
        if timeout is None:
            return None
        return max(0.0, timeout - (time.monotonic() - self.started))

    def peer(self) -> str:
        # grpc's form, so the API limits see the same client IP as on the gRPC port.
        return f"ipv6:[{self.remote}]:0" if ":" in self.remote else f"ipv4:{self.remote}:0"

    def set_trailing_metadata(self, metadata: Iterable[tuple[str, str | bytes]]) -> None:
        self.trailers.extend(metadata)

    async def send_initial_metadata(self, metadata: Iterable[tuple[str, str | bytes]]) -> None:
        return None

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: Any) -> None:
        raise Aborted(code, details)


_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def grpc_timeout_s(header: str) -> float | None:
    """A `grpc-timeout` value (digits and a unit: H M S m u n) in seconds; None if absent
    or malformed (no deadline, as on the gRPC port)."""
    digits, unit = header[:-1], header[-1:]
    if not digits.isdigit() or unit not in _TIMEOUT_UNITS:
        return None
    return int(digits) * _TIMEOUT_UNITS[unit]


@dataclass(frozen=True)
class _CallDetails(grpc.HandlerCallDetails):
    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Method:
    path: str  # /<package>.<Service>/<Method>
    handler: grpc.RpcMethodHandler[Any, Any]
    request_type: type[Message]
    response_type: type[Message]

    @property
    def streaming(self) -> bool:
        return self.handler.unary_stream is not None


def _message_class(full_name: str) -> type[Message]:
    desc = descriptor_pool.Default().FindMessageTypeByName(full_name)
    return message_factory.GetMessageClass(desc)


def methods_of(
    handlers: Sequence[grpc.GenericRpcHandler], excluded: frozenset[str] = frozenset()
) -> dict[str, Method]:
    """Every unary and server-streaming method the handlers serve, by path."""
    found: dict[str, Method] = {}
    pool = descriptor_pool.Default()
    for handler in handlers:
        for service_name in _service_names(handler):
            service = pool.FindServiceByName(service_name)
            for m in service.methods:
                path = f"/{service.full_name}/{m.name}"
                rpc = handler.service(_CallDetails(path))
                if path in excluded or rpc is None or m.client_streaming:
                    continue
                found[path] = Method(
                    path,
                    rpc,
                    _message_class(m.input_type.full_name),
                    _message_class(m.output_type.full_name),
                )
    return found


def _service_names(handler: grpc.GenericRpcHandler) -> list[str]:
    # grpc.method_handlers_generic_handler answers a ServiceRpcHandler, which names its service.
    return [handler.service_name()] if isinstance(handler, grpc.ServiceRpcHandler) else []


def health_handler(servicer: health.HealthServicer) -> grpc.GenericRpcHandler:
    """Health/Check over HTTP: the browser SDK asks it of every node before using it."""
    check = grpc.unary_unary_rpc_method_handler(
        servicer.Check,
        request_deserializer=health_pb2.HealthCheckRequest.FromString,
        response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(HEALTH_SERVICE, {"Check": check})


def _deserialized(method: Method, data: bytes) -> Any:
    """As grpc would decode it; a message that does not decode is INVALID_ARGUMENT, not INTERNAL
    (handlers that decode themselves say so in their own words)."""
    deserialize = method.handler.request_deserializer
    if deserialize is None:
        return data
    try:
        return deserialize(data)
    except DecodeError as exc:
        name = method.request_type.DESCRIPTOR.full_name
        raise Aborted(
            grpc.StatusCode.INVALID_ARGUMENT, f"request does not decode as {name}: {exc}"
        ) from exc


async def _call_unary(method: Method, data: bytes, ctx: HttpContext) -> bytes:
    h = method.handler
    request = _deserialized(method, data)
    behavior: Any = h.unary_unary  # typed for grpc's context; HttpContext is its stand-in
    result = behavior(request, ctx)
    if inspect.isawaitable(result):
        result = await result
    if ctx.code is not grpc.StatusCode.OK:  # a synchronous servicer's set_code (health)
        raise Aborted(ctx.code, ctx.details)
    return h.response_serializer(result) if h.response_serializer else result


async def _call_stream(method: Method, data: bytes, ctx: HttpContext) -> AsyncIterator[bytes]:
    h = method.handler
    request = _deserialized(method, data)
    behavior: Any = h.unary_stream
    stream = behavior(request, ctx)
    try:
        async for item in stream:
            yield h.response_serializer(item) if h.response_serializer else item
    finally:
        await stream.aclose()


def _frame(flag: int, payload: bytes) -> bytes:
    return _FRAME_HEADER.pack(flag, len(payload)) + payload


def _first_message(body: bytes) -> bytes:
    """The request message of a gRPC-web body; an empty body is the empty message."""
    if not body:
        return b""
    if len(body) < _FRAME_HEADER.size:
        raise Aborted(grpc.StatusCode.INVALID_ARGUMENT, "truncated gRPC-web frame header")
    flag, size = _FRAME_HEADER.unpack_from(body)
    if flag & 0x01:
        raise Aborted(grpc.StatusCode.UNIMPLEMENTED, "compressed gRPC-web frames are not supported")
    payload = body[_FRAME_HEADER.size : _FRAME_HEADER.size + size]
    if len(payload) != size:
        raise Aborted(grpc.StatusCode.INVALID_ARGUMENT, "truncated gRPC-web frame")
    return payload


def _metadata_lines(metadata: Iterable[tuple[str, str | bytes]]) -> list[tuple[str, str]]:
    """Binary (-bin) metadata travels base64 in HTTP headers and trailers."""
    lines = []
    for key, value in metadata:
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode()
        lines.append((key, value))
    return lines


def _status_lines(code: grpc.StatusCode, message: str, ctx: HttpContext) -> list[tuple[str, str]]:
    return [
        ("grpc-status", str(code.value[0])),
        ("grpc-message", quote(message, safe=" ")),
        *_metadata_lines(ctx.trailers),
    ]


def _trailer_frame(lines: list[tuple[str, str]]) -> bytes:
    return _frame(_TRAILER, "".join(f"{k}:{v}\r\n" for k, v in lines).encode())


def _context(request: web.Request) -> HttpContext:
    metadata = tuple((k.lower(), v) for k, v in request.headers.items())
    return HttpContext(metadata, request.remote or "")


def _status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, Aborted):
        return exc.code, exc.message
    log.error("http_handler_failed", error=repr(exc))
    return grpc.StatusCode.INTERNAL, "internal error"


class HttpApi:
    """The aiohttp application: gRPC-web for every method, JSON for the routes given."""

    def __init__(
        self,
        methods: Mapping[str, Method],
        json_routes: Mapping[str, str],
        cors_origins: Sequence[str],
        max_body_bytes: int,
    ) -> None:
        self._methods = dict(methods)
        self._json = {p: self._methods[m] for p, m in json_routes.items() if m in self._methods}
        self._origins = frozenset(cors_origins)
        self.app = web.Application(
            client_max_size=max_body_bytes, middlewares=[self._cors_middleware]
        )
        self.app.router.add_route("*", "/{path:.*}", self._dispatch)

    def _allowed_origin(self, request: web.Request) -> str | None:
        origin = request.headers.get("Origin")
        if origin is None:
            return None
        if "*" in self._origins:
            return "*"
        return origin if origin in self._origins else None

    @web.middleware
    async def _cors_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        origin = self._allowed_origin(request)
        if request.method == "OPTIONS":
            # The browser's preflight: answered without calling anything.
            response = web.Response(status=204)
            if origin is not None:
                requested = request.headers.get("Access-Control-Request-Headers", "")
                response.headers.update(
                    {
                        "Access-Control-Allow-Origin": origin,
                        "Access-Control-Allow-Methods": "POST, OPTIONS",
                        "Access-Control-Allow-Headers": requested or "content-type",
                        "Access-Control-Max-Age": "600",
                        "Vary": "Origin",
                    }
                )
            return response
        if origin is not None:
            request[CORS_ORIGIN] = origin
        return await handler(request)

    def _cors_headers(self, request: web.Request) -> dict[str, str]:
        origin = request.get(CORS_ORIGIN)
        if origin is None:
            return {}
        return {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Expose-Headers": EXPOSED_HEADERS,
            "Vary": "Origin",
        }

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.json_response({"code": 12, "message": "only POST is served"}, status=405)
        if request.path in self._json:
            return await self._json_call(request, self._json[request.path])
        method = self._methods.get(request.path)
        if request.content_type.startswith("application/grpc-web"):
            return await self._grpc_web_call(request, method)
        return web.json_response(
            {"code": 5, "message": f"no route for {request.path}"},
            status=404,
            headers=self._cors_headers(request),
        )

    # --- gRPC-web

    async def _grpc_web_call(
        self, request: web.Request, method: Method | None
    ) -> web.StreamResponse:
        ctx = _context(request)
        headers = {"Content-Type": GRPC_WEB, **self._cors_headers(request)}
        try:
            if request.content_type not in ("application/grpc-web", GRPC_WEB):
                raise Aborted(grpc.StatusCode.UNIMPLEMENTED, f"content-type {request.content_type}")
            if method is None:
                raise Aborted(grpc.StatusCode.UNIMPLEMENTED, f"unknown method {request.path}")
            data = _first_message(await request.read())
            if not method.streaming:
                reply = await _call_unary(method, data, ctx)
                body = _frame(_DATA, reply) + _trailer_frame(
                    _status_lines(grpc.StatusCode.OK, "", ctx)
                )
                return web.Response(body=body, headers=headers)
        except Exception as exc:  # every failure becomes a status, as on gRPC
            code, message = _status_of(exc)
            # Trailers-only: the status in the headers (exposed to the page by CORS).
            headers.update(_status_lines(code, message, ctx))
            return web.Response(body=b"", headers=headers)
        return await self._grpc_web_stream(request, method, data, ctx, headers)

    async def _grpc_web_stream(
        self,
        request: web.Request,
        method: Method,
        data: bytes,
        ctx: HttpContext,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        code, message = grpc.StatusCode.OK, ""
        try:
            async for reply in _call_stream(method, data, ctx):
                await response.write(_frame(_DATA, reply))
        except ConnectionResetError:
            return response  # the client went away
        except Exception as exc:
            code, message = _status_of(exc)
        await response.write(_trailer_frame(_status_lines(code, message, ctx)))
        await response.write_eof()
        return response

    # --- JSON

    async def _json_call(self, request: web.Request, method: Method) -> web.StreamResponse:
        ctx = _context(request)
        headers = self._cors_headers(request)
        try:
            data = await self._json_request(request, method)
            if not method.streaming:
                reply = await _call_unary(method, data, ctx)
                return web.json_response(_to_json(method, reply), headers=headers)
        except Exception as exc:
            code, message = _status_of(exc)
            headers.update(_metadata_lines(ctx.trailers))
            return web.json_response(
                {"code": code.value[0], "message": message, "details": []},
                status=HTTP_STATUS.get(code, 500),
                headers=headers,
            )
        return await self._json_stream(request, method, data, ctx, headers)

    async def _json_request(self, request: web.Request, method: Method) -> bytes:
        text = await request.text()
        message = method.request_type()
        try:
            json_format.Parse(text or "{}", message)
        except (json_format.ParseError, json.JSONDecodeError) as exc:
            raise Aborted(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"body does not parse as {message.DESCRIPTOR.full_name}: {exc}",
            ) from exc
        return message.SerializeToString()

    async def _json_stream(
        self,
        request: web.Request,
        method: Method,
        data: bytes,
        ctx: HttpContext,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson", **headers})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            async for reply in _call_stream(method, data, ctx):
                line = {"result": _to_json(method, reply)}
                await response.write(json.dumps(line).encode() + b"\n")
        except ConnectionResetError:
            return response
        except Exception as exc:
            code, message = _status_of(exc)
            error = {"error": {"code": code.value[0], "message": message, "details": []}}
            await response.write(json.dumps(error).encode() + b"\n")
        await response.write_eof()
        return response


def _to_json(method: Method, reply: bytes) -> dict[str, Any]:
    return json_format.MessageToDict(method.response_type.FromString(reply))


class _PerIpSite(web.TCPSite):
    """aiohttp's TCP site, with at most `most` open connections per client IP: more are
    closed as they open, before aiohttp reads anything from them."""

    def __init__(self, most: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._most = most
        self._open: dict[str, int] = {}

    async def start(self) -> None:
        """TCPSite.start with aiohttp's protocol factory wrapped (it has no hook for it)."""
        await web.BaseSite.start(self)
        serve = self._runner.server
        assert serve is not None  # the runner is set up before its sites start
        self._server = await asyncio.get_running_loop().create_server(
            functools.partial(_Counted, serve, self._open, self._most),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )


class _Counted(asyncio.Protocol):
    """One connection of the HTTP port, counted against its client IP; aiohttp's own
    protocol does the rest."""

    def __init__(self, serve: Callable[[], asyncio.Protocol], open_: dict[str, int], most: int):
        self._inner = serve()
        self._open = open_
        self._most = most
        self._ip: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        if self._open.get(ip, 0) >= self._most:
            HTTP_CONNECTIONS_REFUSED.inc()
            cast(asyncio.Transport, transport).abort()
            return
        self._ip = ip
        self._open[ip] = self._open.get(ip, 0) + 1
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ip is None:
            return  # refused: aiohttp never saw it
        left = self._open[self._ip] - 1
        if left:
            self._open[self._ip] = left
        else:
            del self._open[self._ip]
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


@dataclass
class HttpServer:
    """The running HTTP port; `address` has the port actually bound."""

    runner: web.AppRunner
    address: str

    async def stop(self) -> None:
        await self.runner.cleanup()


async def serve_http(
    api: HttpApi,
    listen_address: str,
    grace_s: float,
    tls: ssl.SSLContext | None = None,
    reuse_port: bool = False,
    connections: ConnectionLimits = DEFAULT_CONNECTIONS,
) -> HttpServer:
    """`tls` is the gRPC port's certificate as an SSL context (ServerTls.ssl_context); None
    serves plaintext (the caller logs that loudly, with the other plaintext listeners).
    `reuse_port`: the node's worker processes share the port (SO_REUSEPORT).

    aiohttp's keep-alive timeout runs from the connection's start until a request's headers
    are complete, and again between requests: set to the handshake time, it closes a
    connection that sends its headers slowly (slowloris) or nothing at all. Between requests
    a connection gets that long too (browsers reconnect at once)."""
    host, _, port = listen_address.rpartition(":")
    runner = web.AppRunner(
        api.app,
        access_log=None,
        shutdown_timeout=grace_s,
        keepalive_timeout=connections.handshake_s,
    )
    await runner.setup()
    site = _PerIpSite(
        connections.http_per_ip,
        runner,
        host or None,
        int(port),
        ssl_context=tls,
        reuse_port=reuse_port or None,
    )
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    bound = runner.addresses[0]
    log.info("http_listening", address=f"{host}:{bound[1]}", tls=tls is not None)
    return HttpServer(runner, f"{host}:{bound[1]}")
