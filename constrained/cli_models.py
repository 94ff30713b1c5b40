"""Loading the command line's model: the directory checks made before a slow load, and the tiny default.

`constrained generate` and `constrained serve` share these. Without ``--model``
the tiny random model of `backends.tiny` is loaded (its weights are random:
valid output, meaningless content), once per process and backend.

Example:
    >>> has_chat_template(Path("/nonexistent"))
    False
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from constrained.cli_io import UsageError

__all__ = ["TINY_ARCH", "TINY_VOCAB", "check_model_dir", "default_backend", "has_chat_template", "load_model", "tiny_dir",
           "tiny_lm"]

# The default model (`backends.tiny`): small vocabulary (32k), so a cold start stays short on a CPU.
TINY_ARCH, TINY_VOCAB = "llama", "llama-spm"


def check_model_dir(args: argparse.Namespace, chat: bool) -> None:
    """What a model directory must hold, checked before the (slow) load."""
    if args.model is None:
        path, name = tiny_dir(), "the tiny model"
    else:
        path, name = Path(args.model), f"--model {args.model}"
        if not path.is_dir():
            raise UsageError(f"--model: no such model directory: {args.model} (nothing is downloaded from a model hub)")
        if not (path / "config.json").is_file():
            raise UsageError(f"--model: {args.model} has no config.json: point --model at a model directory "
                             "(the mlx-lm or transformers layout: config.json, weights, tokenizer files)")
    if chat and not has_chat_template(path):
        raise UsageError(f"--chat: {name} has no chat template (in tokenizer_config.json or chat_template.jinja); "
                         "drop --chat and write the prompt in the model's own format, or add a template")


def tiny_dir() -> Path:
    from backends.tiny import tiny_model_dir

    return Path(tiny_model_dir(TINY_ARCH, TINY_VOCAB))


def has_chat_template(path: Path) -> bool:
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return True
    config = path / "tokenizer_config.json"
    try:
        return bool(json.loads(config.read_text(encoding="utf-8")).get("chat_template")) if config.is_file() else False
    except (ValueError, OSError):
        return False


def load_model(args: argparse.Namespace, **opts: Any) -> tuple[Any, str]:
    """The backend for `args.model` (default: the tiny model) and a note to print; `opts` go to the backend."""
    from constrained.errors import BackendUnavailableError

    backend = args.backend or default_backend()
    try:
        if args.model is None:
            from backends.tiny import tiny_model_dir

            path = str(tiny_model_dir(TINY_ARCH, TINY_VOCAB))
            note = (f"note: no --model given, using the tiny local model at {path}. Its weights are RANDOM: "
                    "the output is valid for the constraint, but its content is meaningless.")
            return tiny_lm(path, backend, **opts), note
        if not Path(args.model).is_dir():
            raise UsageError(f"--model: no such model directory: {args.model} (nothing is downloaded from a model hub)")
        if opts:
            from backends.base import load_model_by_name

            lm = load_model_by_name(args.model, backend, llm_opts=opts)
            lm.ensure_loaded()
            return lm, ""
        from constrained.generate import resolve_model

        return resolve_model(args.model, backend), ""
    except BackendUnavailableError as e:
        raise UsageError(str(e)) from None


_TINY_LMS: dict[tuple[Any, ...], Any] = {}


def tiny_lm(path: str, backend: str, **opts: Any) -> Any:
    """The tiny model, loading its tokenizer class directly.

    Its directory pins ``PreTrainedTokenizerFast``; skipping `AutoTokenizer`'s
    class resolution saves seconds of imports on every cold start.
    """
    key = (path, backend, tuple(sorted(opts.items())))
    if key not in _TINY_LMS:
        from backends.base import load_model_by_name  # noqa: F401  (raises BackendUnavailableError early)

        def tokenizer() -> Any:
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast.from_pretrained(path)

        if backend == "mlx":
            from backends.mlx import MLXLM

            def loader() -> tuple[Any, Any]:
                from mlx_lm.utils import load_model

                return load_model(Path(path))[0], tokenizer()

            lm: Any = MLXLM(loader=loader, **opts)
        else:
            from backends.hf import HFLM

            def loader() -> tuple[Any, Any]:
                import torch
                from transformers import AutoModelForCausalLM

                model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, local_files_only=True)
                return model, tokenizer()

            lm = HFLM(loader=loader, **opts)
        lm.ensure_loaded()
        _TINY_LMS[key] = lm
    return _TINY_LMS[key]


def default_backend() -> str:
    import importlib.util

    return "mlx" if importlib.util.find_spec("mlx_lm") and importlib.util.find_spec("mlx") else "hf"
