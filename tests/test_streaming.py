"""Streaming: `TextStream` deltas, `constrained.stream` / `astream`, and the shared `DecodeLoop`."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import constrained
from constrained.decoding import DecodeLoop
from constrained.generate import GenerationRequest
from constrained.streaming import RequestStream
from constrained.text_stream import TextStream
from constrained.vocab import Vocabulary

# ---------------------------------------------------------------------------- TextStream

EURO = "€".encode()                    # 3 bytes: split over tokens below
TOKENS = [b"ab", b"\n", EURO[:2], EURO[2:], b"cd", b"\xff", b"END", None]
VOCAB = Vocabulary.from_token_bytes(TOKENS, eos_token_ids=[7])


@pytest.mark.parametrize(("ids", "stop", "deltas", "text", "stopped"), [
    ([0, 2, 3, 4], (), ["ab", "", "€", "cd"], "ab€cd", None),                # no half character is released
    ([0, 1, 1, 4], ("\n\n",), ["ab", "", "", ""], "ab", "\n\n"),             # a stop spanning two tokens
    ([0, 1, 4, 1], ("\n\n",), ["ab", "", "\ncd", ""], "ab\ncd\n", None),     # held back, then released
    ([4, 6, 0], ("END", "b"), ["cd", "", ""], "cd", "END"),                   # the earliest stop wins
    ([0, 5, 4], (), ["ab", "\ufffd", "cd"], "ab\ufffdcd", None),              # invalid bytes as U+FFFD
    ([0, 2], (), ["ab", ""], "ab\ufffd", None),                                # a cut character, flushed at the end
])
def test_text_stream_deltas(ids: list[int], stop: tuple[str, ...], deltas: list[str], text: str,
                            stopped: str | None) -> None:
    s = TextStream(VOCAB, stop)
    got = [s.feed(ids[: i + 1]) for i in range(len(ids))]
    tail = s.finish()
    assert got == deltas
    assert "".join(got) + tail == s.text == text
    assert s.stopped == stopped


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, 6), max_size=12), stop=st.lists(st.sampled_from(["\n", "b\n", "€c", "dE", "zz"]),
                                                                    max_size=2))
def test_text_stream_is_the_text_cut_at_the_first_stop(ids: list[int], stop: list[str]) -> None:
    s = TextStream(VOCAB, stop)
    pieces = [s.feed(ids[: i + 1]) for i in range(len(ids))] + [s.finish()]
    whole = VOCAB.decode(ids).decode("utf-8", errors="replace")
    cuts = [i for i in (whole.find(x) for x in stop) if i >= 0]
    # a stop found in the decoded prefix is found by the stream, at the same place
    expected = whole[: min(cuts)] if cuts else whole
    assert "".join(pieces) == s.text == expected


# ---------------------------------------------------------------------------- stream / astream on real models

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"], "additionalProperties": False}


def _lm(backend: str):
    pytest.importorskip("mlx_lm" if backend == "mlx" else "transformers")
    from tests.tiny_lms import async_lm

    return async_lm("llama-spm", backend)


@pytest.mark.parametrize("backend", ["mlx", "hf"])
def test_stream_yields_deltas_then_the_generation(backend: str) -> None:
    lm = _lm(backend)
    *pieces, gen = constrained.stream(lm, "A person:", schema=PERSON, seed=3, max_tokens=60)
    assert all(isinstance(p, str) and p for p in pieces) and len(pieces) > 3
    assert gen.status == "complete" and "".join(pieces) == gen.text
    assert json.loads(gen.text) == gen.value
    (same,) = constrained.generate(lm, "A person:", schema=PERSON, seed=3, max_tokens=60)
    assert (same.text, same.token_ids, same.status) == (gen.text, gen.token_ids, gen.status)
    assert gen.usage == {"prompt_tokens": gen.prompt_tokens, "completion_tokens": len(gen.token_ids),
                         "total_tokens": gen.prompt_tokens + len(gen.token_ids)}


def test_stream_max_tokens_and_stop() -> None:
    lm = _lm("mlx")
    *pieces, cut = constrained.stream(lm, "Once", seed=5, max_tokens=9)
    assert cut.status == "max_tokens" and cut.value is None and len(cut.token_ids) == 9
    stop = cut.text[len(cut.text) // 2]
    *pieces, stopped = constrained.stream(lm, "Once", seed=5, max_tokens=9, stop=[stop])
    assert stopped.status == "complete" and stopped.stop_sequence == stop
    assert "".join(pieces) == stopped.text == cut.text[: cut.text.index(stop)]


# ---------------------------------------------------------------------------- stop sequences with a constraint

LIST = r"[a-c]{2,4}(;[a-c]{2,4}){0,2}"


@pytest.mark.parametrize("stop", [";", "a", ["b", "zz"], ";a"])
def test_stop_with_a_regex_cuts_the_text_and_never_passes_it_off_as_complete(stop: str | list[str]) -> None:
    lm = _lm("mlx")
    free = constrained.generate(lm, "List:", regex=LIST, n=8, seed=0, max_tokens=20)
    cut = constrained.generate(lm, "List:", regex=LIST, n=8, seed=0, max_tokens=20, stop=stop)
    stops = [stop] if isinstance(stop, str) else stop
    for f, g in zip(free, cut):
        found = [(f.text.find(s), s) for s in stops if s in f.text]
        if not found:                         # no stop sequence in this sample: it is unchanged
            assert (g.text, g.status, g.stop_sequence) == (f.text, "complete", None)
            continue
        at, s = min(found)
        assert g.text == f.text[:at] and g.stop_sequence == s
        # the cut text is reported complete (with its value) only when it fully matches on its own
        if re.fullmatch(LIST, g.text):
            assert (g.status, g.value, g.ok) == ("complete", g.text, True)
        else:
            assert (g.status, g.value, g.ok) == ("stop", None, False)


def test_stop_with_a_regex_reports_both_outcomes() -> None:
    lm = _lm("mlx")
    statuses = {g.status for stop in ("a", "b") for g in
                constrained.generate(lm, "List:", regex=LIST, n=8, seed=0, max_tokens=20, stop=stop)}
    assert statuses == {"complete", "stop"}   # the table above saw both cases


@pytest.mark.parametrize("seed", [0, 1, 2, 4])          # seeds whose list has a second item
def test_streamed_stop_never_yields_a_character_of_the_stop_sequence(seed: int) -> None:
    lm = _lm("mlx")
    (free,) = constrained.generate(lm, "List:", regex=LIST, seed=seed, max_tokens=20)
    # the first two characters after the first ';': a stop sequence spanning sampled tokens
    stop = free.text[free.text.index(";"): free.text.index(";") + 2]
    *pieces, gen = constrained.stream(lm, "List:", regex=LIST, seed=seed, max_tokens=20, stop=[stop, ";zz"])
    assert "".join(pieces) == gen.text == free.text[: free.text.index(stop)]
    assert gen.stop_sequence == stop and gen.status == "complete" and gen.value == gen.text   # "bbba" matches


def test_stop_inside_a_json_document_is_status_stop_with_no_value() -> None:
    lm = _lm("mlx")
    (free,) = constrained.generate(lm, "A person:", schema=PERSON, seed=3, max_tokens=60)
    assert free.status == "complete"
    *pieces, gen = constrained.stream(lm, "A person:", schema=PERSON, seed=3, max_tokens=60, stop='"age"')
    assert "".join(pieces) == gen.text == free.text[: free.text.index('"age"')]
    assert (gen.status, gen.value, gen.stop_sequence) == ("stop", None, '"age"')
    with pytest.raises(json.JSONDecodeError):
        json.loads(gen.text)
    # a stop sequence the document never contains changes nothing
    (same,) = constrained.generate(lm, "A person:", schema=PERSON, seed=3, max_tokens=60, stop=["\n\n\n"])
    assert (same.text, same.status, same.value) == (free.text, "complete", free.value)


def test_astream_and_leaving_early_cancels() -> None:
    lm = _lm("mlx")

    async def first_pieces() -> tuple[list[str], int]:
        before = lm.stats["forward_calls"]
        got = []
        async for piece in constrained.astream(lm, "Tell a story:", seed=7, max_tokens=400):
            got.append(piece)
            if len(got) == 3:
                break
        await asyncio.sleep(0.2)              # a row still running would step on meanwhile
        return got, lm.stats["forward_calls"] - before

    got, calls = asyncio.run(first_pieces())
    assert len(got) == 3 and all(isinstance(p, str) for p in got)
    assert calls < 20                         # far from the 400 steps of a row left running


def test_sync_stream_break_cancels() -> None:
    lm = _lm("mlx")
    before = lm.stats["forward_calls"]
    for i, _ in enumerate(constrained.stream(lm, "Tell a story:", seed=8, max_tokens=400)):
        if i == 2:
            break
    assert lm.stats["forward_calls"] - before < 40


# ---------------------------------------------------------------------------- the shared decode loop


def _requests() -> list[GenerationRequest]:
    return [GenerationRequest("A person:", schema=PERSON, seed=1, n=2, max_tokens=60),
            GenerationRequest("Phone:", regex=r"[0-9]{3}-[0-9]{4}", seed=2, max_tokens=20),
            GenerationRequest("Story:", seed=3, max_tokens=15)]


def test_requests_in_one_loop_share_steps_and_match_running_alone() -> None:
    lm = _lm("mlx")

    async def alone() -> tuple[list[list[str]], int]:
        texts, steps = [], 0
        for r in _requests():
            loop = DecodeLoop(lm)
            texts.append([g.text for g in await RequestStream.prepare(lm, r).results(loop)])
            steps += loop.steps
        return texts, steps

    async def together() -> tuple[list[list[str]], int]:
        loop = DecodeLoop(lm)
        gens = await asyncio.gather(*(RequestStream.prepare(lm, r).results(loop) for r in _requests()))
        return [[g.text for g in gs] for gs in gens], loop.steps

    texts_alone, steps_alone = asyncio.run(alone())
    texts_together, steps_together = asyncio.run(together())
    assert texts_together == texts_alone
    assert steps_together < steps_alone       # one model call per step served every request


def test_cancelling_one_request_leaves_the_others() -> None:
    lm = _lm("mlx")
    keep = GenerationRequest("A person:", schema=PERSON, seed=1, n=2, max_tokens=60)
    (expected,) = [asyncio.run(RequestStream.prepare(lm, keep).results())]

    async def run() -> tuple[list, DecodeLoop]:
        loop = DecodeLoop(lm)
        doomed = asyncio.ensure_future(RequestStream.prepare(lm, GenerationRequest("Story:", max_tokens=500)).results(loop))
        kept = asyncio.ensure_future(RequestStream.prepare(lm, keep).results(loop))
        await asyncio.sleep(0.05)
        doomed.cancel()
        gens = await kept
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return gens, loop

    gens, loop = asyncio.run(run())
    assert [g.text for g in gens] == [g.text for g in expected]
    assert loop.rows == 0
