"""`TextStream`: one sample's text as its tokens arrive, in deltas, cut at a stop sequence.

Tokens spell bytes, and a character may span two tokens (an emoji in a
byte-level vocabulary, say), so the bytes go through an incremental UTF-8
decoder: a delta never holds half a character, and the deltas joined are the
text decoded in one go.

With stop sequences, the text is released only up to where a stop sequence
could still begin: the longest tail that is a prefix of one is held back
until the next token says whether it completes. When one appears, the text
ends just before it, and nothing after it is released.

Example:
    >>> from constrained.vocab import Vocabulary
    >>> v = Vocabulary.from_token_bytes([b"ab", b"\\n", b"\\xe2\\x82", b"\\xac", None], [4])
    >>> s = TextStream(v, stop=["\\n\\n"])
    >>> s.feed([0]), s.feed([0, 2]), s.feed([0, 2, 3, 1]), s.feed([0, 2, 3, 1, 1, 0])
    ('ab', '', '€', '')
    >>> s.text, s.stopped, s.finish()
    ('ab€', '\\n\\n', '')
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from constrained.vocab import Vocabulary

__all__ = ["TextStream"]


class TextStream:
    """Incremental text of one sample; see the module docstring.

    Args:
        vocab: spells the token ids.
        stop: stop sequences (non-empty strings); the text ends before the first to appear.

    Attributes:
        text: the text so far (cut before the stop sequence once one appeared).
        stopped: the stop sequence that ended the text, or None.
    """

    def __init__(self, vocab: Vocabulary, stop: Sequence[str] = ()) -> None:
        self.vocab = vocab
        self.stop = tuple(stop)
        self.text = ""
        self.stopped: str | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._seen = 0                          # token ids already decoded
        self._sent = 0                          # characters of `text` already released

    def feed(self, tokens: Sequence[int]) -> str:
        """Take the sample's token ids so far (a growing list); return the text newly released."""
        if self.stopped is not None:
            return ""
        new = tokens[self._seen:]
        self._seen = len(tokens)
        self.text += self._decoder.decode(self.vocab.decode(new))
        return self._release(final=False)

    def finish(self) -> str:
        """The sample ended: flush a trailing partial character (as U+FFFD) and any held-back text."""
        if self.stopped is not None:
            return ""
        self.text += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        start = self._sent
        cut = self._first_stop(start)
        if cut is not None:
            self.text = self.text[:cut]
            end = cut
        else:
            end = len(self.text) if final else len(self.text) - self._held_back()
        self._sent = max(start, end)
        return self.text[start:self._sent]

    def _first_stop(self, start: int) -> int | None:
        """Where the earliest stop sequence begins at or after `start` (the released text has none)."""
        found = [(i, s) for s in self.stop if (i := self.text.find(s, start)) >= 0]
        if not found:
            return None
        i, self.stopped = min(found, key=lambda f: f[0])
        return i

    def _held_back(self) -> int:
        """Length of the longest tail of the text that begins some stop sequence."""
        text, best = self.text, 0
        for s in self.stop:
            for k in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:k]):
                    best = k
                    break
        return best
