"""A real, scripted OpenAI-compatible HTTP server for tests (standard library only).

Tests reach it through litellm exactly as eat reaches a real provider:
``litellm.completion(model="openai/<name>", api_base=server.base_url, api_key="sk-test", ...)``.

Each test scripts the answers, one step per POST /v1/chat/completions, in order:

    def test_something(llm_server):
        llm_server.reply("hello", prompt_tokens=10, completion_tokens=2, cached_tokens=4)
        llm_server.reply("reading it", tool_calls=[("read_file", {"path": "TASK.md"})])
        llm_server.error(429, retry_after=1)
        llm_server.hang(5)                      # answers after 5 s: trips a client timeout
        llm_server.malformed()                  # 200 with a body that is not JSON
        llm_server.drop()                       # closes the connection without answering
        llm_server.push(lambda req: Reply("json" if req.get("response_format") else "text"))
        ...
        assert len(llm_server.requests) == 2
        assert llm_server.requests[0].messages[-1]["content"] == "hi"

A step is a ``Reply``, ``HTTPError``, ``Hang``, ``Malformed`` or ``Drop``, a plain string
(shorthand for ``Reply(text)``) or a callable ``(request_json) -> step``. When the queue is
empty ``ScriptedLLM.default`` answers (by default HTTP 500 "script exhausted"), so an
unexpected extra call shows up as an error in the test, and in ``.requests``.

GET /v1/models answers a one-model list and is not recorded in ``.requests`` (it goes to
``.other_requests``); every other path is a 404.

Use the ``llm_server`` fixture (function-scoped; conftest.py imports it), or ``serve()`` as a
context manager outside pytest.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

__all__ = [
    "Drop",
    "HTTPError",
    "Hang",
    "Malformed",
    "RecordedRequest",
    "Reply",
    "ScriptedLLM",
    "Step",
    "llm_server",
    "serve",
]

DEFAULT_MODEL = "eat-test-model"
_ids = itertools.count(1)


# --------------------------------------------------------------------------- steps


@dataclass
class Reply:
    """A normal chat completion whose message content is ``content``.

    Token counts default to rough estimates (characters // 4, at least 1): prompt tokens from
    the request's messages, completion tokens from ``content``. ``cached_tokens`` appears as
    ``usage.prompt_tokens_details.cached_tokens`` (OpenAI's field) only when given.
    ``usage=False`` leaves the usage object out altogether (some servers do).
    """

    content: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str = "stop"
    model: str | None = None  # None: echo the request's model
    usage: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    # [(function name, arguments dict), ...]: the reply calls these tools (finish_reason
    # "tool_calls"), as a tool-calling model does.
    tool_calls: list[tuple[str, dict]] | None = None


@dataclass
class HTTPError:
    """An error response in OpenAI's shape: ``{"error": {"message", "type", "code"}}``.

    ``retry_after`` (seconds) becomes a ``Retry-After`` header. ``body`` replaces the JSON
    error body verbatim when given.
    """

    status: int
    message: str = ""
    retry_after: float | str | None = None
    type: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | str | None = None


@dataclass
class Hang:
    """Wait ``seconds`` before answering with ``then`` (default: a ``Reply("late reply")``).

    The wait ends early when the server stops, so a hang never holds up teardown; if the
    client gave up meanwhile, writing the late answer fails quietly.
    """

    seconds: float
    then: Step | None = None


@dataclass
class Malformed:
    """A response whose body is not a valid chat completion (by default: not JSON at all)."""

    body: bytes | str = b'{"id": "chatcmpl-broken", "choices": [ {"message": '
    status: int = 200
    content_type: str = "application/json"


@dataclass
class Drop:
    """Close the connection without sending any response."""


Step = Reply | HTTPError | Hang | Malformed | Drop | str | Callable[[dict], Any]


@dataclass
class RecordedRequest:
    """One request the server received. ``json`` is the parsed body (None if it was not JSON)."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names; Authorization left out
    json: dict | None
    raw: bytes
    time: float  # time.monotonic() when it arrived

    @property
    def model(self) -> str | None:
        return (self.json or {}).get("model")

    @property
    def messages(self) -> list[dict]:
        return (self.json or {}).get("messages") or []

    def get(self, key: str, default: Any = None) -> Any:
        return (self.json or {}).get(key, default)


# --------------------------------------------------------------------------- script


def _text_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _prompt_tokens(body: dict | None) -> int:
    total = 0
    for message in (body or {}).get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):  # content parts
            total += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return max(1, total // 4)


class ScriptedLLM:
    """The script and the record of one server. Thread-safe; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: deque[Step] = deque()
        self.default: Step = HTTPError(500, "script exhausted", type="server_error")
        self.requests: list[RecordedRequest] = []  # POST .../chat/completions, in order
        self.other_requests: list[RecordedRequest] = []  # everything else
        self.stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""  # "http://127.0.0.1:PORT/v1" once started

    # ---- scripting
    def push(self, *steps: Step) -> ScriptedLLM:
        with self._lock:
            self._steps.extend(steps)
        return self

    def reply(self, content: str, **kwargs: Any) -> ScriptedLLM:
        return self.push(Reply(content, **kwargs))

    def error(self, status: int, message: str = "", **kwargs: Any) -> ScriptedLLM:
        return self.push(HTTPError(status, message, **kwargs))

    def hang(self, seconds: float, then: Step | None = None) -> ScriptedLLM:
        return self.push(Hang(seconds, then))

    def malformed(self, body: bytes | str | None = None, **kwargs: Any) -> ScriptedLLM:
        return self.push(Malformed(body, **kwargs) if body is not None else Malformed(**kwargs))

    def drop(self) -> ScriptedLLM:
        return self.push(Drop())

    @property
    def pending(self) -> int:
        """Steps not yet consumed."""
        with self._lock:
            return len(self._steps)

    def _next_step(self) -> Step:
        with self._lock:
            return self._steps.popleft() if self._steps else self.default

    # ---- convenience for tests
    def litellm_kwargs(self, model: str = DEFAULT_MODEL, **extra: Any) -> dict[str, Any]:
        """kwargs for litellm.completion that reach this server and make exactly one attempt."""
        kwargs: dict[str, Any] = {
            "model": f"openai/{model}",
            "api_base": self.base_url,
            "api_key": "sk-test",
            "num_retries": 0,  # litellm's own retry wrapper: off
            "max_retries": 0,  # the OpenAI SDK's retries (default 2): off
        }
        kwargs.update(extra)
        return kwargs

    # ---- lifecycle
    def start(self) -> ScriptedLLM:
        handler = type("_BoundHandler", (_Handler,), {"script": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="llm-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()  # wakes hanging handlers
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- answering
    def _record(self, req: RecordedRequest, scripted: bool) -> None:
        with self._lock:
            (self.requests if scripted else self.other_requests).append(req)

    def _completion(self, body: dict | None, step: Reply) -> dict:
        prompt = step.prompt_tokens if step.prompt_tokens is not None else _prompt_tokens(body)
        completion = (
            step.completion_tokens
            if step.completion_tokens is not None
            else _text_tokens(step.content)
        )
        out: dict[str, Any] = {
            "id": f"chatcmpl-eat-{next(_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": step.model or (body or {}).get("model") or DEFAULT_MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": step.content,
                        **(
                            {
                                "tool_calls": [
                                    {
                                        "id": f"call_{next(_ids)}",
                                        "type": "function",
                                        "function": {"name": name, "arguments": json.dumps(args)},
                                    }
                                    for name, args in step.tool_calls
                                ]
                            }
                            if step.tool_calls
                            else {}
                        ),
                    },
                    "finish_reason": "tool_calls" if step.tool_calls else step.finish_reason,
                    "logprobs": None,
                }
            ],
        }
        if step.usage:
            usage: dict[str, Any] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            if step.cached_tokens is not None:
                usage["prompt_tokens_details"] = {"cached_tokens": step.cached_tokens}
            out["usage"] = usage
        return out


class _Handler(BaseHTTPRequestHandler):
    script: ScriptedLLM  # set on the bound subclass
    protocol_version = "HTTP/1.0"  # one request per connection: no stale keep-alive sockets
    server_version = "eat-scripted-llm/1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _read(self) -> RecordedRequest:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() != "authorization"}
        path = self.path.split("?", 1)[0]
        return RecordedRequest(self.command, path, headers, parsed, raw, time.monotonic())

    def _send(
        self,
        status: int,
        body: bytes | str | dict,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        if isinstance(body, dict):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client gave up (e.g. after a timeout)

    def do_GET(self) -> None:
        req = self._read()
        self.script._record(req, scripted=False)
        if req.path.rstrip("/").endswith("/models"):
            self._send(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": DEFAULT_MODEL,
                            "object": "model",
                            "created": 0,
                            "owned_by": "eat-tests",
                        }
                    ],
                },
            )
        else:
            self._send(404, {"error": {"message": f"no route {req.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        req = self._read()
        if not req.path.rstrip("/").endswith("/chat/completions"):
            self.script._record(req, scripted=False)
            self._send(404, {"error": {"message": f"no route {req.path}", "type": "not_found"}})
            return
        self.script._record(req, scripted=True)
        self._answer(req, self.script._next_step())

    def _answer(self, req: RecordedRequest, step: Step) -> None:
        script = self.script
        for _ in range(100):  # resolve callables and shorthands
            if isinstance(step, str):
                step = Reply(step)
            elif callable(step) and not isinstance(step, (Reply, HTTPError, Hang, Malformed, Drop)):
                step = step(req.json or {})
            else:
                break
        if isinstance(step, Reply):
            self._send(200, script._completion(req.json, step), step.headers)
        elif isinstance(step, HTTPError):
            headers = dict(step.headers)
            if step.retry_after is not None:
                headers["Retry-After"] = str(step.retry_after)
            if step.body is not None:
                body: bytes | str | dict = step.body
            else:
                body = {
                    "error": {
                        "message": step.message or f"scripted HTTP {step.status}",
                        "type": step.type
                        or ("rate_limit_error" if step.status == 429 else "scripted_error"),
                        "param": None,
                        "code": step.code,
                    }
                }
            self._send(step.status, body, headers)
        elif isinstance(step, Hang):
            if script.stopping.wait(step.seconds):
                return  # server stopping: drop the connection
            self._answer(req, step.then if step.then is not None else Reply("late reply"))
        elif isinstance(step, Malformed):
            self._send(step.status, step.body, content_type=step.content_type)
        elif isinstance(step, Drop):
            with contextlib.suppress(OSError):
                self.connection.shutdown(2)
            self.close_connection = True
        else:
            self._send(
                500, {"error": {"message": f"bad scripted step {step!r}", "type": "script_error"}}
            )


# --------------------------------------------------------------------------- entry points


@contextlib.contextmanager
def serve() -> Iterator[ScriptedLLM]:
    """Run a ScriptedLLM server for the duration of the block."""
    script = ScriptedLLM().start()
    try:
        yield script
    finally:
        script.stop()


@pytest.fixture
def llm_server() -> Iterator[ScriptedLLM]:
    """A fresh scripted OpenAI-compatible server on 127.0.0.1 for one test."""
    with serve() as script:
        yield script
