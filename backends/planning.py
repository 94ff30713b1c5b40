"""The worker side of `AsyncLM`: which rows a model batch runs, given the prefix trie.

`PrefixPlanning` turns a list of prompts into model batches: prompts already
in the trie cost nothing, duplicates run once, and prompts that share an
uncached prefix get that prefix computed once, in an earlier round (or cut
out of a stored KV segment that runs through it), so that only their own
suffixes run after it. Each row (`Job`) starts from the longest chain of KV
segments the trie holds for its prompt. It is a mixin of `AsyncLM`, whose
worker thread is the only caller: it uses the backend's `trie`, `stats`,
`batch_size`, `prefix_caching`, `splits_kv`, `max_segments`, `_vocab_size`,
`ensure_loaded`, `_forward` and `_cut_kv`.

Example:
    >>> _lcp((1, 2, 3, 4), (1, 2, 5))
    2
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from constrained.token_trie import KVSegment

__all__ = ["Job", "PrefixPlanning", "Prompt"]

Prompt = tuple[int, ...]


@dataclass
class Job:
    """One row of a model batch.

    Attributes:
        tokens: the full prompt.
        chain: cached KV segments tiling ``[0, start)`` (empty = nothing cached).
        start: how many leading tokens are covered by `chain`; the row runs ``tokens[start:]``.
        store_from: where the KV handle to return must start (``start`` for a
            segment, 0 for a full copy), or None when no KV should be returned.
    """

    tokens: Prompt
    chain: list[KVSegment]
    start: int
    store_from: int | None


class PrefixPlanning:
    """Batch planning over the prefix trie (see the module docstring); mixed into `AsyncLM`."""

    def _run_prompts(self, prompts: list[Prompt]) -> list[np.ndarray]:
        """Worker thread: logprobs for `prompts`; raises on the first invalid prompt."""
        out = self._run_prompts_or_errors(prompts)
        for x in out:
            if isinstance(x, Exception):
                raise x
        return out  # type: ignore[return-value]

    def _run_prompts_or_errors(self, prompts: list[Prompt]) -> list[np.ndarray | Exception]:
        """Worker thread: logprobs for `prompts` (duplicates and cached ones cost nothing).

        An invalid prompt yields its exception in place, so one bad request
        does not fail the others batched with it.
        """
        self.ensure_loaded()
        found: dict[Prompt, np.ndarray | Exception] = {}
        for p in prompts:
            err = self._check_prompt(p)
            if err is not None:
                found[p] = err
        self.stats["requests"] += len(prompts)
        misses = []
        for p in dict.fromkeys(prompts):
            if p in found:
                continue
            lp = self.trie.get_logprobs(p)
            if lp is None:
                misses.append(p)
            else:
                found[p] = lp
                self.stats["logprob_cache_hits"] += 1
        for round_ in self._plan_rounds(misses):
            round_.sort(key=len)
            for i in range(0, len(round_), self.batch_size):
                found.update(self._run_jobs(round_[i : i + self.batch_size]))
        return [found[p] for p in prompts]

    def _check_prompt(self, p: Prompt) -> ValueError | None:
        if not p:
            return ValueError("token_ids must hold at least one token, got []")
        if min(p) >= 0 and max(p) < self._vocab_size:  # the common case, checked in C
            return None
        bad = [t for t in p if not 0 <= t < self._vocab_size]
        if bad:
            return ValueError(f"token ids must be in [0, {self._vocab_size}), got {bad[:5]}")
        return None

    def _plan_rounds(self, misses: list[Prompt]) -> list[list[Prompt]]:
        """Order the work: shared uncached prefixes first, then what extends them.

        A shared prefix is the longest common prefix of two prompts adjacent in
        sorted order (every branching point of the prompts' trie is one), or
        the part of a prompt that an earlier prompt's path in the trie already
        spells (a system prompt sent again with a new question: the earlier KV
        segment runs past the branching point, so it cannot be reused as it
        is). When at least 2 of its tokens are not yet cached it gets a KV
        node of its own, and every later prompt that starts with it reuses
        that: cut out of a stored segment that runs through it (`_split`),
        or else computed as a target. A target runs one round after the
        longest target that prefixes it.
        """
        if not self.prefix_caching or not misses:
            return [misses] if misses else []
        targets = set(misses)
        ordered, checked = sorted(misses), set()
        shared = [(b, _lcp(a, b)) for a, b in zip(ordered, ordered[1:])]
        shared += [(p, self._branch_depth(p)) for p in misses]
        for b, d in shared:
            if d >= 2 and d < len(b) and b[:d] not in checked:  # many rows share one prefix: look it up once
                checked.add(b[:d])
                chain = self.trie.longest_kv(b[:d])
                if d - (chain[-1].end if chain else 0) >= 2 and not self._split(b[:d]):
                    targets.add(b[:d])
        lengths = sorted({len(t) for t in targets})
        level: dict[Prompt, int] = {}
        for t in sorted(targets, key=len):
            parents = [level[t[:n]] for n in lengths if n < len(t) and t[:n] in level]
            level[t] = max(parents) + 1 if parents else 0
        rounds: list[list[Prompt]] = [[] for _ in range(max(level.values()) + 1)]
        for t, lv in level.items():
            rounds[lv].append(t)
        return rounds

    def _split(self, prefix: Prompt) -> bool:
        """Give `prefix` KV by cutting a stored segment that runs through it; False where none does or cannot be cut."""
        if not self.splits_kv or not self.trie.split_kv(prefix, self._cut_kv):
            return False
        self.stats["kv_splits"] += 1
        return True

    def _branch_depth(self, p: Prompt) -> int:
        """Where `p` leaves the paths already in the trie; 0 when its cached KV reaches that far anyway.

        A decoding row's prompt is its previous step plus a token or a few
        forced ones, whose KV was stored last step: that costs one trie walk.
        """
        chain = self.trie.longest_kv(p, max_depth=len(p) - 1)
        cached = chain[-1].end if chain else 0
        if cached >= len(p) - 2:
            return 0
        return self.trie.shared_depth(p, max_depth=len(p) - 1)

    def _run_jobs(self, prompts: list[Prompt]) -> dict[Prompt, np.ndarray]:
        jobs = [self._make_job(p) for p in prompts]
        outs = self._forward(jobs)
        self.stats["forward_calls"] += 1
        self.stats["rows"] += len(jobs)
        result = {}
        for job, (lp, handle) in zip(jobs, outs):
            self.stats["model_tokens"] += len(job.tokens) - job.start
            self.stats["kv_reused_tokens"] += job.start
            self.stats["kv_cache_hits"] += job.start > 0
            result[job.tokens] = lp
            self.trie.put_logprobs(job.tokens, lp)
            if handle is not None and job.store_from is not None:
                try:
                    self.trie.put_kv(job.tokens, handle, job.store_from)
                except ValueError:  # its base was evicted meanwhile: keep going uncached
                    self.stats["kv_store_skipped"] += 1
        return result

    def _make_job(self, p: Prompt) -> Job:
        if not self.prefix_caching:
            return Job(p, [], 0, None)
        # At most len-1 tokens come from the cache: the last must run to give logits.
        chain = self.trie.longest_kv(p, max_depth=len(p) - 1)
        start = chain[-1].end if chain else 0
        store_from = 0 if len(chain) >= self.max_segments else start
        return Job(p, chain, start, store_from)


def _lcp(a: Prompt, b: Prompt) -> int:
    """Length of the common prefix: binary search on slice equality (compared in C, not token by token)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while hi - lo > 1:  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
