"""`constrained serve`: its command-line flags and start-up (the server itself is `constrained.serve`).

    constrained serve --model DIR [--backend mlx|hf] [--host 127.0.0.1] [--port 8000]

Everything here is checked before the model loads: the `serve` extra
(FastAPI, uvicorn), the backend, the model directory. FastAPI is imported
only once they pass, so `constrained --help` and `constrained generate`
never import it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_serve_parser"]


def add_serve_parser(sub: Any) -> None:
    """Add the `serve` subcommand to the CLI's subparsers."""
    from constrained.cli import _positive_int
    from constrained.compile import MAX_STATES

    s = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (needs the `serve` extra)")
    s.add_argument("--model", help="model directory (default: a tiny local model with RANDOM weights)")
    s.add_argument("--backend", choices=["mlx", "hf", "vllm"], default=None,
                   help="default: mlx when installed, else hf (vllm: not available yet)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    s.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one (default: %(default)s)")
    s.add_argument("--served-model-name", metavar="NAME",
                   help="the model id clients give (default: the model directory's name)")
    s.add_argument("--max-tokens", type=_positive_int, default=256,
                   help="max_tokens of a request that gives none (default: %(default)s)")
    s.add_argument("--batch-size", type=_positive_int, default=32,
                   help="most rows in one model call (default: %(default)s)")
    s.add_argument("--cache-mb", type=_positive_int, default=1024,
                   help="memory for the prefix trie's logprobs and KV, in MiB (default: %(default)s)")
    s.add_argument("--max-states", type=_positive_int, default=MAX_STATES, metavar="N",
                   help="automaton state budget per constraint (default: %(default)s)")
    s.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Check the extra and the model, load it, then serve until interrupted."""
    import importlib.util

    from constrained.cli import TINY_ARCH, UsageError, _check_model_dir, _load_model, say

    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"serve needs {', '.join(missing)}: pip install 'constrained[serve]'")
    if args.backend == "vllm":
        raise UsageError("--backend vllm is not available in this version (it comes with issue 18); "
                         "use --backend mlx or hf")
    _check_model_dir(args, chat=False)
    opts = {"batch_size": args.batch_size, "cache_size": args.cache_mb << 20}
    model, note = _load_model(args, **opts)
    if note:
        say(note)
    name = args.served_model_name or (Path(args.model).name if args.model else f"tiny-random-{TINY_ARCH}")
    from constrained.serve import serve

    return serve(model, name, host=args.host, port=args.port, default_max_tokens=args.max_tokens,
                 max_states=args.max_states)
