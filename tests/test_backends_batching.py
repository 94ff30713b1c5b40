"""AsyncLM batching / merging / caching logic, on the deterministic MockLM."""

from __future__ import annotations

import asyncio
import sys
import time

import numpy as np
import pytest

from backends.base import load_model_by_name
from backends.mock import MockLM, mock_logprobs
from constrained.errors import BackendUnavailableError

V = 64


def make(**opts) -> MockLM:
    return MockLM(None, vocab_size=V, eos_token_ids=[0], **opts)


def shared_prefix_requests(n_prefixes: int = 4, per_prefix: int = 8, prefix_len: int = 20) -> list[list[int]]:
    prefixes = [[1 + (7 * k + j) % (V - 1) for j in range(prefix_len)] for k in range(n_prefixes)]
    return [p + [1 + j, 2 + j] for p in prefixes for j in range(per_prefix)]


def test_32_concurrent_requests_run_each_shared_prefix_once() -> None:
    reqs = shared_prefix_requests()
    with make(batch_size=64, timeout=0.05) as lm:

        async def main() -> list[np.ndarray]:
            return await asyncio.gather(*(lm.next_token_logprobs(r) for r in reqs))

        out = asyncio.run(main())
        for r, lp in zip(reqs, out):
            np.testing.assert_array_equal(lp, mock_logprobs(tuple(r), V))
        # each 20-token prefix runs once, then each request only its 2-token suffix
        assert lm.stats["model_tokens"] == 4 * 20 + 32 * 2
        assert lm.stats["kv_cache_hits"] == 32


SYSTEM = [1 + (5 * j) % (V - 1) for j in range(30)]
QUESTIONS = [[2 + i, 3 + i, 4] for i in range(6)]  # each starts with its own token


@pytest.mark.parametrize("splits", [True, False])
def test_a_system_prompt_sent_again_is_prefilled_once(splits: bool) -> None:
    with make() as lm:
        lm.ensure_loaded()
        lm.splits_kv = splits
        for q in QUESTIONS:                     # one request at a time, as a server sees them
            lp = lm.next_token_logprobs_sync(SYSTEM + q)
            np.testing.assert_array_equal(lp, mock_logprobs(tuple(SYSTEM + q), V))
        lm.next_token_logprobs_sync(SYSTEM + QUESTIONS[0] + [9])  # the first prompt's cut segment still extends
        if splits:  # the second cuts the shared 30 tokens out of the first's KV segment; then questions only
            assert lm.stats["model_tokens"] == 30 + 6 * 3 + 1 and lm.stats["kv_splits"] == 1
        else:       # KV that cannot be cut: the second recomputes the 30 tokens once, on their own
            assert lm.stats["model_tokens"] == 33 + (30 + 3) + 4 * 3 + 1 and lm.stats["kv_splits"] == 0


def test_requests_arriving_while_one_is_in_flight_prefill_the_system_prompt_once() -> None:
    with make(batch_size=2, timeout=0.01) as lm:

        async def main() -> list[np.ndarray]:
            first = asyncio.ensure_future(lm.next_token_logprobs(SYSTEM + QUESTIONS[0]))
            await asyncio.sleep(0.05)           # flushed alone; the others queue behind it on the worker
            rest = [lm.next_token_logprobs(SYSTEM + q) for q in QUESTIONS[1:]]
            return await asyncio.gather(first, *rest)

        for q, lp in zip(QUESTIONS, asyncio.run(main())):
            np.testing.assert_array_equal(lp, mock_logprobs(tuple(SYSTEM + q), V))
        assert lm.stats["model_tokens"] == 30 + 6 * 3


def test_identical_concurrent_prompts_share_one_future() -> None:
    with make(batch_size=64, timeout=0.02) as lm:

        async def main() -> list[np.ndarray]:
            return await asyncio.gather(*(lm.next_token_logprobs([5, 6, 7]) for _ in range(10)))

        out = asyncio.run(main())
        assert all(o is out[0] for o in out)
        assert lm.stats["merged_requests"] == 9 and lm.stats["model_tokens"] == 3


def test_queue_flushes_at_batch_size_without_waiting_for_timeout() -> None:
    with make(batch_size=4, timeout=30.0) as lm:

        async def main() -> float:
            t0 = time.perf_counter()
            await asyncio.gather(*(lm.next_token_logprobs([i + 1, 2]) for i in range(4)))
            return time.perf_counter() - t0

        assert asyncio.run(main()) < 5.0
        assert lm.stats["forward_calls"] == 1 and lm.stats["rows"] == 4


def test_lone_request_flushes_after_timeout() -> None:
    with make(batch_size=100, timeout=0.01) as lm:
        lp = asyncio.run(lm.next_token_logprobs([3, 4]))
        np.testing.assert_array_equal(lp, mock_logprobs((3, 4), V))


def test_cancelling_one_waiter_leaves_the_shared_request_running() -> None:
    with make(batch_size=100, timeout=0.05) as lm:

        async def main() -> np.ndarray:
            a = asyncio.ensure_future(lm.next_token_logprobs([9, 9]))
            b = asyncio.ensure_future(lm.next_token_logprobs([9, 9]))
            await asyncio.sleep(0)
            a.cancel()
            return await b

        np.testing.assert_array_equal(asyncio.run(main()), mock_logprobs((9, 9), V))


def test_a_bad_request_fails_alone() -> None:
    with make(batch_size=100, timeout=0.01) as lm:

        async def main() -> list:
            return await asyncio.gather(lm.next_token_logprobs([1, V + 5]), lm.next_token_logprobs([1, 2]), return_exceptions=True)

        bad, good = asyncio.run(main())
        assert isinstance(bad, ValueError) and f"in [0, {V})" in str(bad) and str(V + 5) in str(bad)
        np.testing.assert_array_equal(good, mock_logprobs((1, 2), V))
        with pytest.raises(ValueError, match=f"got \\[{V + 5}\\]"):
            lm.batch_next_token_logprobs_sync([[1, 2], [V + 5]])
        with pytest.raises(ValueError, match="at least one token"):
            lm.next_token_logprobs_sync([])


def test_reset_async_queries_cancels_queued_requests() -> None:
    with make(batch_size=100, timeout=30.0) as lm:

        async def main() -> bool:
            task = asyncio.ensure_future(lm.next_token_logprobs([1, 2]))
            await asyncio.sleep(0)
            lm.reset_async_queries()
            try:
                await task
            except asyncio.CancelledError:
                return True
            return False

        assert asyncio.run(main())
        assert lm.stats["requests"] == 0


def test_close_finishes_queued_requests() -> None:
    lm = make(batch_size=100, timeout=30.0)

    async def main() -> np.ndarray:
        task = asyncio.ensure_future(lm.next_token_logprobs([4, 4]))
        await asyncio.sleep(0)
        lm.close()  # flushes the queue and waits for the worker
        return await task

    np.testing.assert_array_equal(asyncio.run(main()), mock_logprobs((4, 4), V))
    with pytest.raises(RuntimeError, match="closed"):
        lm.next_token_logprobs_sync([1])


def test_batch_api_groups_duplicates_and_uses_logprob_cache() -> None:
    with make(batch_size=2) as lm:
        prompts = [[1, 2, 3], [1, 2, 3], [4], [1, 2], [5, 6, 7, 8]]
        out = lm.batch_next_token_logprobs_sync(prompts)
        for p, lp in zip(prompts, out):
            np.testing.assert_array_equal(lp, mock_logprobs(tuple(p), V))
        assert lm.stats["forward_calls"] >= 2  # 4 distinct prompts, batch_size 2
        before = lm.stats["model_tokens"]
        asyncio.run(lm.batch_next_token_logprobs(prompts))
        assert lm.stats["model_tokens"] == before and lm.stats["logprob_cache_hits"] == 4


def test_long_chains_are_coalesced_into_full_segments() -> None:
    with make(max_segments=3) as lm:
        seq = [1, 2, 3]
        for t in range(20):  # extend one token at a time, like a decoding loop
            lm.next_token_logprobs_sync(seq)
            seq = seq + [1 + t % (V - 1)]
        assert lm.stats["model_tokens"] == 3 + 19  # every step reused the previous KV
        assert len(lm.trie.longest_kv(seq)) <= 3


def test_cache_size_zero_disables_reuse_but_stays_correct() -> None:
    with make(cache_size=0) as lm:
        lm.cache_kv([1, 2, 3, 4])
        lp = lm.next_token_logprobs_sync([1, 2, 3, 4, 5])
        np.testing.assert_array_equal(lp, mock_logprobs((1, 2, 3, 4, 5), V))
        assert lm.stats["model_tokens"] == 9 and lm.trie.nbytes == 0


def test_clear_caches() -> None:
    with make() as lm:
        lm.cache_kv([1, 2, 3])
        lm.clear_kv_cache()
        assert lm.trie.longest_kv([1, 2, 3, 4]) == [] and lm.trie.get_logprobs([1, 2, 3]) is not None
        lm.clear_cache()
        assert lm.trie.nbytes == 0


def test_sampling_is_seeded_and_stops_before_eos() -> None:
    with make() as lm:
        a = asyncio.run(lm.batch_sample([[1, 2]] * 3, 12, [0], temperature=1.0, seed=7))
        b = lm.batch_sample_sync([[1, 2]] * 3, 12, [0], temperature=1.0, seed=7)
        assert a == b and len({tuple(r) for r in a}) > 1  # rows use different streams
        assert all(0 not in row and len(row) <= 12 for row in a)
        greedy = asyncio.run(lm.sample([1, 2], 5, [], temperature=0.0))
        assert greedy[0] == int(np.argmax(mock_logprobs((1, 2), V)))
        eos_first = int(np.argmax(mock_logprobs((3,), V)))
        assert asyncio.run(lm.sample([3], 5, [eos_first], temperature=0.0)) == []


def test_sampling_runs_in_the_decode_loop_and_reports_a_failing_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    with make() as lm:
        loops = []
        real_run = __import__("constrained.decoding", fromlist=["DecodeLoop"]).DecodeLoop.run

        async def run(self, rows, **kw):            # the one decode loop, not a sampler of its own
            loops.append(len(rows))
            return await real_run(self, rows, **kw)

        monkeypatch.setattr("constrained.decoding.DecodeLoop.run", run)
        assert [len(r) for r in lm.batch_sample_sync([[1], [2, 3]], 4, [], seed=0)] == [4, 4]
        assert loops == [2]
        real = lm._forward

        def forward(jobs):                          # the model call fails on any batch holding prompt [9, 9]
            if any(j.tokens[:2] == (9, 9) for j in jobs):
                raise ValueError("device lost")
            return real(jobs)

        monkeypatch.setattr(lm, "_forward", forward)
        with pytest.raises(RuntimeError, match=r"sampling prompt 1 failed: .*ValueError: device lost"):
            lm.batch_sample_sync([[1], [9, 9]], 4, [], seed=0)

        async def inside_a_loop() -> list[list[int]]:   # the blocking form, called where a loop runs
            return lm.batch_sample_sync([[1, 2]], 3, [], seed=5)

        assert asyncio.run(inside_a_loop()) == lm.batch_sample_sync([[1, 2]], 3, [], seed=5)


def test_load_model_by_name_validates_backend() -> None:
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        load_model_by_name("x", backend="tpu")


def test_missing_framework_raises_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlx", None)
    monkeypatch.setitem(sys.modules, "mlx.core", None)
    monkeypatch.delitem(sys.modules, "backends.mlx", raising=False)
    with pytest.raises(BackendUnavailableError, match=r"pip install 'constrained\[mlx\]'"):
        load_model_by_name("whatever", backend="mlx")


def test_invalid_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="`batch_size` must be a positive integer, got 0"):
        make(batch_size=0)
