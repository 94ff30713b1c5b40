"""The `constrained generate` command: the tiny-model main job, batch JSONL mode, one-line errors."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from constrained.cli import main

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(["generate", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_default_tiny_model_prints_valid_samples_and_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = _run(capsys, "--schema", json.dumps(PERSON), "--prompt", "A person:", "-n", "3",
                            "--seed", "0", "--whitespace", "compact", "--max-tokens", "64")
    assert "RANDOM" in err and "meaningless" in err  # says plainly the content means nothing
    summary = err.strip().splitlines()[-1]
    assert re.search(r"tok/s\); compile [0-9.]+ ms; model load [0-9.]+ s; cache hits: kv \d+, logprobs \d+", summary)
    notes = [e for e in err.splitlines() if e.startswith("constrained: sample")]
    cut = {int(e.split()[2].rstrip(":")) for e in notes}
    assert len(lines) == 3 and len(cut) <= 1 and code == (0 if not notes else 1)   # every text printed, as is
    for i, line in enumerate(lines):
        if i not in cut:
            jsonschema.validate(json.loads(line), PERSON)
    code, lines, _ = _run(capsys, "--schema", json.dumps(PERSON), "--prompt", "A person:", "-n", "3",
                          "--seed", "0", "--whitespace", "compact", "--max-tokens", "64", "--json")
    records = [json.loads(line) for line in lines]
    assert [r["sample"] for r in records] == [0, 1, 2] and all(
        r["status"] != "complete" or jsonschema.validate(r["value"], PERSON) is None and json.loads(r["text"]) == r["value"]
        for r in records)


def test_any_order_lets_members_come_in_any_order(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("--schema", json.dumps(PERSON), "--prompt", "A person:", "-n", "8", "--seed", "0",
            "--whitespace", "compact", "--max-tokens", "64")
    _, declared, _ = _run(capsys, *argv)
    code, lines, _ = _run(capsys, *argv, "--any-order")
    assert code == 0 and len(lines) == 8
    for line in lines:
        jsonschema.validate(json.loads(line), PERSON)
    firsts = {next(iter(json.loads(line))) for line in lines}
    assert firsts == {"name", "age"}                    # the random model opens with either member
    assert {next(iter(json.loads(line))) for line in declared} == {"name"}


def test_regex_and_schema_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, lines, _ = _run(capsys, "--regex", "[0-9]{3}-[0-9]{4}", "--prompt", "Phone:", "-n", "2", "--seed", "1")
    assert code == 0 and len(lines) == 2 and all(re.fullmatch("[0-9]{3}-[0-9]{4}", s) for s in lines)
    schema_file = tmp_path / "color.json"
    schema_file.write_text(json.dumps({"enum": ["red", "green"]}))
    code, lines, _ = _run(capsys, "--schema", str(schema_file), "--prompt", "Color:", "--temperature", "0")
    assert code == 0 and json.loads(lines[0]) in ("red", "green")


def test_ascii_makes_regex_classes_ascii_only(capsys: pytest.CaptureFixture[str], vocabulary) -> None:
    """`\\d` is Unicode by default (as in `re`), ASCII with --ascii / ascii=True."""
    from constrained.compile import compile_regex

    vocab = vocabulary("llama-bpe")
    wide = [i for i, b in enumerate(vocab.token_bytes) if b in ("３".encode(), "١".encode())]
    assert wide and all(w in compile_regex(r"\d{3}", vocab).guide().allowed_token_ids() for w in wide)
    assert not set(wide) & set(compile_regex(r"\d{3}", vocab, ascii=True).guide().allowed_token_ids().tolist())
    code, lines, _ = _run(capsys, "--regex", r"\d{3}-\d{4}", "--ascii", "--prompt", "Phone:", "-n", "4", "--seed", "1")
    assert code == 0 and len(lines) == 4 and all(re.fullmatch(r"\d{3}-\d{4}", s, re.ASCII) for s in lines), lines


def test_max_states_is_settable_and_a_budget_error_ends_only_that_sample(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = _run(capsys, "--regex", "[a-z]{0,1000}", "--prompt", "x", "-n", "2", "--seed", "0",
                            "--max-tokens", "40", "--max-states", "12")
    notes = [e for e in err.splitlines() if e.startswith("constrained: sample")]
    assert code == 1 and len(lines) == 2 and len(notes) == 2
    assert all("StateBudgetError" in e and "more than 12 states (growing at regex '[a-z]{0,1000}')" in e
               for e in notes)
    code, lines, err = _run(capsys, "--regex", "[a-z]{0,1000}", "--prompt", "x", "-n", "2", "--seed", "0",
                            "--max-tokens", "40")                         # the default budget is ample
    assert "StateBudgetError" not in err and all(re.fullmatch("[a-z]{0,1000}", s) for s in lines)


def test_batch_mode_jsonl(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [
        {"prompt": "Person:", "schema": PERSON, "n": 2},
        {"prompt": "Yes or no?", "regex": "(yes|no)"},
        {"prompt": "Default constraint"},  # takes --regex from the command line
    ]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    code = main(["generate", "--input", str(src), "--output", str(dst), "--regex", "[ab]{2}", "--seed", "3",
                 "--whitespace", "compact", "--max-tokens", "64"])
    _, err = capsys.readouterr()
    out = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [len(o["samples"]) for o in out] == [2, 1, 1] and [o["prompt"] for o in out] == [r["prompt"] for r in rows]
    for s in out[0]["samples"]:
        assert s["status"] == "max_tokens" or jsonschema.validate(s["value"], PERSON) is None
    assert out[1]["samples"][0]["value"] in ("yes", "no")
    assert re.fullmatch("[ab]{2}", out[2]["samples"][0]["text"])
    assert "samples (" in err and code in (0, 1)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--schema", "/no/such.json", "--prompt", "x"], "--schema: no such file: /no/such.json"),
        (["--schema", "{bad", "--prompt", "x"], "--schema: inline schema is not valid JSON"),
        (["--schema", '{"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}}',
          "--prompt", "x"], "`uniqueItems` is not supported at $.properties.tags"),
        (["--schema", '{"type": "string", "maxLength": -1}', "--prompt", "x"], "maxLength"),
        (["--regex", "(ab", "--prompt", "x"], "--regex: bad regex '(ab'"),
        (["--regex", "a", "--prompt", "x", "-n", "0"], "`n` must be a positive integer, got 0"),
        (["--regex", "a", "--prompt", "x", "--max-tokens", "abc"], "invalid int value: 'abc'"),
        (["--regex", "a", "--prompt", "x", "--top-p", "2"], "`top_p` must be in (0, 1], got 2.0"),
        (["--regex", "a", "--prompt", "x", "--temperature", "-1"], "`temperature` must be a finite number >= 0"),
        (["--regex", "a", "--prompt", "x", "--model", "/no/model"], "--model: no such model directory: /no/model"),
        (["--regex", "a"], "give --prompt TEXT"),
        (["--schema", '{"type": "integer", "minimum": 3, "maximum": 1}', "--prompt", "x"],
         "--schema: this JSON schema matches nothing: no JSON value satisfies it (subschemas matching nothing: $)"),
        (["--regex", "a$b", "--prompt", "x"], "--regex: this regex matches nothing"),
        (["--regex", "a", "--prompt", "caf\udce9"], "--prompt is not valid text: byte 0xe9 at character 3"),
        (["--input", "/no/in.jsonl"], "--input: no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, lines, err = _run(capsys, *argv)
    assert code == 2 and not lines
    assert err.count("\n") == 1 and err.startswith("constrained: error: ") and message in err, err


@pytest.mark.parametrize(("argv", "message"), [
    (["--backend", "hf", "--vllm-args", "{}"], "--vllm-args goes with --backend vllm"),
    (["--backend", "vllm", "--vllm-args", "[1]"], "--vllm-args must be a JSON object"),
    (["--backend", "vllm", "--vllm-args", '{"model": "x"}'], "give the model with --model"),
    (["--backend", "vllm", "--model", "/no/model"], "--model: no such model directory: /no/model"),
])
def test_generate_vllm_flags_are_checked_before_any_model_loads(capsys: pytest.CaptureFixture[str],
                                                                argv: list[str], message: str) -> None:
    code, lines, err = _run(capsys, "--regex", "a", "--prompt", "x", *argv)
    assert code == 2 and not lines and message in err, err


def test_generate_vllm_without_vllm_names_the_install(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here (tests/vllm runs generate on it)")
    code, lines, err = _run(capsys, "--regex", "a", "--prompt", "x", "--backend", "vllm")
    assert code == 2 and not lines and "pip install 'constrained[vllm]'" in err, err


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "in.jsonl:1: not valid JSON"),
        ('{"prompt": "x", "n": "3"}', "in.jsonl:1: `n` must be a positive integer, got '3'"),
        ('{"prompt": "x", "regex": "[", "schema": {}}', "either \"schema\" or \"regex\""),
        ('{"prompt": "x", "schema": {"type": "array", "uniqueItems": true}}', "in.jsonl:1: `uniqueItems`"),
        ('{"prompt": "x", "temprature": 1}', "unknown key(s) ['temprature']"),
        ('["x"]', "each line must be an object with a string \"prompt\""),
        ('{"prompt": "a\\ud800b"}', "in.jsonl:1: \"prompt\" is not valid text: lone surrogate U+D800 at character 1"),
    ],
)
def test_bad_jsonl_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, line: str, message: str) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(line + "\n")
    code, _, err = _run(capsys, "--input", str(src), "--fail-fast")
    assert code == 2 and err.count("\n") == 1 and message in err, err
    code, out, err = _run(capsys, "--input", str(src))          # alone, it is an error row; no model is loaded
    assert code == 1 and message in err and "RANDOM" not in err
    row = json.loads(out[0])
    assert row["line"] == 1 and row["samples"] == [] and message in row["error"]


def test_files_that_are_not_utf8_are_named_with_the_offset(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    latin1 = tmp_path / "schema.json"
    latin1.write_bytes('{"enum": ["café"]}'.encode("latin-1"))
    code, _, err = _run(capsys, "--schema", str(latin1), "--prompt", "x")
    assert code == 2 and err.count("\n") == 1
    assert f"--schema: {latin1} is not UTF-8: byte 0xe9 at offset 14 (line 1)" in err
    batch = tmp_path / "in.jsonl"
    batch.write_bytes(b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n')
    code, _, err = _run(capsys, "--input", str(batch))
    assert code == 2 and f"--input: {batch} is not UTF-8: byte 0xe9 at offset 31 (line 2)" in err


def test_model_dirs_are_checked_before_loading(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _run(capsys, "--regex", "a", "--prompt", "x", "--model", str(tmp_path))
    assert code == 2 and f"--model: {tmp_path} has no config.json: point --model at a model directory" in err
    code, _, err = _run(capsys, "--regex", "a", "--prompt", "x", "--chat")      # the tiny model has no template
    assert code == 2 and err.startswith("constrained: error: --chat: the tiny model has no chat template")
    assert "RANDOM" not in err                                                  # said before any model load


def test_unwritable_output_is_refused_before_any_work(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt": "a", "regex": "[ab]"}) + "\n")
    code, _, err = _run(capsys, "--input", str(src), "--output", str(tmp_path / "no" / "such" / "out.jsonl"))
    assert code == 2 and "--output: cannot write beside" in err and "RANDOM" not in err
    code, _, err = _run(capsys, "--input", str(src), "--output", str(tmp_path))
    assert code == 2 and f"--output: {tmp_path} is a directory" in err


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_keeps_every_finished_row(tmp_path: Path, sig: int, code: int) -> None:
    """A real batch run, interrupted once some rows are written: those rows are in the output file."""
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    quick = [{"prompt": f"q{i}", "regex": "(yes|no)"} for i in range(4)]
    slow = [{"prompt": f"s{i}", "regex": "[a-z ]{0,2000}", "max_tokens": 2000} for i in range(12)]
    src.write_text("".join(json.dumps(r) + "\n" for r in quick + slow))
    proc = subprocess.Popen([sys.executable, "-m", "constrained", "generate", "--input", str(src), "--output", str(dst),
                             "--seed", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        partial = list(tmp_path.glob(".out.jsonl.*.partial"))
        if partial and partial[0].read_text().count("\n") >= 4:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the batch ended before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    rows = [json.loads(line) for line in dst.read_text().splitlines()]
    assert proc.returncode == code, err
    assert 4 <= len(rows) < 16 and f"interrupted: {len(rows)} of 16 rows written to {dst}" in err
    assert {r["line"] for r in rows} >= {1, 2, 3, 4} and all(r["samples"][0]["value"] in ("yes", "no")
                                                               for r in rows if r["line"] <= 4)
    assert not list(tmp_path.glob("*.partial"))


def test_closed_stdout_is_not_a_traceback() -> None:
    proc = subprocess.run(f"{sys.executable} -m constrained generate --regex a --prompt x >&-", shell=True,
                          capture_output=False, stderr=subprocess.PIPE, text=True, timeout=240)
    assert proc.returncode == 2 and proc.stderr == ("constrained: error: stdout is closed: the samples would be lost; "
                                                    "redirect it, or use --input with --output\n"), proc.stderr


def test_ignored_keywords_are_noted_once_and_vendor_ones_only_with_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    schema = json.dumps({"enum": ["a", "b"], "maxLenght": 3, "x-kubernetes-group": "apps"})
    code, lines, err = _run(capsys, "--schema", schema, "--prompt", "x", "--seed", "0")
    notes = [e for e in err.splitlines() if "keyword" in e]
    assert code == 0 and json.loads(lines[0]) in ("a", "b") and "Warning" not in err
    assert notes == ["constrained: note: --schema: unknown keyword `maxLenght` at $ is ignored "
                     "(did you mean `maxLength`?)"]
    _, _, err = _run(capsys, "--schema", schema, "--prompt", "x", "--seed", "0", "--verbose")
    assert sum("keyword" in e for e in err.splitlines()) == 2 and "vendor keyword `x-kubernetes-group` at $" in err


def test_prompt_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Answer yes or no: is the sky blue?\n")
    code, lines, _ = _run(capsys, "--regex", "(yes|no)", "--prompt-file", str(prompt), "--seed", "0")
    assert code == 0 and lines[0] in ("yes", "no")
    code, lines, err = _run(capsys, "--regex", "(yes|no)", "--prompt", f"@{prompt}", "--seed", "0")
    assert code == 0 and "the prompt is the text '@" in err and "use --prompt-file" in err
    code, _, err = _run(capsys, "--regex", "a", "--prompt-file", str(tmp_path / "missing.txt"))
    assert code == 2 and "--prompt-file: no such file" in err


def test_bad_lines_do_not_stop_the_good_ones(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Unsupported, unsatisfiable and malformed lines get error rows; every good line is generated, in order."""
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [json.dumps({"prompt": "a", "regex": "[ab]{2}"}),
             json.dumps({"prompt": "b", "schema": {"type": "array", "uniqueItems": True}}),
             "{not json",
             json.dumps({"prompt": "c", "schema": {"type": "integer", "minimum": 3, "maximum": 1}}),
             json.dumps({"prompt": "d", "regex": "(yes|no)"})]
    src.write_text("\n".join(lines) + "\n")
    code = main(["generate", "--input", str(src), "--output", str(dst), "--seed", "3", "--max-tokens", "16"])
    _, err = capsys.readouterr()
    rows = [json.loads(line) for line in dst.read_text().splitlines()]
    assert code == 1 and [r["line"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["prompt"] for r in rows] == ["a", "b", None, "c", "d"]
    assert re.fullmatch("[ab]{2}", rows[0]["samples"][0]["text"]) and rows[4]["samples"][0]["value"] in ("yes", "no")
    assert "`uniqueItems`" in rows[1]["error"] and "not valid JSON" in rows[2]["error"]
    assert all(not rows[i]["samples"] for i in (1, 2, 3)) and err.count("constrained: error:") == 3
    assert "this JSON schema matches nothing" in rows[3]["error"]          # found before the model loads


def test_version_and_help_show_defaults() -> None:
    import constrained

    proc = subprocess.run([sys.executable, "-m", "constrained", "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert proc.stdout.strip().startswith(f"constrained {constrained.__version__} (schema compiler:")
    proc = subprocess.run([sys.executable, "-m", "constrained", "generate", "--help"], capture_output=True, text=True,
                          timeout=120)
    for flag, default in [("-n N", "1"), ("--max-tokens", "256"), ("--temperature", "1.0"), ("--top-p", "1.0")]:
        block = proc.stdout[proc.stdout.index(f"  {flag}"):].split("\n  -")[0]
        assert f"(default: {default}" in " ".join(block.split()), block


def test_module_entry_point_reports_errors_without_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "constrained", "generate", "--regex", "a(?<=b)", "--prompt", "x"],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[1])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("constrained: error: --regex: bad regex") and proc.stderr.count("\n") == 1


def test_module_entry_point_flushes_output_and_exits_with_the_status() -> None:
    """`run()` leaves with os._exit after flushing: piped output is complete, the status is main's."""
    proc = subprocess.run([sys.executable, "-m", "constrained", "generate", "--regex", "(yes|no)", "--prompt", "Ok?",
                           "-n", "3", "--seed", "0"], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).parents[1])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() and all(line in ("yes", "no") for line in proc.stdout.splitlines())
    assert "3 samples (3 complete)" in proc.stderr


def test_bench_subcommand_delegates_to_the_bench_suites(capsys: pytest.CaptureFixture[str]) -> None:
    # `corpus` checks every label of bench/corpus against jsonschema: the cheapest real suite
    assert main(["bench", "corpus"]) == 0
    out = capsys.readouterr()
    lines = [json.loads(line) for line in out.out.splitlines() if line.startswith("{")]
    assert lines and lines[0]["suite"] == "corpus" and lines[0]["schemas"] >= 80
    assert "every label checked" in out.out + out.err
    assert main(["bench", "no-such-suite"]) != 0
