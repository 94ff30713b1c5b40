"""Suite `serve`: `constrained serve` under load, constrained vs unconstrained, and mlx_lm.server.

One run starts `constrained serve` (and, unless ``--no-peers``, `mlx_lm.server`)
on the same model, then at each concurrency (default 1, 8, 32) sends
streamed ``/v1/completions`` requests from that many concurrent clients:

- ``unconstrained``: plain text up to ``max_tokens``;
- ``constrained``: the same requests with ``response_format`` = the
  tool-call schema of `bench.decode.SCHEMA` (each output checked with
  `jsonschema`);
- ``mlx_lm.server``: the unconstrained requests, on mlx-lm's own server.

Every prompt starts with one shared system text (about 200 tokens) and ends
with its own request number, so the prefix trie can reuse the shared part
across requests (and no request repeats another's whole prompt, which the
trie would answer from its logprob cache). Per case: requests/s, generated
tokens/s, time to first token (first streamed text) p50 / p99, and, for our
server, how many prompt tokens came from the trie's KV instead of the model
(``/health`` counters before and after).

The model is the tiny random llama (llama-spm vocabulary, 2 layers) unless
``--model`` is given: a model call costs about as much as a mask there, so
the constrained/unconstrained ratio shows the constraint's overhead at its
most visible. Client and servers share the machine.

Example:
    >>> _percentile([1.0, 2.0, 3.0, 4.0], 50)
    2.5
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, Callable

__all__ = ["run_serve"]

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = ("You are a careful assistant that plans tool calls. Read the request, pick the one tool that answers "
          "it, and fill in every argument. Cities are written as they are spelled locally; units follow the "
          "country's custom; days count from today. ") * 3


def run_serve(args: Any, emit: Callable[[dict], None], say: Callable[[str], None]) -> int:
    from bench.__main__ import machine
    from bench.decode import SCHEMA

    model_dir = args.model or str(_tiny_dir())
    servers = [("constrained", _start_ours(args))]
    try:
        if args.peers and _has_mlx_lm():
            servers.append(("mlx_lm.server", _start_mlx_lm(model_dir)))
        elif args.peers:
            say("mlx_lm is not installed: no mlx_lm.server comparison")
        emit({"suite": "serve", "event": "setup", "model": model_dir, "backend": args.backend,
              "concurrency": args.concurrency, "max_tokens": args.max_tokens, "machine": machine()})
        records = asyncio.run(_run_cases(args, servers, SCHEMA, emit))
    finally:
        for _, srv in servers:
            srv.stop()
    say(_summary(records, args, model_dir, machine()))
    return 0


# ---------------------------------------------------------------------------- servers


class _Process:
    def __init__(self, argv: list[str], url: str, ready: Callable[[], bool], timeout: float = 300) -> None:
        # stderr goes to a file, not a pipe nobody reads (a full pipe would stall a chatty server)
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self.log, text=True)
        self.url = url
        deadline = time.monotonic() + timeout
        try:
            while not ready():
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.log.seek(0)
                    raise RuntimeError(f"{argv[:4]} did not start: {self.log.read()[-2000:]}")
                time.sleep(0.2)
        except BaseException:                          # never leave a server behind
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _start_ours(args: Any) -> _Process:
    port = _free_port()
    argv = [sys.executable, "-m", "constrained", "serve", "--port", str(port), "--backend", args.backend,
            "--served-model-name", "bench"]
    if args.model:
        argv += ["--model", args.model]
    return _Process(argv, f"http://127.0.0.1:{port}", lambda: _get(f"http://127.0.0.1:{port}/health"))


def _start_mlx_lm(model_dir: str) -> _Process:
    port = _free_port()
    argv = [sys.executable, "-m", "mlx_lm.server", "--model", model_dir, "--port", str(port), "--log-level", "WARNING"]
    return _Process(argv, f"http://127.0.0.1:{port}", lambda: _get(f"http://127.0.0.1:{port}/health"))


def _get(url: str) -> dict[str, Any] | None:
    import httpx

    try:
        r = httpx.get(url, timeout=2)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):               # not up yet
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tiny_dir() -> Path:
    from backends.tiny import tiny_model_dir
    from constrained.cli_models import TINY_ARCH, TINY_VOCAB

    return tiny_model_dir(TINY_ARCH, TINY_VOCAB)


def _has_mlx_lm() -> bool:
    import importlib.util

    return importlib.util.find_spec("mlx_lm") is not None


# ---------------------------------------------------------------------------- load


async def _run_cases(args: Any, servers: list[tuple[str, _Process]], schema: dict[str, Any],
                     emit: Callable[[dict], None]) -> list[dict[str, Any]]:
    import httpx

    modes = [("constrained", "unconstrained"), ("constrained", "constrained")]
    modes += [(name, "unconstrained") for name, _ in servers if name != "constrained"]
    urls = dict((name, srv.url) for name, srv in servers)
    records = []
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    # Without TCP_NODELAY the client's body write waits on Nagle for the server's delayed ACK of the
    # headers: about 40 ms added to every request on a reused connection, which would swamp TTFT.
    transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    async with httpx.AsyncClient(timeout=300, transport=transport) as http:
        for server, mode in modes:                            # warm up: compile, first prefill
            await _request(http, urls[server], server, mode, schema, "warm-up", args.max_tokens)
        for c in args.concurrency:
            for server, mode in modes:
                rec = await _case(http, urls[server], server, mode, schema, c, args)
                emit(rec)
                records.append(rec)
    return records


async def _case(http: Any, url: str, server: str, mode: str, schema: dict[str, Any], c: int, args: Any) -> dict:
    n = max(args.requests_per_client * c, args.min_requests)
    todo = iter(range(n))
    before = _get(f"{url}/health") if server == "constrained" else None
    results: list[dict[str, Any]] = []

    async def client() -> None:
        for i in todo:                                        # clients share one iterator: n requests in all
            results.append(await _request(http, url, server, mode, schema, f"c{c}-{i}", args.max_tokens))

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(c)))
    wall = time.perf_counter() - started
    tokens = sum(r["tokens"] for r in results)
    ttft = [r["ttft"] for r in results if r["ttft"] is not None]
    rec = {"suite": "serve", "server": server, "mode": mode, "concurrency": c, "requests": n,
           "ok": sum(r["ok"] for r in results), "valid": sum(r["valid"] for r in results), "tokens": tokens,
           "wall_s": round(wall, 3), "req_per_s": round(n / wall, 2), "tok_per_s": round(tokens / wall, 1),
           "ttft_p50_ms": round(_percentile(ttft, 50) * 1000, 1), "ttft_p99_ms": round(_percentile(ttft, 99) * 1000, 1)}
    if before is not None:
        # every generated token but each request's last runs through the model once; the rest of what
        # the model ran is prompt: the tokens the trie did not already hold
        after = _get(f"{url}/health")
        model_tokens = after["stats"].get("model_tokens", 0) - before["stats"].get("model_tokens", 0)
        prompt = sum(r["prompt_tokens"] for r in results)
        rec.update(prompt_tokens=prompt, model_tokens=model_tokens,
                   prompt_tokens_run=max(0, model_tokens - (tokens - n)))
    return rec


async def _request(http: Any, url: str, server: str, mode: str, schema: dict[str, Any], tag: str,
                   max_tokens: int) -> dict[str, Any]:
    """One streamed completion: its time to first text, generated tokens, and (constrained) validity."""
    body: dict[str, Any] = {"model": "bench" if server == "constrained" else "default_model",
                            "prompt": f"{SYSTEM}\nRequest {tag} ({mode}): the weather in Lyon. Tool call:",
                            "max_tokens": max_tokens, "temperature": 1.0, "stream": True,
                            "seed": zlib.crc32(tag.encode()) % 100_000, "stream_options": {"include_usage": True}}
    if mode == "constrained":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "call", "schema": schema}}
    import httpx

    started = time.perf_counter()
    ttft, text, chunks, usage, ok = None, [], 0, None, False
    try:
        async with http.stream("POST", f"{url}/v1/completions", json=body) as resp:
            async for line in resp.aiter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                data = json.loads(line[5:])
                usage = data.get("usage") or usage
                for choice in data.get("choices") or ():
                    if choice.get("text"):
                        ttft = ttft if ttft is not None else time.perf_counter() - started
                        text.append(choice["text"])
                        chunks += 1
        ok = resp.status_code == 200
    except httpx.HTTPError:                          # a dropped connection: counted as a failed request
        pass
    tokens = usage["completion_tokens"] if usage else chunks
    return {"ok": ok, "ttft": ttft, "tokens": tokens, "prompt_tokens": usage["prompt_tokens"] if usage else 0,
            "valid": ok and _valid("".join(text), schema, mode)}


def _valid(text: str, schema: dict[str, Any], mode: str) -> bool:
    if mode != "constrained":
        return True
    try:
        import jsonschema

        jsonschema.validate(json.loads(text), schema)
        return True
    except ImportError:
        return True
    except Exception:  # noqa: BLE001 - invalid JSON or a schema violation: counted, not raised
        return False


def _percentile(xs: list[float], q: float) -> float:
    """Linear-interpolated percentile (NaN for no data)."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# ---------------------------------------------------------------------------- report


def _summary(records: list[dict[str, Any]], args: Any, model_dir: str, machine: str) -> str:
    lines = [f"\n## serve: {Path(model_dir).name} ({args.backend}), max_tokens {args.max_tokens}, streamed "
             f"/v1/completions, {machine}\n",
             "| server | mode | conc. | requests (ok) | valid | req/s | tok/s | TTFT p50 ms | TTFT p99 ms "
             "| prompt tokens prefilled |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in records:
        run = ""
        if r.get("prompt_tokens"):
            run = f"{r['prompt_tokens_run']} of {r['prompt_tokens']} ({r['prompt_tokens_run'] / r['prompt_tokens']:.0%})"
        valid = f"{r['valid']}/{r['requests']}" if r["mode"] == "constrained" else "-"
        lines.append(f"| {r['server']} | {r['mode']} | {r['concurrency']} | {r['requests']} ({r['ok']}) | {valid} | "
                     f"{r['req_per_s']} | {r['tok_per_s']} | {r['ttft_p50_ms']} | {r['ttft_p99_ms']} | {run} |")
    lines.append("\nRatios in this run (tokens/s):\n")
    by = {(r["server"], r["mode"], r["concurrency"]): r for r in records}
    for c in args.concurrency:
        base = by.get(("constrained", "unconstrained", c))
        con = by.get(("constrained", "constrained", c))
        peer = by.get(("mlx_lm.server", "unconstrained", c))
        parts = []
        if base and con and base["tok_per_s"]:
            parts.append(f"constrained / unconstrained {con['tok_per_s'] / base['tok_per_s']:.2f}x")
        if base and peer and peer["tok_per_s"]:
            parts.append(f"our unconstrained / mlx_lm.server {base['tok_per_s'] / peer['tok_per_s']:.2f}x")
        if parts:
            lines.append(f"- concurrency {c}: " + "; ".join(parts))
    return "\n".join(lines)

