"""The decode loop on a live KV batch (`constrained.live`) against the per-step trie path.

Both paths see the same model, so for the same seeds every row must draw the
same tokens: greedy and sampled, constrained rows that take forced tokens
(several fed in one step, beside rows that feed one), rows that finish at
different steps, `n` samples of one prompt, rows that join a running loop,
and a row whose backend call fails, which must fail alone. Real tiny models
(MLX and torch, same weights) and a real tokenizer; only the failures are
injected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

pytest.importorskip("torch")
pytest.importorskip("mlx.core")

from constrained.decoding import DecodeLoop, Row  # noqa: E402
from constrained.generate import GenerationRequest, _prepare, generate_batch  # noqa: E402
from tests.tiny_lms import async_lm  # noqa: E402

pytestmark = [pytest.mark.mlx, pytest.mark.hf]

VOCAB = "llama-bpe"
# long property names: the guide forces `{"a_rather_long_property_name":` and more, many tokens at once
FORCED = {"type": "object", "properties": {"a_rather_long_property_name": {"type": "boolean"},
                                           "another_long_property_name": {"enum": ["one", "two"]},
                                           "count": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["a_rather_long_property_name", "another_long_property_name", "count"],
          "additionalProperties": False}


def _requests(tag: str) -> list[GenerationRequest]:
    """Constrained (forced tokens, `n` > 1, sampled and greedy), a regex and a free row, ending at different steps."""
    opts = {"whitespace": "compact"}
    return [
        GenerationRequest(f"{tag} fill in:", schema=FORCED, max_tokens=40, seed=1, n=3, options=opts),
        GenerationRequest(f"{tag} greedy:", schema=FORCED, max_tokens=40, temperature=0, options=opts),
        GenerationRequest(f"{tag} digits:", regex="[0-9]{2,12}", max_tokens=14, seed=2, top_p=0.9),
        GenerationRequest(f"{tag} words:", regex="[a-z]{1,6}( [a-z]{1,6}){0,4}", max_tokens=30, seed=3),
        GenerationRequest(f"{tag} free:", max_tokens=7, seed=4),
    ]


def _outputs(results: Sequence[Sequence]) -> list[tuple[str, tuple[int, ...], int]]:
    return [(g.status, tuple(g.token_ids), g.forced_tokens) for gens in results for g in gens]


def _run_rows(lm, rows: list[Row], join_after: int = 0, at_steps: int = 2) -> DecodeLoop:
    """Decode `rows` in one loop: the first `join_after` start it, the rest join once it made `at_steps` steps."""

    async def go() -> DecodeLoop:
        loop = DecodeLoop(lm)
        if not join_after:
            await loop.run(rows)
            return loop
        later: list[asyncio.Future[None]] = []

        def on_token(row: Row) -> None:         # called inside the running loop, after a step
            if loop.steps >= at_steps and not later:
                later.append(asyncio.ensure_future(loop.run(rows[join_after:])))

        await loop.run(rows[:join_after], on_token=on_token)
        assert later, "the first rows ended before the others could join"
        await later[0]
        return loop

    return asyncio.run(go())


def _rows(lm, requests: list[GenerationRequest]) -> list[Row]:
    jobs = [_prepare(lm, r) for r in requests]
    assert all(job.exception is None for job in jobs)
    return [row for job in jobs for row in job.rows]


@pytest.fixture(params=["mlx", "hf"])
def lm(request):
    lm = async_lm(VOCAB, request.param)
    assert lm.live_decoding                     # both backends opt in (full-attention KV)
    return lm


def test_live_loop_samples_what_the_trie_path_samples(lm, monkeypatch: pytest.MonkeyPatch) -> None:
    reqs = _requests("same")
    monkeypatch.setattr(lm, "live_decoding", False)
    want = _outputs(generate_batch(lm, reqs))
    monkeypatch.setattr(lm, "live_decoding", True)
    before = dict(lm.stats)
    got = generate_batch(lm, reqs)
    assert _outputs(got) == want
    statuses = [g.status for gens in got for g in gens]
    assert statuses.count("complete") >= 5 and "max_tokens" in statuses   # rows end at different steps
    assert all(g.forced_tokens > 5 for g in got[0] + got[1])                # forced runs were fed
    assert len({tuple(g.token_ids) for g in got[0]}) > 1                    # n=3 samples differ
    # Every row went through the trie once (its join), not once per step.
    rows = sum(len(gens) for gens in got)
    assert lm.stats["requests"] - before.get("requests", 0) == rows


def test_forced_tokens_are_fed_beside_single_tokens_in_one_call(lm, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step where one row feeds a forced run and another one token: one model call, no fallback."""
    rows = _rows(lm, _requests("mixed"))
    real, widths = lm._live_feed, []
    monkeypatch.setattr(lm, "_live_feed", lambda live, feeds: widths.append(sorted(map(len, feeds))) or real(live, feeds))
    calls, tokens = lm.stats["forward_calls"], lm.stats["model_tokens"]
    loop = _run_rows(lm, rows)
    assert any(w[0] == 1 and w[-1] > 1 for w in widths)         # a forced run and single tokens, one step
    assert loop.live_stats == {"joined": len(rows), "fallbacks": 0}
    generated = sum(len(r.tokens) for r in rows)
    # the prompts' prefill plus each generated token once (forced ones included), never a re-run
    assert lm.stats["model_tokens"] - tokens <= sum(len(r.prompt) for r in rows) + generated
    # prefill rounds, then per step one call (two on MLX when some row feeds several tokens)
    assert lm.stats["forward_calls"] - calls <= 4 + 2 * loop.steps


def test_rows_joining_a_running_loop_sample_what_they_would_alone(lm, monkeypatch: pytest.MonkeyPatch) -> None:
    reqs = _requests("join")
    monkeypatch.setattr(lm, "live_decoding", False)
    want = _outputs(generate_batch(lm, reqs))
    monkeypatch.setattr(lm, "live_decoding", True)
    rows = _rows(lm, reqs)
    loop = _run_rows(lm, rows, join_after=2, at_steps=3)      # two samples start, the others join at step 3
    assert [(r.status, tuple(r.tokens), r.forced) for r in rows] == want
    assert loop.live_stats == {"joined": len(rows), "fallbacks": 0}
    # and when the first rows are already gone as the others join
    # and when the row that started the loop leaves while the joined ones go on
    rows = _rows(lm, reqs[4:] + reqs[:4])
    _run_rows(lm, rows, join_after=1, at_steps=3)
    assert [(r.status, tuple(r.tokens), r.forced) for r in rows] == want[-1:] + want[:-1]


def test_a_failing_row_fails_alone_and_the_others_go_on(lm, monkeypatch: pytest.MonkeyPatch) -> None:
    reqs = _requests("poison")
    monkeypatch.setattr(lm, "live_decoding", False)
    want = _outputs(generate_batch(lm, reqs[:2]))
    monkeypatch.setattr(lm, "live_decoding", True)
    poison = lm.tokenizer.encode(" POISON", add_special_tokens=False)
    real = lm._forward

    def forward(jobs):                          # the model call fails on any batch holding the poisoned prompt
        if any(tuple(poison) == j.tokens[-len(poison):] for j in jobs):
            raise RuntimeError("device lost")
        return real(jobs)

    monkeypatch.setattr(lm, "_forward", forward)
    bad = _rows(lm, [GenerationRequest([*poison], regex="[ab]{3}", seed=0)])
    good = _rows(lm, reqs[:2])
    loop = _run_rows(lm, good[:2] + bad + good[2:], join_after=2, at_steps=2)   # the poisoned row joins mid-run
    assert bad[0].status == "error" and "device lost" in bad[0].error
    assert [(r.status, tuple(r.tokens), r.forced) for r in good] == want
    assert loop.live_stats["fallbacks"] == 1    # its join failed once; the others rejoined from the trie


def test_a_failed_live_step_falls_back_and_changes_nothing(lm, monkeypatch: pytest.MonkeyPatch) -> None:
    reqs = _requests("recover")
    monkeypatch.setattr(lm, "live_decoding", False)
    want = _outputs(generate_batch(lm, reqs))
    monkeypatch.setattr(lm, "live_decoding", True)
    real, calls = lm._live_feed, []

    def feed(live, feeds):                      # the third live step fails, the others run
        calls.append(len(feeds))
        if len(calls) == 3:
            raise RuntimeError("transient")
        return real(live, feeds)

    monkeypatch.setattr(lm, "_live_feed", feed)
    rows = _rows(lm, reqs)
    loop = _run_rows(lm, rows)
    assert [(r.status, tuple(r.tokens), r.forced) for r in rows] == want
    assert loop.live_stats["fallbacks"] == 1 and len(calls) > 3
    assert len(rows) < loop.live_stats["joined"] <= 2 * len(rows)   # the rows still running rejoined


def test_the_mlx_and_torch_live_loops_agree() -> None:
    reqs = _requests("agree")
    mlx, hf = (_outputs(generate_batch(async_lm(VOCAB, kind), reqs)) for kind in ("mlx", "hf"))
    same = sum(a == b for a, b in zip(mlx, hf))
    assert same >= len(mlx) - 1, (same, len(mlx))   # float32 kernels differ: a rare near-tie may flip


def test_the_longest_row_leaving_frees_its_padding(lm, monkeypatch: pytest.MonkeyPatch) -> None:
    """The short rows were left-padded to the long prompt; once it ends, the batch drops those columns."""
    reqs = [GenerationRequest("A long prompt: " + "lorem ipsum dolor sit amet " * 8, regex="[a-z]{3}", seed=5),
            GenerationRequest("Short:", regex="[0-9]{8,12}", max_tokens=14, seed=6, n=2)]
    monkeypatch.setattr(lm, "live_decoding", False)
    want = _outputs(generate_batch(lm, reqs))
    monkeypatch.setattr(lm, "live_decoding", True)
    dropped = lm.stats["live_columns_dropped"]
    assert _outputs(generate_batch(lm, reqs)) == want
    assert len(want[0][1]) < len(want[1][1])                      # the long row did end first
    if lm.backend_name == "hf":                                   # (MLX: mlx-lm's `BatchKVCache.filter` does it)
        assert lm.stats["live_columns_dropped"] - dropped >= 40


def test_a_cancelled_request_leaves_the_live_batch_and_the_others_go_on(lm, monkeypatch: pytest.MonkeyPatch) -> None:
    reqs = _requests("cancel")
    monkeypatch.setattr(lm, "live_decoding", False)
    want = _outputs(generate_batch(lm, reqs[:2]))
    monkeypatch.setattr(lm, "live_decoding", True)
    keep, gone = _rows(lm, reqs[:2]), _rows(lm, reqs[2:4])

    async def go() -> DecodeLoop:
        loop = DecodeLoop(lm)
        doomed = asyncio.ensure_future(loop.run(gone))
        kept = asyncio.ensure_future(loop.run(keep))
        while loop.steps < 3:
            await asyncio.sleep(0)
        doomed.cancel()                          # its rows leave at the next step
        await kept
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return loop

    loop = asyncio.run(go())
    assert all(r.status == "error" and r.error == "cancelled" for r in gone)
    assert [(r.status, tuple(r.tokens), r.forced) for r in keep] == want
    assert loop.live_stats == {"joined": len(keep) + len(gone), "fallbacks": 0}


def test_finished_rows_leave_their_kv_in_the_trie(lm) -> None:
    """A server's next turn extends a finished row: it runs only its new tokens, on the row's own KV."""
    import numpy as np

    from constrained.generate import generate
    from tests.tiny_lms import hf_model, hf_tokenizer, mlx_model

    [gen] = generate(lm, "Next turn:", regex="[a-z]{4,8}", seed=9, max_tokens=10)
    seq = tuple(lm.tokenizer.encode("Next turn:")) + tuple(gen.token_ids)
    chain = lm._submit(lm.trie.longest_kv, seq).result()   # on the worker: after the rows' last store
    assert chain and chain[-1].end >= len(seq) - 1      # all it fed (its last token may not have been)
    turn = seq + tuple(lm.tokenizer.encode(" and then", add_special_tokens=False))
    before = lm.stats["model_tokens"]
    got = lm.next_token_logprobs_sync(turn)
    assert lm.stats["model_tokens"] - before == len(turn) - chain[-1].end
    if lm.backend_name == "hf":
        from backends.hf import HFLM as cls
        model = hf_model(VOCAB)
    else:
        from backends.mlx import MLXLM as cls
        model = mlx_model(VOCAB)
    with cls(model, hf_tokenizer(VOCAB), cache_size=0) as fresh:
        want = fresh.next_token_logprobs_sync(turn)
    assert np.abs(got - want).max() < 5e-5
