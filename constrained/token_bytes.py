"""Token strings -> the bytes they spell, for the tokenizer kinds users hold.

`Vocabulary.from_tokenizer` calls `read_tokenizer`, which unwraps the
tokenizer, finds its token strings, its added/special ids and its EOS ids, and
converts the strings to bytes with the scheme its decoder uses (byte-level
BPE, SentencePiece, or literal UTF-8).

Example:
    >>> from constrained.gguf_tokenizers import load_tokenizer  # doctest: +SKIP
    >>> table, eos, special = read_tokenizer(load_tokenizer("gpt-2"))  # doctest: +SKIP
    >>> table[995], eos, sorted(special)  # doctest: +SKIP
    (b' world', [], [50256])
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "bytes_to_unicode",
    "byte_level_token_bytes",
    "sentencepiece_token_bytes",
    "read_tokenizer",
    "token_scheme",
]

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from each byte to the printable character byte-level BPE stores it as.

    Example:
        >>> bytes_to_unicode()[ord(" ")], bytes_to_unicode()[ord("a")]
        ('Ġ', 'a')
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    shift = 0
    for b in range(256):  # the remaining bytes are moved past U+00FF, in byte order
        if b not in printable:
            printable.append(b)
            chars.append(256 + shift)
            shift += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


# str.translate table: byte-level character -> latin-1 character of the same byte value.
# Latin-1 characters outside GPT-2's alphabet map to U+FFFF so that encoding fails loudly.
_BYTE_LEVEL_TABLE = {c: 0xFFFF for c in range(256)} | {ord(ch): b for b, ch in bytes_to_unicode().items()}
_UNICODE_TO_BYTE = {ch: b for b, ch in bytes_to_unicode().items()}


def read_tokenizer(tokenizer: Any) -> tuple[list[bytes | None], list[int], set[int]]:
    """Return ``(token_bytes, eos_ids, special_ids)`` for any supported tokenizer.

    ``token_bytes`` already has ``None`` at the special ids.

    Raises:
        TypeError: the object is not a tokenizer this module knows.
        ValueError: the tokenizer's token encoding is not supported.
    """
    from tokenizers import Tokenizer

    eos: list[int] = []
    if _is_mlx_wrapper(tokenizer):
        eos = sorted(tokenizer.eos_token_ids)  # a set: models like Llama-3-Instruct stop on several ids
        tokenizer = tokenizer._tokenizer
    if isinstance(tokenizer, Tokenizer):
        table, special = _from_backend(tokenizer, set())
    elif hasattr(tokenizer, "backend_tokenizer"):  # transformers fast tokenizer
        table, special = _from_backend(tokenizer.backend_tokenizer, set(tokenizer.all_special_ids))
        eos = eos or _hf_eos(tokenizer)
    elif hasattr(tokenizer, "convert_ids_to_tokens"):  # transformers slow (Python) tokenizer
        table, special = _from_slow(tokenizer)
        eos = eos or _hf_eos(tokenizer)
    else:
        raise TypeError(
            f"cannot read a vocabulary from {type(tokenizer).__name__}: expected a tokenizers.Tokenizer, "
            "a transformers tokenizer or an mlx-lm TokenizerWrapper"
        )
    return table, eos, special


def _is_mlx_wrapper(tokenizer: Any) -> bool:
    # TokenizerWrapper forwards unknown attributes to the HF tokenizer it wraps, so hasattr() cannot
    # tell them apart; its own instance attributes can (without importing mlx_lm, which loads mlx).
    attrs = getattr(tokenizer, "__dict__", {})
    return "_tokenizer" in attrs and "_eos_token_ids" in attrs


def _hf_eos(tokenizer: Any) -> list[int]:
    eos = getattr(tokenizer, "eos_token_id", None)
    return [] if eos is None else [int(eos)]


def token_scheme(backend: Any) -> str:
    """How a `tokenizers.Tokenizer` stores bytes: ``"byte_level"``, ``"sentencepiece"`` or ``"literal"``.

    Read from the decoder, which is what turns token strings back into text.

    Example:
        >>> from tokenizers import Tokenizer, models, decoders
        >>> tok = Tokenizer(models.BPE()); tok.decoder = decoders.ByteLevel()
        >>> token_scheme(tok)
        'byte_level'
    """
    decoder = backend.decoder
    if decoder is None:
        return "literal"
    kinds = _decoder_kinds(json.loads(decoder.__getstate__()))
    if "ByteLevel" in kinds:
        return "byte_level"
    if kinds & {"Metaspace", "ByteFallback", "Replace(▁)"}:
        return "sentencepiece"
    raise ValueError(f"unsupported tokenizer decoder {sorted(kinds)}: cannot tell which bytes each token spells")


def _decoder_kinds(node: Any) -> set[str]:
    """The decoder types in a (possibly nested Sequence) decoder's JSON; a ▁->space Replace is "Replace(▁)"."""
    if not isinstance(node, dict):
        return set()
    kind = node.get("type")
    if kind == "Replace" and node.get("pattern") == {"String": "▁"} and node.get("content") == " ":
        kind = "Replace(▁)"
    found = {kind} if isinstance(kind, str) else set()
    for child in node.get("decoders") or []:
        found |= _decoder_kinds(child)
    return found


def _from_backend(backend: Any, extra_special: set[int]) -> tuple[list[bytes | None], set[int]]:
    """Token bytes of a `tokenizers.Tokenizer`; added tokens and `extra_special` become None."""
    scheme = token_scheme(backend)
    n = backend.get_vocab_size(with_added_tokens=True)
    to_token = backend.id_to_token  # one call per id is ~2x faster than get_vocab() on 150k tokens
    tokens = [to_token(i) for i in range(n)]
    special = set(backend.get_added_tokens_decoder()) | extra_special
    return _convert(tokens, scheme, special), special


def _from_slow(tokenizer: Any) -> tuple[list[bytes | None], set[int]]:
    """Token bytes of a transformers slow tokenizer (SentencePiece or GPT-2 style byte-level)."""
    n = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(n)))
    special = set(getattr(tokenizer, "added_tokens_decoder", {})) | set(tokenizer.all_special_ids)
    sp_model = getattr(tokenizer, "sp_model", None)
    if sp_model is not None:
        pieces = sp_model.get_piece_size()
        # SentencePiece marks control/unknown/unused pieces itself; they never spell text.
        special |= {
            i for i in range(pieces) if sp_model.is_control(i) or sp_model.is_unknown(i) or sp_model.is_unused(i)
        }
        return _convert(tokens, "sentencepiece", special), special
    if hasattr(tokenizer, "byte_decoder"):
        return _convert(tokens, "byte_level", special), special
    raise ValueError(
        f"unsupported slow tokenizer {type(tokenizer).__name__}: it has neither a SentencePiece model nor a "
        "byte-level decoder; use its fast version"
    )


def _convert(tokens: list[str | None], scheme: str, special: set[int]) -> list[bytes | None]:
    """Map token strings to bytes with `scheme`; special ids and id gaps become None."""
    if scheme == "byte_level":
        table: list[bytes | None] = [None if t is None else byte_level_token_bytes(t) for t in tokens]
    elif scheme == "sentencepiece":
        table = [None if t is None else sentencepiece_token_bytes(t) for t in tokens]
    else:
        table = [None if t is None else t.encode("utf-8") for t in tokens]
    for i in special:
        if 0 <= i < len(table):
            table[i] = None
    return table


def byte_level_token_bytes(token: str) -> bytes:
    """The bytes of a byte-level BPE token string.

    Example:
        >>> byte_level_token_bytes("Ġworld")
        b' world'
    """
    try:
        return token.translate(_BYTE_LEVEL_TABLE).encode("latin-1")
    except UnicodeEncodeError:
        # Not pure GPT-2 alphabet (seen in hand-edited vocabs): decode like HF's ByteLevel decoder,
        # which keeps unknown characters as their UTF-8.
        return b"".join(bytes([_UNICODE_TO_BYTE[c]]) if c in _UNICODE_TO_BYTE else c.encode() for c in token)


def sentencepiece_token_bytes(token: str) -> bytes:
    """The bytes of a SentencePiece token string: ``▁`` is a space, ``<0xNN>`` is byte NN.

    Example:
        >>> sentencepiece_token_bytes("▁Hello"), sentencepiece_token_bytes("<0x0A>")
        (b' Hello', b'\\n')
    """
    # Cheap prefix test first: only ~256 of the tokens are <0xNN> byte pieces.
    if token.startswith("<0x") and len(token) == 6:
        match = _BYTE_TOKEN.fullmatch(token)
        if match is not None:
            return bytes([int(match.group(1), 16)])
    return token.replace("▁", " ").encode("utf-8")
