"""MLXLM and HFLM on the same tiny random weights: differential tests.

MLX vs HF, batched vs one-at-a-time, cached vs uncached, left-padded batches
vs single prompts, chunked prefill, chain coalescing, sampling paths, the
32-concurrent-requests / 4-prefixes prefill count on real models, KV segments
cut at a shared prefix vs fresh prefills, and a system prompt prefilled once
however its requests arrive.
"""

from __future__ import annotations

import asyncio
import json
import warnings

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from transformers import AutoTokenizer  # noqa: E402

from backends.hf import HFLM  # noqa: E402
from backends.mlx import MLXLM  # noqa: E402
from backends.tiny import tiny_model_dir, tiny_model_pair  # noqa: E402

pytestmark = [pytest.mark.mlx, pytest.mark.hf]

ATOL = 1e-4  # MLX vs torch float32 kernels differ in summation order
SAME = 5e-5  # one framework, other batch shapes: float32 matmuls are not bitwise batch-invariant


@pytest.fixture(scope="module")
def model_dir():
    return tiny_model_dir("llama", "byte-bpe")


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


def prompts_for(tokenizer) -> list[list[int]]:
    texts = ['{"name": "Ada", "age": 36}', "hello", '{"name": "Bob"', "x", "The quick brown fox jumps over the lazy dog."]
    ps = [tokenizer.encode(t) for t in texts]
    return ps + [ps[0][:3], ps[0] + ps[3]]  # a prefix of and an extension of another prompt


def make_backend(kind: str, model_dir, **opts):
    cls = MLXLM if kind == "mlx" else HFLM
    return cls.from_name(str(model_dir), **opts)


def reference(kind: str, model_dir, prompts: list[list[int]]) -> list[np.ndarray]:
    """One prompt at a time, nothing cached."""
    with make_backend(kind, model_dir, cache_size=0) as lm:
        return [lm.next_token_logprobs_sync(p) for p in prompts]


@pytest.fixture(scope="module")
def refs(model_dir, tokenizer):
    ps = prompts_for(tokenizer)
    return ps, {k: reference(k, model_dir, ps) for k in ("mlx", "hf")}


def test_mlx_matches_hf(refs) -> None:
    ps, r = refs
    for a, b in zip(r["mlx"], r["hf"]):
        assert a.dtype == np.float32 and a.shape == b.shape
        assert np.abs(a - b).max() < ATOL


@pytest.mark.parametrize("kind", ["mlx", "hf"])
def test_batched_left_padded_chunked_matches_single(kind: str, model_dir, refs) -> None:
    ps, r = refs
    with make_backend(kind, model_dir, batch_size=4, prefill_step_size=3) as lm:
        out = lm.batch_next_token_logprobs_sync(ps)
        assert lm.stats["padded_tokens"] > lm.stats["model_tokens"]  # rows really were padded together
    for a, b in zip(out, r[kind]):
        assert np.abs(a - b).max() < SAME


@pytest.mark.parametrize("kind", ["mlx", "hf"])
def test_cached_matches_uncached(kind: str, model_dir, refs) -> None:
    ps, r = refs
    with make_backend(kind, model_dir, max_segments=2) as lm:
        for p in ps:  # grow every prompt token by token, so later ones reuse segment chains
            for n in range(1, len(p) + 1):
                lp = lm.next_token_logprobs_sync(p[:n])
            assert np.abs(lp - r[kind][ps.index(p)]).max() < SAME
        assert lm.stats["kv_reused_tokens"] > 0
        assert all(len(lm.trie.longest_kv(p)) <= 2 for p in ps)
        lm.clear_kv_cache()
        assert np.abs(lm.next_token_logprobs_sync(ps[-1]) - r[kind][-1]).max() < SAME


@pytest.mark.parametrize("kind", ["mlx", "hf"])
def test_threads_with_their_own_event_loops_share_one_backend(kind: str, model_dir, refs) -> None:
    """8 threads, each running its own asyncio loop, query one backend at once: none hangs, all agree.

    (Before, one loop's timer flushed every loop's queue and resolved their
    futures on the wrong loop: 7 of 8 threads hung.)
    """
    import threading

    ps, r = refs
    results: dict[int, list[np.ndarray]] = {}
    with make_backend(kind, model_dir, batch_size=64, timeout=0.01) as lm:

        def worker(t: int) -> None:
            async def main() -> list[np.ndarray]:
                return await asyncio.gather(*(lm.next_token_logprobs(p) for p in ps[t % 3:] + ps[:t % 3]))

            results[t] = asyncio.run(main())

        threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=120)
        assert not any(th.is_alive() for th in threads), "a thread's event loop hung"
    assert sorted(results) == list(range(8))
    for t, out in results.items():
        order = ps[t % 3:] + ps[:t % 3]
        for p, lp in zip(order, out):
            assert np.abs(lp - r[kind][ps.index(p)]).max() < SAME


@pytest.mark.parametrize("kind", ["mlx", "hf"])
def test_32_concurrent_requests_prefill_each_prefix_once(kind: str, model_dir, tokenizer) -> None:
    prefixes = [tokenizer.encode(f"prefix number {k}: " + "lorem ipsum " * 6) for k in range(4)]
    reqs = [p + [10 + j] for p in prefixes for j in range(8)]
    with make_backend(kind, model_dir, batch_size=64, timeout=0.05) as lm:

        async def main() -> list[np.ndarray]:
            return await asyncio.gather(*(lm.next_token_logprobs(r) for r in reqs))

        out = asyncio.run(main())
        # every distinct prefix position runs once (the 4 prefixes share "prefix number "), then 1 token each
        distinct = {tuple(p[:i]) for p in prefixes for i in range(1, len(p) + 1)}
        assert len(distinct) < sum(len(p) for p in prefixes)
        assert lm.stats["model_tokens"] == len(distinct) + 32
        single = lm.next_token_logprobs_sync(reqs[13])  # logprob cache hit
        assert single is out[13]
    ref = reference(kind, model_dir, [reqs[0], reqs[31]])
    assert np.abs(out[0] - ref[0]).max() < SAME and np.abs(out[31] - ref[1]).max() < SAME


SYSTEM = "You are a careful assistant. Answer every question with one JSON object and nothing else. "
QUESTIONS = ["Alpha: where is the Louvre?", "Bravo: how old is Ada?", "Charlie: name a prime.",
             "Delta: what is 2 + 2?", "Echo: spell cat.", "Foxtrot: is the sky blue?"]


def system_and_questions(tokenizer) -> tuple[list[int], list[list[int]]]:
    system, questions = tokenizer.encode(SYSTEM), [tokenizer.encode(q) for q in QUESTIONS]
    assert len({q[0] for q in questions}) == len(questions)  # prompts part right after the system prompt
    return system, questions


@pytest.mark.parametrize("kind", ["mlx", "hf"])
def test_a_cut_kv_segment_gives_the_logprobs_of_a_fresh_prefill(kind: str, model_dir, tokenizer) -> None:
    system, questions = system_and_questions(tokenizer)
    q0, q1, q2 = questions[:3]
    first, second = system + q0, system + q1
    later = [first + [7, 8], second + q2, system + q2]  # on the head, on the tail, and on both cut halves
    with make_backend(kind, model_dir) as lm:
        got = [lm.next_token_logprobs_sync(first), lm.next_token_logprobs_sync(second)]
        assert lm.stats["kv_splits"] == 1 and lm.stats["kv_reused_tokens"] == len(system)
        assert [(s.start, s.end) for s in lm.trie.kv_chain(first)] == [(0, len(system)), (len(system), len(first))]
        got += [lm.next_token_logprobs_sync(p) for p in later]
        assert lm.stats["model_tokens"] == len(first) + len(q1) + 2 + len(q2) + len(q2)
    for a, b in zip(got, reference(kind, model_dir, [first, second, *later])):
        assert np.abs(a - b).max() < SAME


async def _in_flight_then_together(lm, prompts: list[list[int]]) -> list[np.ndarray]:
    """The first prompt on the worker alone, the others sent together while it runs."""
    first = asyncio.ensure_future(lm.next_token_logprobs(prompts[0]))
    await asyncio.sleep(0.05)
    return list(await asyncio.gather(first, *(lm.next_token_logprobs(p) for p in prompts[1:])))


async def _decode_loop_joins(lm, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """A server's pattern: one request decoding, then the others join its loop together."""
    from constrained.decoding import DecodeLoop, Row

    rows = [Row(tuple(p), None, frozenset(), max_tokens, 1.0, 1.0, np.random.default_rng(i)) for i, p in enumerate(prompts)]
    loop = DecodeLoop(lm)
    first = asyncio.ensure_future(loop.run(rows[:1]))
    while loop.steps < 1:
        await asyncio.sleep(0.001)
    await asyncio.gather(first, loop.run(rows[1:]))
    assert all(r.status == "max_tokens" and len(r.tokens) == max_tokens for r in rows)
    return [r.tokens for r in rows]


@pytest.mark.parametrize("kind", ["mlx", "hf"])
@pytest.mark.parametrize("arrival", ["one at a time", "while one is in flight", "joining a decode loop"])
def test_a_system_prompt_is_prefilled_once_across_requests(kind: str, arrival: str, model_dir, tokenizer) -> None:
    system, questions = system_and_questions(tokenizer)
    prompts = [system + q for q in questions]
    T = 4  # tokens per row in the decode loop: T - 1 of them run through the model after the prompt
    with make_backend(kind, model_dir, batch_size=2, timeout=0.01) as lm:
        if arrival == "one at a time":
            got = [lm.next_token_logprobs_sync(p) for p in prompts]
        elif arrival == "while one is in flight":
            got = asyncio.run(_in_flight_then_together(lm, prompts))
        else:
            samples = asyncio.run(_decode_loop_joins(lm, prompts, T))
            got = [lm.next_token_logprobs_sync(p) for p in prompts]  # cached: no model work
        generated = len(prompts) * (T - 1) if arrival == "joining a decode loop" else 0
        assert lm.stats["model_tokens"] == len(system) + sum(map(len, questions)) + generated
        assert lm.stats["kv_splits"] >= 1
    for a, b in zip(got, reference(kind, model_dir, prompts)):
        assert np.abs(a - b).max() < SAME
    if arrival == "joining a decode loop":  # the rows decoded on cut KV sample what fresh prefills would
        with make_backend(kind, model_dir, prefix_caching=False) as fresh:
            assert asyncio.run(_decode_loop_joins(fresh, prompts, T)) == samples


def test_sampling_paths_agree(model_dir, tokenizer) -> None:
    prompt = tokenizer.encode('{"name": ')
    with make_backend("mlx", model_dir) as mlx_lm, make_backend("hf", model_dir) as hf_lm:
        fast = mlx_lm.batch_sample_sync([prompt] * 4, 12, [], temperature=1.0, seed=3)  # live batch cache
        slow = hf_lm.batch_sample_sync([prompt] * 4, 12, [], temperature=1.0, seed=3)
        for lm in (mlx_lm, hf_lm):  # prompt prefilled once, then one model call per step for all rows
            assert lm.stats["model_tokens"] == len(prompt) + 4 * 11
            assert lm.stats["forward_calls"] == 1 + 11
    with make_backend("mlx", model_dir, prefix_caching=False) as uncached:  # prefilled in the sampler
        plain = uncached.batch_sample_sync([prompt] * 4, 12, [], temperature=1.0, seed=3)
    assert fast == slow == plain and all(len(r) == 12 for r in fast) and len({tuple(r) for r in fast}) > 1


@pytest.mark.parametrize("max_segments", [8, 1])  # 1: rows store full copies (prefix + own columns)
def test_rows_sharing_a_cached_prefix_run_packed(max_segments: int, model_dir, tokenizer) -> None:
    prefix = tokenizer.encode('{"name": "Ada", "tags": [')
    rows = [prefix + tokenizer.encode(t) for t in ['"a"]', '"bc", "d", "e"', "1"]]
    deeper = [r + [7, 8] for r in rows]  # then extend each row from the KV its packed run stored
    with make_backend("hf", model_dir, max_segments=max_segments) as lm:
        lm.next_token_logprobs_sync(prefix)
        got = lm.batch_next_token_logprobs_sync(rows) + lm.batch_next_token_logprobs_sync(deeper)
        assert lm.stats["packed_rows"] == 3 and lm.stats["kv_reused_tokens"] == 3 * len(prefix) + sum(map(len, rows))
    for a, b in zip(got, reference("hf", model_dir, rows + deeper)):
        assert np.abs(a - b).max() < SAME


def step_by_step(lm):
    """`lm` decoding on the per-step trie path (every row's sequence looked up each step), no live batch."""
    lm.live_decoding = False
    return lm


@pytest.mark.parametrize("kind", ["mlx", "hf"])
@pytest.mark.parametrize("caching", [True, False])
def test_live_sampling_matches_step_by_step(kind: str, caching: bool, model_dir, tokenizer) -> None:
    # unequal lengths (left padding in the live batch), a repeated prompt, and an EOS that stops rows early
    ps = [tokenizer.encode(t) for t in ['{"name": ', "The quick brown", '{"name": ', "x"]]
    with make_backend(kind, model_dir, prefix_caching=caching) as lm, step_by_step(make_backend(kind, model_dir)) as ref:
        free = lm.batch_sample_sync(ps, 10, [], seed=11)
        eos = [free[0][2], free[3][5]]
        got = lm.batch_sample_sync(ps, 10, eos, seed=11)
        want = ref.batch_sample_sync(ps, 10, eos, seed=11)
    assert got == want
    assert len(got[0]) == 2 and len(got[3]) <= 5 and any(len(r) == 10 for r in got)


def test_concurrent_loads_get_the_same_weights(model_dir) -> None:
    # from_pretrained on two worker threads at once used to leave one model's tied lm_head uninitialized
    with make_backend("hf", model_dir) as a, make_backend("hf", model_dir) as b, make_backend("mlx", model_dir) as c:
        x, y, z = (lm.next_token_logprobs_sync([5, 6, 7]) for lm in (a, b, c))
    assert np.abs(x - y).max() == 0 and np.abs(x - z).max() < ATOL


def test_buffer_layer_appends_like_torch_cat() -> None:
    import torch

    from backends.hf import BufferLayer

    layer, gen = BufferLayer(capacity=2), torch.Generator().manual_seed(0)
    parts = [torch.randn(3, 2, n, 4, generator=gen) for n in (3, 1, 5)]  # the first already overflows: grows twice
    for i in range(len(parts)):
        k, v = layer.update(parts[i], -parts[i])
        want = torch.cat(parts[: i + 1], dim=2)
        assert torch.equal(k, want) and torch.equal(v, -want) and layer.get_seq_length() == want.shape[2]
    layer.batch_select_indices(torch.tensor([2, 0]))
    layer.crop(-4)
    assert torch.equal(layer.keys, want[[2, 0], :, :5]) and layer.get_seq_length() == 5


def test_padded_vocab_logprobs_have_model_width(tmp_path) -> None:
    base = tiny_model_dir("llama", "byte-bpe", cache_dir=tmp_path)
    n = len(AutoTokenizer.from_pretrained(base))
    d = tiny_model_dir("llama", "byte-bpe", cache_dir=tmp_path, pad_vocab_to=n + 11)
    with make_backend("mlx", d) as a, make_backend("hf", d) as b:
        assert a.vocab_size == b.vocab_size == n + 11
        assert np.abs(a.next_token_logprobs_sync([3, 4]) - b.next_token_logprobs_sync([3, 4])).max() < ATOL


def test_qwen2_in_memory_mlx_matches_hf(tokenizer) -> None:
    hf_model, mlx_model = tiny_model_pair("qwen2", len(tokenizer), seed=5)
    ps = [[1, 2, 3, 4, 5], [7], [9, 8, 7, 6, 5, 4, 3, 2, 1]]
    with MLXLM(mlx_model, tokenizer) as a, HFLM(hf_model, tokenizer) as b:
        for x, y in zip(a.batch_next_token_logprobs_sync(ps), b.batch_next_token_logprobs_sync(ps)):
            assert np.abs(x - y).max() < ATOL


def test_unsliceable_caches_disable_prefix_caching(tokenizer) -> None:
    from mlx_lm.models.cache import RotatingKVCache

    _, mlx_model = tiny_model_pair("llama", len(tokenizer), seed=1)
    ps = [[5, 6, 7, 8], [5, 6, 7, 8, 9, 10], [11]]
    with MLXLM(mlx_model, tokenizer) as plain:
        want = plain.batch_next_token_logprobs_sync(ps)
    mlx_model.make_cache = lambda: [RotatingKVCache(max_size=64, keep=4) for _ in mlx_model.layers]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lm = MLXLM(mlx_model, tokenizer)
        lm.ensure_loaded()
    with lm:
        assert any("prefix caching disabled" in str(w.message) for w in caught)
        assert not lm.prefix_caching and not lm.splits_kv
        got = lm.batch_next_token_logprobs_sync(ps)
        assert lm.trie.longest_kv(ps[1]) == [] and lm.stats["kv_reused_tokens"] == 0
        assert lm.batch_sample_sync([ps[0]], 3, [], seed=0)[0].__len__() == 3
    for a, b in zip(got, want):
        assert np.abs(a - b).max() < SAME


def test_hf_sliding_window_layers_disable_prefix_caching(tokenizer) -> None:
    """A window drops old columns: no chain, cut or packed row may reuse them; every prompt runs whole."""
    import torch
    from transformers import AutoModelForCausalLM

    from backends.tiny import tiny_config

    cfg = tiny_config("qwen2", len(tokenizer), use_sliding_window=True, sliding_window=4, max_window_layers=0)
    torch.manual_seed(2)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    ps = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 9, 10, 11, 12], [5, 6, 7, 8, 20, 21]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lm = HFLM(model, tokenizer)
        lm.ensure_loaded()
    with lm:
        assert any("prefix caching disabled" in str(w.message) and "DynamicSlidingWindowLayer" in str(w.message) for w in caught)
        assert not lm.prefix_caching and not lm.splits_kv
        got = [lm.next_token_logprobs_sync(p) for p in ps]  # used to fail: a window layer has no buffer to reserve
        assert lm.stats["model_tokens"] == sum(map(len, ps)) and lm.stats["kv_splits"] == 0
    with torch.no_grad():
        want = [torch.log_softmax(model(torch.tensor([p])).logits[0, -1], -1).numpy() for p in ps]
    for a, b in zip(got, want):
        assert np.abs(a - b).max() < SAME


@pytest.mark.parametrize("kind", ["mlx", "hf"])
def test_load_failures_surface(kind: str, tmp_path) -> None:
    lm = make_backend(kind, tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no model directory"):
        lm.ensure_loaded()
    with pytest.raises(FileNotFoundError):
        lm.next_token_logprobs_sync([1])
    lm.close()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with make_backend(kind, tmp_path / "broken") as broken:
        with pytest.raises(Exception):  # the framework's own error, re-raised from the worker
            broken.ensure_loaded()


def test_mlx_reports_peak_memory(model_dir) -> None:
    with make_backend("mlx", model_dir) as lm:
        lm.next_token_logprobs_sync([1, 2, 3])
        assert lm.peak_memory_bytes > 0
        assert lm.trie.nbytes > 0
