"""The `constrained` command line.

    constrained generate --schema person.json --prompt "A person:" -n 3
    constrained generate --regex "[0-9]{3}-[0-9]{4}" --prompt "Phone:"
    constrained generate --input prompts.jsonl --output results.jsonl
    constrained bench masks

Bad input (a missing file, invalid JSON, an unsupported schema keyword, a bad
regex) prints one line on stderr and exits with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

__all__ = ["main"]

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user: reported on one line, exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.run(args)
    except UsageError as e:
        print(f"constrained: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="constrained", description="Schema- and regex-constrained generation.")
    sub = p.add_subparsers(dest="command")

    g = sub.add_parser("generate", help="generate text that matches a JSON schema or a regex")
    g.add_argument("--model", help="model directory or name (default: a tiny local model with random weights)")
    g.add_argument("--backend", choices=["mlx", "hf"], default=None, help="default: mlx when installed, else hf")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--schema", help="JSON schema: a file path, or inline JSON starting with '{'")
    src.add_argument("--regex", help="regular expression the whole output must match")
    g.add_argument("--prompt", help="prompt text")
    g.add_argument("--chat", action="store_true", help="apply the tokenizer's chat template to the prompt")
    g.add_argument("--input", help="JSONL file of requests: {prompt, schema?|regex?, n?, max_tokens?}")
    g.add_argument("--output", help="JSONL file for the results of --input (default: stdout)")
    g.add_argument("-n", type=int, default=1, help="samples per prompt")
    g.add_argument("--max-tokens", type=int, default=256)
    g.add_argument("--temperature", type=float, default=1.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--strict", action="store_true", help="treat missing additionalProperties as false")
    g.set_defaults(run=_run_generate)

    b = sub.add_parser("bench", help="run the benchmark suites (see bench/README)")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(run=_run_bench)
    return p


# ---------------------------------------------------------------------------
# generate


def _run_generate(args: argparse.Namespace) -> int:
    requests = _requests(args)
    model, note = _load_model(args)
    if note:
        print(note, file=sys.stderr)
    from constrained.generate import GenerationRequest, generate_batch

    batch = [GenerationRequest(**r) for r in requests]
    started = time.perf_counter()
    results = generate_batch(model, batch, progress=args.input is not None)
    elapsed = time.perf_counter() - started
    _write_results(args, requests, results)
    _print_summary(results, elapsed, model)
    return 0


def _requests(args: argparse.Namespace) -> list[dict[str, Any]]:
    common = dict(
        max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
        seed=args.seed, n=args.n, chat=args.chat, strict=args.strict,
    )
    _check_positive("-n", args.n)
    _check_positive("--max-tokens", args.max_tokens)
    if args.input:
        if args.prompt or args.schema or args.regex:
            pass  # per-line values win; these act as defaults
        return [_request_from_line(line, i, args, common) for i, line in _read_lines(args.input)]
    if args.prompt is None:
        raise UsageError("give --prompt TEXT (or --input FILE.jsonl)")
    constraint = _constraint(args.schema, args.regex, "--schema")
    return [dict(prompt=args.prompt, **constraint, **common)]


def _check_positive(flag: str, value: int) -> None:
    if value < 1:
        raise UsageError(f"{flag} must be a positive integer, got {value}")


def _constraint(schema: Any, regex: str | None, where: str) -> dict[str, Any]:
    from constrained.errors import ConstraintError

    if regex is not None:
        from grammars.regex import regex_grammar

        try:
            regex_grammar(regex)
        except ConstraintError as e:
            raise UsageError(str(e)) from None
        return {"regex": regex}
    if schema is None:
        raise UsageError("give a constraint: --schema FILE.json or --regex PATTERN")
    if isinstance(schema, str):
        schema = _load_schema_arg(schema, where)
    from grammars.json_schema import json_schema_grammar

    try:
        json_schema_grammar(schema)
    except ConstraintError as e:
        raise UsageError(f"{where}: {e}") from None
    return {"schema": schema}


def _load_schema_arg(value: str, where: str) -> Any:
    text, origin = value, "inline schema"
    if not value.lstrip().startswith("{"):
        path = Path(value)
        if not path.is_file():
            raise UsageError(f"{where}: no such file: {value}")
        text, origin = path.read_text(encoding="utf-8"), str(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{where}: {origin} is not valid JSON: {e}") from None


def _read_lines(path: str) -> list[tuple[int, str]]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--input: no such file: {path}")
    lines = [(i, line) for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if line.strip()]
    if not lines:
        raise UsageError(f"--input: {path} has no requests")
    return lines


def _request_from_line(line: str, lineno: int, args: argparse.Namespace, common: dict) -> dict[str, Any]:
    where = f"{args.input}:{lineno}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise UsageError(f"{where}: not valid JSON: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("prompt", args.prompt), str):
        raise UsageError(f"{where}: each line must be an object with a string \"prompt\"")
    schema = obj.get("schema", None if "regex" in obj else args.schema)
    regex = obj.get("regex", None if "schema" in obj else args.regex)
    if schema is not None and regex is not None:
        raise UsageError(f"{where}: give either \"schema\" or \"regex\", not both")
    request = dict(common)
    for key in ("n", "max_tokens", "temperature", "top_p", "seed"):
        if key in obj:
            request[key] = obj[key]
    request["prompt"] = obj.get("prompt", args.prompt)
    request.update(_constraint(schema, regex, where))
    return request


def _load_model(args: argparse.Namespace) -> tuple[Any, str]:
    from constrained.errors import BackendUnavailableError

    backend = args.backend or _default_backend()
    note = ""
    name = args.model
    try:
        if name is None:
            from backends.tiny import tiny_model_dir

            name = str(tiny_model_dir("llama", "llama-bpe"))
            note = (
                f"note: no --model given; using the project's tiny local model at {name}. "
                "Its weights are random: the output is valid for the constraint but its content is meaningless."
            )
        elif not Path(name).exists():
            raise UsageError(f"--model: no such model directory: {name} (downloads from a model hub are not attempted)")
        from backends.base import load_model_by_name

        return load_model_by_name(name, backend=backend), note
    except BackendUnavailableError as e:
        raise UsageError(str(e)) from None


def _default_backend() -> str:
    import importlib.util

    return "mlx" if importlib.util.find_spec("mlx_lm") and importlib.util.find_spec("mlx") else "hf"


def _write_results(args: argparse.Namespace, requests: list[dict], results: list[list[Any]]) -> None:
    if args.input:
        out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
        try:
            for req, samples in zip(requests, results):
                row = {"prompt": req["prompt"], "samples": [s.to_dict() for s in samples]}
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
        finally:
            if out is not sys.stdout:
                out.close()
        return
    for sample in results[0]:
        print(sample.text if sample.status == "complete" else f"[{sample.status}] {sample.text}")


def _print_summary(results: list[list[Any]], elapsed: float, model: Any) -> None:
    samples = [s for row in results for s in row]
    tokens = sum(len(s.token_ids) for s in samples)
    complete = sum(s.status == "complete" for s in samples)
    compile_ms = sum(s.compile_ms for row in results for s in row[:1])
    stats = getattr(model, "stats", None)
    hits = getattr(stats, "cache_hits", None) if stats is not None else None
    hit_text = f", cache hits {hits}" if hits is not None else ""
    print(
        f"{len(samples)} samples ({complete} complete), {tokens} tokens in {elapsed:.2f} s "
        f"({tokens / max(elapsed, 1e-9):.1f} tok/s), compile {compile_ms:.1f} ms{hit_text}",
        file=sys.stderr,
    )


# ---------------------------------------------------------------------------
# bench


def _run_bench(args: argparse.Namespace) -> int:
    try:
        from bench.__main__ import main as bench_main
    except ImportError:
        raise UsageError("the benchmarks run from a source checkout: `python -m bench` in the repository root") from None
    return bench_main(args.rest)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
