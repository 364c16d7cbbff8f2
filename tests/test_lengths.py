"""Lengths from logs: counting, closed-form fits that recover known parameters, the KS distance, the
empirical kind reading JSONL, and the `asyncrl lengths` command end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from asyncrl.analysis.fits.lengths import drawn_cdf, fit_all, fit_lognormal, fit_pareto, ks_distance
from asyncrl.scenarios.spec.distributions import LogNormal, Pareto
from asyncrl.scenarios.spec.loading import ScenarioError, load_scenario

from asyncrl.cli import main
from tests.lengths_data import WORDS, word_counts, write_completions
from tests.tiny_checkpoint import save_word_tokenizer


def test_lognormal_fit_recovers_its_parameters() -> None:
    counts = word_counts(20_000, seed=3, median=300, sigma=0.7, cap=100_000)
    lognormal, pareto = fit_all(counts)
    assert lognormal.parameters["median"] == pytest.approx(300, rel=0.02)
    assert lognormal.parameters["sigma"] == pytest.approx(0.7, rel=0.02)
    assert lognormal.ks < 0.02 < pareto.ks


def test_pareto_fit_recovers_its_parameters() -> None:
    truth = Pareto(kind="pareto", scale=50, alpha=1.5, max_tokens=10**7)
    counts = truth.sample(np.random.default_rng(4), 20_000)
    lognormal, pareto = fit_all(counts)
    assert pareto.parameters["scale"] == counts.min() == 50
    assert pareto.parameters["alpha"] == pytest.approx(1.5, rel=0.05)
    assert pareto.ks < 0.02 < lognormal.ks


def test_closed_form_fits_by_hand() -> None:
    # ln 10 and ln 1000: mean ln 100 → median 100, std ln 10; Pareto: 2 / (ln 1 + ln 100) = 2 / ln 100
    counts = np.array([10, 1000])
    assert fit_lognormal(counts, 1000).parameters == pytest.approx({"median": 100.0, "sigma": np.log(10)})
    assert fit_pareto(counts, 1000).parameters == pytest.approx({"scale": 10.0, "alpha": 2 / np.log(100)})


@pytest.mark.parametrize(
    "distribution",
    [
        LogNormal(kind="lognormal", median=40, sigma=1.2, max_tokens=200),  # a fifth of the mass at the cap
        Pareto(kind="pareto", scale=3, alpha=0.9, max_tokens=500),
    ],
)
def test_ks_is_small_against_the_distributions_own_draws(distribution) -> None:
    # drawn_cdf describes what the scenario draws: rounding, the floor at 1 and the cap's point mass.
    drawn = distribution.sample(np.random.default_rng(5), 50_000)
    assert ks_distance(drawn, distribution) < 0.01
    k = np.arange(1, distribution.cap + 1)
    assert drawn_cdf(distribution, k)[-1] == 1.0
    assert (drawn == distribution.cap).mean() == pytest.approx(1 - drawn_cdf(distribution, k)[-2], abs=0.01)


def test_identical_lengths_are_one_line() -> None:
    with pytest.raises(ScenarioError, match="same length"):
        fit_all(np.array([5, 5, 5]))


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> tuple[Path, np.ndarray]:
    counts = word_counts(1000, seed=0)
    return write_completions(tmp_path_factory.mktemp("log") / "completions.jsonl", counts), counts


def test_lengths_command_counts_fits_and_writes(log, tmp_path: Path, capsys) -> None:
    path, counts = log
    out = tmp_path / "lengths"
    assert main(["lengths", str(path), "--field", "output", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "counted as whitespace-separated words (no --tokenizer; not model tokens)" in printed
    assert "note: these lengths are words, not model tokens" in printed
    written = np.array([int(line) for line in (out / "lengths.txt").read_text().split()])
    assert (written == counts).all()
    fits = json.loads((out / "fits.json").read_text())
    assert [fit["kind"] for fit in fits["fits"]] == ["lognormal", "pareto"]
    assert fits["fits"][0]["median"] == pytest.approx(200, rel=0.05) and fits["unit"] == "words"
    assert (out / "lengths.png").stat().st_size > 10_000
    # each snippet printed is a completion_tokens line a scenario accepts
    snippets = [line.split("  ")[-1] for line in printed.splitlines() if "completion_tokens: {" in line]
    assert len(snippets) == 3
    for snippet in snippets:
        value = yaml.safe_load(snippet)["completion_tokens"]
        scenario = load_scenario("quickstart", [f"workload.completion_tokens={json.dumps(value)}"])
        assert scenario.workload.completion_tokens.kind == value["kind"]


def test_lengths_with_a_local_tokenizer_counts_its_tokens(log, tmp_path: Path, capsys) -> None:
    path, counts = log
    tokenizer = save_word_tokenizer(tmp_path / "tokenizer", WORDS)  # one token per word
    out = tmp_path / "out"
    assert main(["lengths", str(path), "--field", "output", "--tokenizer", str(tokenizer), "--out", str(out)]) == 0
    assert f"counted as tokens of the tokenizer at {tokenizer}" in capsys.readouterr().out
    assert [int(line) for line in (out / "lengths.txt").read_text().split()] == counts.tolist()


def test_token_counts_are_read_as_they_are_and_the_log_itself_is_a_snippet(log, tmp_path: Path, capsys) -> None:
    path, counts = log
    args = ["lengths", str(path), "--max-tokens", "4096", "--out", str(tmp_path)]
    assert main(args) == 0  # response_length is found without --field
    printed = capsys.readouterr().out
    assert "field response_length, counted as token counts as logged" in printed
    assert f"{{kind: empirical, path: {path}, field: response_length}}" in printed
    assert printed.count("max_tokens: 4096}") == 2  # the fits cap where asked
    assert [int(line) for line in (tmp_path / "lengths.txt").read_text().split()] == counts.tolist()


def test_the_empirical_kind_reads_a_jsonl_log(log) -> None:
    path, counts = log
    lengths = {"kind": "empirical", "path": str(path), "field": "response_length"}
    scenario = load_scenario("quickstart", [f"workload.completion_tokens={json.dumps(lengths)}"])
    assert scenario.workload.completion_tokens.observed.tolist() == counts.tolist()
    assert scenario.workload.completion_tokens.cap == counts.max()


@pytest.mark.parametrize(
    ("lengths", "message"),
    [
        (
            {"field": "output"},
            "workload.completion_tokens.field: completions.jsonl:output holds text; count its tokens",
        ),
        (
            {"field": "respons_length"},
            "has no 'respons_length' (its keys: input, output, response_length, score, step)",
        ),
        ({"field": "step"}, "workload.completion_tokens.field: completions.jsonl:step: every length must be ≥ 1"),
    ],
)
def test_the_empirical_kind_names_what_is_wrong_with_a_log(log, lengths, message) -> None:
    spec = {"kind": "empirical", "path": str(log[0]), **lengths}
    with pytest.raises(ScenarioError, match=None) as error:
        load_scenario("quickstart", [f"workload.completion_tokens={json.dumps(spec)}"])
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--field", "outpt"], "--field: record 1 of"),
        (
            ["--field", "output", "--tokenizer", "no-such-org/no-such-model"],
            "--tokenizer: no-such-org/no-such-model: not in the local Hugging Face cache",
        ),
        (["--field", "response_length", "--tokenizer", "x"], "--tokenizer: field 'response_length' holds token counts"),
    ],
)
def test_lengths_bad_input_is_one_line(log, tmp_path: Path, capsys, args, message) -> None:
    assert main(["lengths", str(log[0]), *args, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"asyncrl: error: {message}") and error.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_fitting_imports_no_heavy_library() -> None:
    from tests.test_imports import HEAVY, imported

    assert imported("asyncrl.analysis.fits.lengths, asyncrl.scenarios.files.jsonl", f"name in {HEAVY!r}") == "[]"
