"""`constrained serve`: an OpenAI-compatible HTTP server on FastAPI and uvicorn.

    constrained serve --model DIR [--backend mlx|hf|vllm] [--host 127.0.0.1] [--port 8000]

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (both with
``stream: true`` as server-sent events ending ``data: [DONE]``),
``GET /v1/models``, ``GET /health``. `constrained.openai_api` says which
request fields are read and what they mean.

How a request runs:

1. its shape is checked by pydantic (HTTP 400 in OpenAI's error shape);
2. on a worker thread, off the event loop, its prompt is tokenized and its
   constraint compiled (cached across requests); a bad schema or regex is
   answered 400, naming the keyword and JSON path, before any model time;
3. its rows join the server's one `DecodeLoop`: every live row of every
   request advances in one backend call per step, and the backend's prefix
   trie shares prompt prefills between requests (one system prompt is
   prefilled once). On vLLM (``--backend vllm``) each row is instead one
   request to vLLM's engine, where our logits processor masks it and vLLM
   batches, schedules and caches prefixes (`backends.vllm`);
4. a streamed request sends each text delta as it is accepted; a client that
   disconnects cancels its rows, which leave the loop at the next step.

Each sample draws from its own generator seeded ``[seed, sample index]``, so a
seeded request gets the same samples whether it runs alone or among others
(up to float rounding in differently shaped batches); on vLLM, vLLM draws
them, from a seed derived from the same pair.

This module imports FastAPI; `import constrained` does not import it.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from constrained.decoding import DecodeLoop
from constrained.errors import ConstraintError
from constrained.generate import Generation, GenerationRequest, model_vocabulary
from constrained.openai_api import (
    APIError, ChatCompletionRequest, CompletionRequest, chat_prompt, constraint_of, tool_choice_is_auto, tool_parameters,
)
from constrained.streaming import RequestStream

if TYPE_CHECKING:
    from backends.base import AsyncLM

__all__ = ["Server", "create_app", "listen", "serve", "uvicorn_server"]

_Req = ChatCompletionRequest | CompletionRequest


class Server:
    """The state behind the app: one model, one decode loop, request accounting.

    Args:
        lm: the loaded backend.
        model_id: the name `/v1/models` lists and requests must give.
        default_max_tokens: `max_tokens` of a request that gives none.
        max_states: the state budget of each compiled constraint.

    Example:
        >>> app = create_app(Server(lm, "tiny"))  # doctest: +SKIP
    """

    def __init__(self, lm: AsyncLM, model_id: str, *, default_max_tokens: int = 256,
                 max_states: int | None = None) -> None:
        self.lm = lm
        self.model_id = model_id
        self.default_max_tokens = default_max_tokens
        self.max_states = max_states
        self.vocab = model_vocabulary(lm)
        self.created = int(time.time())
        self.served = 0
        self._loop: DecodeLoop | None = None

    @property
    def decoder(self) -> DecodeLoop:
        """The shared decode loop (made on first use, on the server's event loop; unused on vLLM, whose engine
        runs the rows)."""
        if self._loop is None:
            self._loop = DecodeLoop(self.lm)
        return self._loop

    def health(self) -> dict[str, Any]:
        """What `/health` reports: the model, rows decoding now, steps so far, the backend's counters, and
        the objects startup moved out of the GC's reach (`_freeze_startup`).

        On an engine backend (vLLM) the rows are those in its engine, and the steps are its own (not counted here).
        """
        import gc

        loop = self._loop
        rows = getattr(self.lm, "live_rows", None)
        if rows is None:
            rows = 0 if loop is None else loop.rows
        return {"status": "ok", "model": self.model_id, "backend": self.lm.backend_name,
                "rows": rows, "steps": 0 if loop is None else loop.steps,
                "requests_served": self.served, "stats": dict(self.lm.stats),
                "gc_frozen_objects": gc.get_freeze_count()}

    # ------------------------------------------------------------------ requests

    async def complete(self, req: _Req, http: Request | None = None) -> Any:
        """Answer one completion request (JSON, or an SSE stream); `http` is watched for a disconnect."""
        if req.model != self.model_id:
            raise APIError(404, f"the model {req.model!r} does not exist; this server serves {self.model_id!r}",
                           param="model", code="model_not_found")
        req.refuse_unsupported()
        try:
            plan = await asyncio.to_thread(self.prepare, req)   # compile off the event loop
        except Exception as e:  # noqa: BLE001 - a chat template failing on these messages, say: OpenAI's shape
            raise _api_error(e, None) from None
        if req.stream:
            return StreamingResponse(self._sse(req, plan), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        gens = await _unless_disconnected(plan.results(self.decoder), http)
        self.served += 1
        return JSONResponse(_response(req, plan, gens, self.model_id))

    def prepare(self, req: _Req) -> RequestStream:
        """Tokenize and compile `req` (worker thread); APIError 400 for a bad constraint or setting."""
        constraint, param = constraint_of(req)
        tok = self.lm.tokenizer
        if isinstance(req, ChatCompletionRequest):
            ids = chat_prompt(tok, req)
            if constraint and req.tools:
                self._check_tools(req)
        else:
            ids = list(tok.encode(req.prompt)) if isinstance(req.prompt, str) else list(req.prompt)
        if self.max_states is not None and constraint:
            constraint["options"] = {**constraint["options"], "max_states": self.max_states}
        max_tokens = getattr(req, "max_completion_tokens", None) or req.max_tokens
        if max_tokens is None:              # the server's default, within a fixed context (vLLM's max_model_len)
            limit = getattr(self.lm, "max_model_len", None)
            room = self.default_max_tokens if limit is None else limit - len(ids)
            max_tokens = max(1, min(self.default_max_tokens, room))
        request = GenerationRequest(ids, max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p,
                                    seed=req.seed, n=req.n, stop=req.stop or (), **constraint)
        plan = RequestStream.prepare(self.lm, request)
        if plan.error is not None:
            raise _api_error(plan.error, param)
        return plan

    def _check_tools(self, req: ChatCompletionRequest) -> None:
        """Compile each allowed tool's parameters alone, so an error names its path inside them."""
        from constrained.compile import compile_json_schema

        for param, schema in tool_parameters(req):
            try:
                compile_json_schema(schema, self.vocab)
            except (ConstraintError, ValueError, TypeError) as e:
                raise _api_error(e, param) from None

    async def _sse(self, req: _Req, plan: RequestStream) -> AsyncIterator[str]:
        """The response as server-sent events: a chunk per text delta, a final chunk per choice, [DONE]."""
        out = _Chunks(req, self.model_id, plan.prompt_tokens)
        if out.chat:
            yield out.chunk([out.choice(i, {"role": "assistant", "content": ""}) for i in range(req.n)])
        try:
            async for event in plan.events(self.decoder):
                gen = event.generation
                text = out.text_now(event.index, event.text) if event.text else ""
                if text:
                    yield out.chunk([out.choice(event.index, out.text_delta(text))])
                if gen is not None:
                    yield out.final(event.index, gen)
        except Exception as e:  # noqa: BLE001 - the status line is sent: report in the stream, then end it
            yield _sse_data(_api_error(e, None).body())
        if req.include_usage:
            yield out.chunk([], out.usage())
        self.served += 1
        yield "data: [DONE]\n\n"


def create_app(server: Server) -> FastAPI:
    """The FastAPI app over `server`.

    Example:
        >>> app = create_app(Server(lm, "tiny"))  # doctest: +SKIP
        >>> uvicorn.run(app, port=8000)  # doctest: +SKIP
    """
    app = FastAPI(title="constrained", summary="OpenAI-compatible structured generation")

    @app.exception_handler(APIError)
    async def api_error(_: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(Exception)
    async def internal_error(_: Request, e: Exception) -> JSONResponse:
        return JSONResponse(APIError(500, f"{type(e).__name__}: {e}", code="internal_error").body(), status_code=500)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, e: HTTPException) -> JSONResponse:
        # FastAPI's own errors (a body it cannot parse, an unknown route), in OpenAI's shape
        message, code = str(e.detail), None
        if isinstance(e.__cause__, RecursionError):
            message, code = "the request body is nested too deeply to parse", "invalid_json"
        return JSONResponse(APIError(e.status_code, message, code=code).body(), status_code=e.status_code,
                            headers=getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        if first.get("type") == "json_invalid":
            at = first.get("loc", ())[-1:]
            where = f" at character {at[0]}" if at and isinstance(at[0], int) else ""
            error = APIError(400, f"the request body is not valid JSON ({first.get('msg')}{where})", code="invalid_json")
        else:
            loc = [f"[{x}]" if isinstance(x, int) else f".{x}" for x in first.get("loc", ()) if x != "body"]
            where = "".join(loc).lstrip(".")
            got = f", got {first['input']!r}" if "input" in first and not isinstance(first["input"], dict) else ""
            error = APIError(400, f"{first.get('msg', 'invalid request')} at `{where or 'body'}`{got}",
                             param=where or None, code="invalid_value")
        return JSONResponse(error.body(), status_code=400)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, http: Request) -> Any:
        return await server.complete(req, http)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, http: Request) -> Any:
        return await server.complete(req, http)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(server)]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        if model_id != server.model_id:
            raise APIError(404, f"the model {model_id!r} does not exist", param="model", code="model_not_found")
        return _model_card(server)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return server.health()

    return app


async def _unless_disconnected(work: Any, http: Request | None) -> Any:
    """Await `work`; if the client hangs up first, cancel it (its rows leave the loop) and raise."""
    task = asyncio.ensure_future(work)
    if http is None:
        return await task

    async def hung_up() -> None:
        # the body was read: the next message the server gets for this request is its disconnect
        while (await http.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(hung_up())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, watch):
            if not t.done():
                t.cancel()
    if not task.done() or task.cancelled():
        raise APIError(499, "the client closed the connection", code="client_closed")
    return task.result()


# ---------------------------------------------------------------------------- responses


def _model_card(server: Server) -> dict[str, Any]:
    return {"id": server.model_id, "object": "model", "created": server.created, "owned_by": "constrained"}


def _api_error(e: Exception, param: str | None) -> APIError:
    """OpenAI's error for an exception raised while preparing or running a request."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, ConstraintError):
        code = {"UnsupportedSchemaError": "unsupported_schema", "InvalidSchemaError": "invalid_schema",
                "RegexSyntaxError": "invalid_regex", "UnsupportedRegexError": "unsupported_regex",
                "EmptyConstraintError": "empty_constraint", "StateBudgetError": "state_budget_exceeded",
                "IncompatibleVocabularyError": "incompatible_vocabulary"}.get(type(e).__name__, "invalid_constraint")
        return APIError(400, f"{type(e).__name__}: {e}", param=param, code=code)
    if isinstance(e, (ValueError, TypeError)):
        where = "max_tokens" if "max_tokens" in str(e) else param if "schema" in str(e) else None
        return APIError(400, str(e), param=where, code="invalid_value")
    return APIError(500, f"{type(e).__name__}: {e}", code="internal_error")


def _finish_reason(gen: Generation, tools: bool) -> str:
    """OpenAI's finish_reason; a sample that failed is an error, not a finish."""
    if gen.status == "error":
        raise APIError(500, f"generation failed: {gen.error}", code="generation_error")
    if gen.status == "max_tokens":
        return "length"                           # cut off: the text is not a complete document
    if gen.status == "stop":
        return "stop"                             # cut at a stop sequence before the document was complete
    # a complete call parses to a dict; with tool_choice "auto" a text reply stays text
    return "tool_calls" if tools and isinstance(gen.value, dict) else "stop"


def _tool_calls(gen: Generation) -> list[dict[str, Any]]:
    value = gen.value
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": value["name"], "arguments": json.dumps(value["arguments"], ensure_ascii=False)}}]


def _uses_tools(req: _Req) -> bool:
    return isinstance(req, ChatCompletionRequest) and bool(req.tools) and req.tool_choice != "none"


def _usage(prompt_tokens: int, gens: list[Generation]) -> dict[str, int]:
    completion = sum(len(g.token_ids) for g in gens)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}


def _response(req: _Req, plan: RequestStream, gens: list[Generation], model_id: str) -> dict[str, Any]:
    """A non-streamed chat.completion or text_completion object."""
    tools = _uses_tools(req)
    choices = []
    for i, gen in enumerate(gens):
        reason = _finish_reason(gen, tools)
        if isinstance(req, CompletionRequest):
            choices.append({"index": i, "text": gen.text, "finish_reason": reason, "stop_reason": gen.stop_sequence,
                            "logprobs": None})
            continue
        message: dict[str, Any] = {"role": "assistant", "content": gen.text}
        if reason == "tool_calls":
            message = {"role": "assistant", "content": None, "tool_calls": _tool_calls(gen)}
        choices.append({"index": i, "message": message, "finish_reason": reason, "stop_reason": gen.stop_sequence,
                        "logprobs": None})
    chat = isinstance(req, ChatCompletionRequest)
    return {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": model_id, "choices": choices, "usage": _usage(plan.prompt_tokens, gens)}


class _Chunks:
    """Builds the chunks of one streamed response (chat.completion.chunk or text_completion)."""

    def __init__(self, req: _Req, model_id: str, prompt_tokens: int) -> None:
        self.req = req
        self.chat = isinstance(req, ChatCompletionRequest)
        self.tools = _uses_tools(req)
        self.head = {"id": f"{'chatcmpl' if self.chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
                     "object": "chat.completion.chunk" if self.chat else "text_completion",
                     "created": int(time.time()), "model": model_id}
        self.prompt_tokens = prompt_tokens
        self.done: list[Generation] = []
        # Per choice, text held back: a tool call's (sent as tool_calls at the end, or as content when
        # cut off); with tool_choice "auto", until its first character past whitespace says call ("{") or
        # text, from when on it streams (`text_choices`).
        self.held: dict[int, str] = {}
        self.text_choices: set[int] = set()
        self.auto = self.chat and tool_choice_is_auto(req)

    def text_now(self, index: int, text: str) -> str:
        """What of choice `index`'s new `text` goes out now (the rest is held for its final chunk)."""
        if not self.tools or index in self.text_choices:
            return text
        held = self.held.pop(index, "") + text
        if self.auto and held.lstrip(" \t\n\r")[:1] not in ("", "{"):
            self.text_choices.add(index)          # a text reply: it streams from now on
            return held
        self.held[index] = held
        return ""

    def chunk(self, choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> str:
        return _sse_data({**self.head, "choices": choices, "usage": usage})

    def text_delta(self, text: str) -> dict[str, Any]:
        return {"content": text} if self.chat else {"text": text}

    def choice(self, index: int, delta: dict[str, Any], reason: str | None = None,
               stop_reason: str | None = None) -> dict[str, Any]:
        out = {"index": index, "delta": delta} if self.chat else {"index": index, "text": delta.get("text", "")}
        out.update(finish_reason=reason, logprobs=None)
        if reason is not None:
            out["stop_reason"] = stop_reason
        return out

    def usage(self) -> dict[str, int]:
        return _usage(self.prompt_tokens, self.done)

    def final(self, index: int, gen: Generation) -> str:
        """The last chunk of one choice: text still held back, tool calls, finish_reason (and usage, last)."""
        self.done.append(gen)
        try:
            reason = _finish_reason(gen, self.tools)
        except APIError as e:
            return _sse_data(e.body())
        delta: dict[str, Any] = {}
        if reason == "tool_calls":
            delta = {"tool_calls": [{"index": 0, **call} for call in _tool_calls(gen)]}
        elif self.tools and index not in self.text_choices:   # held back: a cut-off call, or only whitespace
            delta = self.text_delta(gen.text)
        last = len(self.done) == self.req.n and not self.req.include_usage
        return self.chunk([self.choice(index, delta, reason, gen.stop_sequence)], self.usage() if last else None)


def _sse_data(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


def serve(lm: AsyncLM, model_id: str, *, host: str = "127.0.0.1", port: int = 8000, default_max_tokens: int = 256,
          max_states: int | None = None, log_level: str = "warning") -> int:
    """Warm the model up, then serve it until interrupted (SIGINT / SIGTERM); returns the exit status.

    The socket is bound here, so ``port=0`` picks a free port; the line
    ``constrained serve: listening on http://HOST:PORT`` on stderr gives it.
    The backend is closed on the way out (a vLLM engine is shut down).

    Example:
        >>> serve(lm, "tiny", port=0)  # doctest: +SKIP
    """
    import signal
    import sys
    import threading

    if threading.current_thread() is threading.main_thread():
        # uvicorn, once shut down, raises again the SIGTERM that stopped it: as an exception here, so the
        # backend is closed below (a vLLM engine's own process would otherwise outlive the server)
        signal.signal(signal.SIGTERM, _terminated)
    try:
        _warm_up(lm)
        _freeze_startup()
        server = Server(lm, model_id, default_max_tokens=default_max_tokens, max_states=max_states)
        sock = listen(host, port)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        print(f"constrained serve: {model_id!r} ({lm.backend_name}) listening on http://{shown}:{bound}",
              file=sys.stderr, flush=True)
        uvicorn_server(server, log_level).run(sockets=[sock])
    finally:
        lm.close()
    return 0


def _terminated(sig: int, frame: Any) -> None:
    raise SystemExit(128 + sig)


def listen(host: str, port: int) -> Any:
    """A TCP socket bound to (`host`, `port`) and listening (port 0: a free one).

    Example:
        >>> sock = listen("127.0.0.1", 0); sock.getsockname()[1] > 0
        True
        >>> sock.close()
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP: asyncio sets TCP_NODELAY only on such sockets (and accepted ones inherit it);
    # with Nagle on, each streamed chunk waited for the client's delayed ACK, about 40 ms
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)          # from here connections wait in the backlog until uvicorn accepts them
    return sock


def uvicorn_server(server: Server, log_level: str = "warning") -> Any:
    """The `uvicorn.Server` of `server`'s app; ``.run(sockets=[listen(...)])`` serves until it is told to exit.

    Example:
        >>> uvicorn_server(Server(lm, "tiny")).run(sockets=[listen("127.0.0.1", 0)])  # doctest: +SKIP
    """
    import uvicorn

    config = uvicorn.Config(create_app(server), log_level=log_level, access_log=False, timeout_graceful_shutdown=5)
    return uvicorn.Server(config)


def _freeze_startup() -> None:
    """Move what startup built (modules, the model's Python objects, tokenizer and vocabulary tables)
    out of the cyclic GC's reach (`gc.freeze`), as long-running servers do: a full collection then
    walks only what requests created. With the HF backend's tiny model loaded, a full collection
    walked 445k objects in 215-235 ms here (a pause inside whichever request's step triggered it);
    after the freeze, 0 ms until requests build objects of their own."""
    import gc

    gc.collect()
    gc.freeze()


def _warm_up(lm: AsyncLM) -> None:
    """One tiny constrained generation, so the first request does not pay for loading kernels and tables."""
    from constrained.generate import generate

    generate(lm, "Hi", regex="[a-z]{1,2}", max_tokens=4, seed=0)
