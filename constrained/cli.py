"""The `constrained` command line.

    constrained generate --schema person.json --prompt "A person:" -n 3
    constrained generate --regex "[0-9]{3}-[0-9]{4}" --prompt "Phone:"
    constrained generate --input prompts.jsonl --output results.jsonl

Single mode prints each sample's text on stdout exactly as the model wrote
it (``--json``: one JSON record per sample instead). Samples that did not
complete are printed too, and their status is noted on stderr; the exit
status is then 1. A one-line timing summary goes to stderr.

Without ``--model``, a tiny local model is used (built once by
`backends.tiny`, with a real llama.cpp tokenizer): its weights are random,
so the output is valid for the constraint but its content is meaningless.

Bad input (a missing file, invalid JSON, an unsupported schema keyword, a bad
regex, a bad number) prints one line on stderr and exits with status 2, never
a traceback. In batch mode (``--input``) a bad line instead gets an error row
(``{"line", "prompt", "samples": [], "error"}``), the other lines are
generated, and the exit status is 1; ``--fail-fast`` stops at the first bad
line with status 2, before the model is loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NoReturn, Sequence

from constrained.cli_io import (
    BadLine, BatchOutput, Interrupted, UsageError, check_text, prompt_of, read_lines, read_utf8, say,
    signals_interrupt,
)
from constrained.cli_models import check_model_dir, load_model
from grammars.errors import SchemaNote

__all__ = ["main"]

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(message)


def run() -> NoReturn:
    """The `constrained` console command: `main()`, then exit without native teardown.

    Once the output is flushed the process leaves with `os._exit`: MLX's and
    torch's thread pools occasionally abort in their static destructors at
    interpreter exit ("terminate called without an active exception"; about
    1 run in 10 on a loaded 2-core machine), which turned a finished run's
    exit status into 134.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:                # None: the descriptor was closed at startup
                stream.flush()
        except (OSError, ValueError):             # a closed pipe: nothing more to deliver
            pass
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Example:
        >>> main(["generate", "--regex", "(yes|no)", "--prompt", "Ok?"])  # doctest: +SKIP
        yes
        0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        return _bench(argv[1:])
    try:
        args = _parser().parse_args(argv)
        if args.command is None:
            _parser().print_help()
            return EXIT_USAGE
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SchemaNote)   # printed once, as notes, when the input is checked
            return args.run(args)
    except UsageError as e:
        say(f"constrained: error: {e}")
        return EXIT_USAGE
    except Interrupted as e:
        return e.code
    except BrokenPipeError:
        say("constrained: error: stdout was closed before all the output was written; use --output with --input")
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a failure past input checking (model load, backend): still one line
        print(f"constrained: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def _bench(argv: list[str]) -> int:
    """`constrained bench SUITE ...`: the benchmark suites of a source checkout (`python -m bench`)."""
    try:
        from bench.__main__ import main as bench_main
    except ImportError:
        print("constrained: error: the benchmarks live in the repository's bench/ directory; "
              "run `python -m bench` from a checkout of constrained", file=sys.stderr)
        return EXIT_USAGE
    try:
        return bench_main(argv)
    except SystemExit as e:                     # argparse's own usage errors (already printed)
        return e.code if isinstance(e.code, int) else EXIT_USAGE


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from grammars import native

    try:
        text = version("constrained")
    except PackageNotFoundError:               # a source tree that was not installed
        text = "(not installed)"
    if not native.enabled():
        return f"{text} (schema compiler: Python source, {native.ENV}=0)"
    built = native.compiled_modules()
    return f"{text} (schema compiler: {sum(built.values())}/{len(built)} modules compiled)"


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="constrained", description="Schema- and regex-constrained generation.")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    sub.add_parser("bench", help="benchmark suites: masks, decode, cache, serve (see bench/README.md)")
    g = sub.add_parser("generate", help="generate text that matches a JSON schema or a regex")
    from constrained.cli_serve import add_model_arguments, add_serve_parser

    add_model_arguments(g)
    src = g.add_mutually_exclusive_group()
    src.add_argument("--schema", help="JSON schema: a file path, or inline JSON starting with '{'")
    src.add_argument("--regex", help="regular expression the whole output must match")
    prompt = g.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", help="prompt text (taken literally, also when it starts with @)")
    prompt.add_argument("--prompt-file", metavar="PATH", help="read the prompt from this UTF-8 text file")
    g.add_argument("--chat", action="store_true", help="apply the tokenizer's chat template to the prompt")
    g.add_argument("--input", help="JSONL file of requests, one object per line with the keys prompt (required), "
                                   "schema or regex, n, max_tokens, temperature, top_p, seed, chat; a bad line "
                                   "gets an error row and the others go on")
    g.add_argument("--fail-fast", action="store_true",
                   help="with --input: stop (exit 2) at the first bad line, before loading the model")
    g.add_argument("--output", help="JSONL file for the results of --input (default: stdout)")
    g.add_argument("-n", type=int, default=1, help="samples per prompt (default: %(default)s)")
    g.add_argument("--max-tokens", type=int, default=256,
                   help="tokens per sample at most; a sample cut there has status 'max_tokens' (default: %(default)s)")
    g.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature; 0 is greedy (default: %(default)s)")
    g.add_argument("--top-p", type=float, default=1.0,
                   help="nucleus sampling: keep the smallest set of allowed tokens with this much probability "
                        "(default: %(default)s, all)")
    g.add_argument("--budget-aware", action=argparse.BooleanOptionalAction, default=True,
                   help="near --max-tokens, allow only tokens that keep a complete output within it, so "
                        "constrained samples end complete (default: on)")
    g.add_argument("--seed", type=int, default=None,
                   help="random seed (default: none, a fresh one per run)")
    g.add_argument("--strict", action="store_true", help="schemas: missing additionalProperties means false")
    g.add_argument("--any-order", action="store_true",
                   help="schemas: accept object members in any order (default: the order `properties` declares)")
    g.add_argument("--whitespace", choices=["default", "compact"], default="default",
                   help="schemas: whitespace allowed between JSON tokens (always bounded)")
    g.add_argument("--json", action="store_true",
                   help="single mode: one JSON record per sample (text, value, status, error, token_ids, "
                        "compile_ms, sample) instead of the raw text")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="also list ignored vendor keywords (x-...) of the schemas")
    g.add_argument("--ascii", action="store_true",
                   help="regexes: \\d, \\w, \\s and \\b match ASCII only (re.ASCII); by default they follow "
                        "Python's Unicode semantics, so \\d also matches digits such as '١' or '３'")
    from constrained.compile import MAX_STATES

    g.add_argument("--max-states", type=_positive_int, default=MAX_STATES, metavar="N",
                   help="budget of automaton states per constraint, built lazily as generation reaches them "
                        "(default: %(default)s); past it the sample ends with status 'error'")
    g.set_defaults(run=_run_generate)
    add_serve_parser(sub)
    return p


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


# ---------------------------------------------------------------------------- generate


def _run_generate(args: argparse.Namespace) -> int:
    items = _requests(args)  # every input check happens before the (slow) model load
    bad = [item for _, item in items if isinstance(item, BadLine)]
    for line in bad:
        say(f"constrained: error: {line.error}")
    requests = [item for _, item in items if not isinstance(item, BadLine)]
    if args.input is None:
        return _run_single(args, requests)
    with BatchOutput(args.output, items) as out:   # the output is checked before any model load
        if not requests:                           # nothing to generate: no model to load
            return 1
        good = [k for k, (_, item) in enumerate(items) if not isinstance(item, BadLine)]
        with signals_interrupt():
            results, summary = _generate(args, requests, progress=True,
                                         on_result=lambda i, samples: out.write(good[i], samples))
        out.finish()
    summary()
    return 1 if bad or any(s.status != "complete" for row in results for s in row) else 0


def _run_single(args: argparse.Namespace, requests: list[Any]) -> int:
    if sys.stdout is None or sys.stdout.closed:
        raise UsageError("stdout is closed: the samples would be lost; redirect it, or use --input with --output")
    results, summary = _generate(args, requests)
    status = _print_samples(results[0], args.json)
    summary()
    return status


def _generate(args: argparse.Namespace, requests: list[Any], **options: Any) -> tuple[list[list[Any]], Any]:
    """Check and load the model, run `requests`; returns the results and a callable printing the summary."""
    if args.vllm_args is not None and args.backend != "vllm":
        raise UsageError("--vllm-args goes with --backend vllm")
    check_model_dir(args, chat=any(r.chat for r in requests))
    started = time.perf_counter()
    if args.backend == "vllm":
        from constrained.cli_serve import load_vllm

        # vLLM logs to stdout by default, where the samples go (its engine process inherits this)
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        model, note = load_vllm(args)
    else:
        model, note = load_model(args)
    load_s = time.perf_counter() - started
    if note:
        say(note)
    from constrained.generate import generate_batch

    before = dict(model.stats)
    started = time.perf_counter()
    try:
        results = generate_batch(model, requests, **options)
    finally:
        if args.backend == "vllm":
            model.close()                  # the engine's own processes end with this run
    elapsed = time.perf_counter() - started
    return results, lambda: _print_summary(results, elapsed, load_s, model, before)


def _requests(args: argparse.Namespace) -> list[tuple[int | None, Any]]:
    """(input line number, request or `BadLine`) per request; single mode: one, numbered None."""
    from constrained.generate import GenerationRequest

    common = dict(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                  seed=args.seed, n=args.n, chat=args.chat, budget_aware=args.budget_aware)
    if args.input:
        if args.prompt is not None or args.prompt_file is not None:
            raise UsageError("give --prompt/--prompt-file or --input, not both")
        items: list[Any] = []
        for i, line in read_lines(args.input):
            try:
                items.append((i, _request_from_line(line, i, args, common)))
            except UsageError as e:
                if args.fail_fast:
                    raise
                items.append((i, BadLine(prompt_of(line), str(e))))
        return items
    if args.prompt_file is not None:
        path = Path(args.prompt_file)
        if not path.is_file():
            raise UsageError(f"--prompt-file: no such file: {args.prompt_file}")
        args.prompt = read_utf8(path, "--prompt-file")
    if args.prompt is None:
        raise UsageError("give --prompt TEXT, --prompt-file PATH (or --input FILE.jsonl)")
    check_text(args.prompt, "--prompt")
    if args.prompt_file is None and args.prompt.startswith("@") and Path(args.prompt[1:]).is_file():
        say(f"constrained: note: the prompt is the text {args.prompt!r}; to read that file, use --prompt-file")
    if args.output:
        raise UsageError("--output goes with --input; single mode prints to stdout")
    request = GenerationRequest(prompt=args.prompt, **common, **_constraint(args.schema, args.regex, args, None))
    _check(request, "")
    return [(None, request)]


def _check(request: Any, where: str) -> None:
    try:
        request.check()
    except ValueError as e:
        raise UsageError(f"{where}{e}") from None


def _constraint(schema: Any, regex: Any, args: argparse.Namespace, where: str | None) -> dict[str, Any]:
    """``{"schema"|"regex": ..., "options": ...}``, checked by compiling it to a grammar (no model needed).

    `where` names the input line in batch mode; None means the command line flags.
    """
    from constrained.errors import ConstraintError

    if regex is not None:
        where = where or "--regex"
        if not isinstance(regex, str):
            raise UsageError(f"{where}: \"regex\" must be a string, got {regex!r}")
        from grammars.regex import regex_grammar

        try:
            grammar = regex_grammar(regex, ascii=args.ascii)
        except ConstraintError as e:
            raise UsageError(f"{where}: bad regex {regex!r}: {e}") from None
        _check_not_empty(grammar, where)
        return {"regex": regex, "options": {"max_states": args.max_states, **({"ascii": True} if args.ascii else {})}}
    if schema is None:
        return {}  # unconstrained
    where = where or "--schema"
    if isinstance(schema, str):
        schema = _load_schema_arg(schema, where)
    options = {"strict": args.strict, "whitespace": args.whitespace, **({"any_order": True} if args.any_order else {})}
    from grammars.json_schema import json_schema_grammar

    try:
        grammar = json_schema_grammar(schema, **options)
    except (ConstraintError, ValueError, TypeError) as e:
        raise UsageError(f"{where}: {e}") from None
    _check_not_empty(grammar, where)
    for note in grammar.info.get("report", ()):   # once per schema, here; compiling again warns nothing
        if note.kind != "vendor" or args.verbose:
            say(f"constrained: note: {where}: {note}")
    return {"schema": schema, "options": {**options, "max_states": args.max_states}}


def _check_not_empty(grammar: Any, where: str) -> None:
    """An unsatisfiable schema or empty regex, found before any model is loaded."""
    from grammars.dfa import LazyDFA
    from grammars.errors import ConstraintError, EmptyConstraintError

    try:
        empty = LazyDFA(grammar, max_depth=int(grammar.info.get("max_depth", 64))).is_empty
    except ConstraintError:
        return                                     # e.g. a state budget: compiling will say so, per sample
    if empty:
        raise UsageError(f"{where}: {EmptyConstraintError(grammar.info.get('kind', 'constraint'), grammar.info.get('empty_at'))}")


def _load_schema_arg(value: str, where: str) -> Any:
    text, origin = value, "inline schema"
    if not value.lstrip().startswith(("{", "[")) and value.strip() not in ("true", "false"):
        path = Path(value)
        if not path.is_file():
            raise UsageError(f"{where}: no such file: {value}")
        text, origin = read_utf8(path, where), str(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{where}: {origin} is not valid JSON: {e}") from None


_LINE_KEYS = {"prompt", "schema", "regex", "n", "max_tokens", "temperature", "top_p", "seed", "chat", "budget_aware"}


def _request_from_line(line: str, lineno: int, args: argparse.Namespace, common: dict[str, Any]) -> Any:
    from constrained.generate import GenerationRequest

    where = f"{args.input}:{lineno}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise UsageError(f"{where}: not valid JSON: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
        raise UsageError(f"{where}: each line must be an object with a string \"prompt\"")
    check_text(obj["prompt"], f"{where}: \"prompt\"")
    unknown = sorted(set(obj) - _LINE_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(_LINE_KEYS)}")
    if "schema" in obj and "regex" in obj:
        raise UsageError(f"{where}: give either \"schema\" or \"regex\", not both")
    # A line's own constraint replaces the command line's; otherwise --schema / --regex apply.
    own = "schema" in obj or "regex" in obj
    schema = obj.get("schema") if own else args.schema
    regex = obj.get("regex") if own else args.regex
    fields = {**common, **{k: obj[k] for k in _LINE_KEYS - {"prompt", "schema", "regex"} if k in obj}}
    request = GenerationRequest(prompt=obj["prompt"], **fields, **_constraint(schema, regex, args, where))
    _check(request, f"{where}: ")
    return request


def _print_samples(samples: list[Any], as_json: bool) -> int:
    """Single mode: each sample's text exactly as generated (or, `as_json`, its JSON record) on stdout, and
    the status of every sample that did not complete on stderr; 0 when every sample completed, else 1."""
    for i, sample in enumerate(samples):
        if as_json:
            print(json.dumps({**sample.to_dict(), "sample": i}, ensure_ascii=False), flush=True)
        else:
            print(sample.text, flush=True)
        if sample.status != "complete":
            why = sample.error or f"cut off after {len(sample.token_ids)} tokens; raise --max-tokens"
            say(f"constrained: sample {i}: {sample.status}: {why}")
    return 0 if all(s.status == "complete" for s in samples) else 1


def _print_summary(results: list[list[Any]], elapsed: float, load_s: float, model: Any, before: dict[str, int]) -> None:
    samples = [s for row in results for s in row]
    tokens = sum(len(s.token_ids) for s in samples)
    complete = sum(s.status == "complete" for s in samples)
    compile_ms = sum(row[0].compile_ms for row in results if row)
    stats = {k: v - before.get(k, 0) for k, v in model.stats.items()}
    print(
        f"{len(samples)} samples ({complete} complete), {tokens} tokens in {elapsed:.2f} s "
        f"({tokens / max(elapsed, 1e-9):.1f} tok/s); compile {compile_ms:.1f} ms; model load {load_s:.2f} s; "
        f"cache hits: kv {stats.get('kv_cache_hits', 0)}, logprobs {stats.get('logprob_cache_hits', 0)}",
        file=sys.stderr,
    )


if __name__ == "__main__":  # pragma: no cover
    run()
