"""Hypothesis feeds the readers arbitrary input built from the pieces their formats use: a launch script, a
printed verl config, a console metrics log and a TensorBoard event file each give a result or one line of their own
error, within a second.

(The JSONL metrics log and config.json have theirs in test_metrics_log.py and test_model_config.py.)
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from asyncrl.frameworks.common.launch_script import LaunchScriptError, read_launch_script
from asyncrl.frameworks.common.metrics_log import MetricsLogError, read_metrics_log
from asyncrl.frameworks.verl.printed import PrintedConfigError, read_printed_config
from tests.test_metrics_log import _event, _record

#: Pieces of shell a recipe script uses, and some it should not.
SHELL = st.sampled_from(
    ["X=1", "Y=${X:-2}", "Z=$((X * 10))", "A=(a b)", "python3 -m verl.trainer.main_ppo", " \\\n", "\n", "$X",
     "${Y}", "${A[@]}", "'", '"', "$((2**64))", "$(rm -rf /)", "`id`", "# c", "trainer.n_gpus_per_node=$X", " ",
     "${Q:-${R:-${S}}}", "$((X/0))", "export B=$X$X$X$X", "{", "}"]
)  # fmt: skip
#: Pieces of a pprint-ed config and of Ray's prefixes around it.
PRINTED = st.sampled_from(
    ["{'actor_rollout_ref': {", "'model': {'path': '/m',", "'trainer': {'n_gpus_per_node': 8,", "}", "},", "[",
     "]", "\n", "  ", "(TaskRunner pid=1) ", "'x': None,", "'y': 1e309,", "'z': -1,", "'w': 'a\\'b',", "\x1b[36m"]
)  # fmt: skip
#: Pieces of verl's console lines.
CONSOLE = st.sampled_from(
    ["step:1", "step:2", "step:10000000000000000000000000000", " - ", "timing_s/gen:", "timing_s/step:",
     "timing_s/update_actor:", "perf/total_num_tokens:", "1.5", "-3", "inf", "nan", "np.float64(2.0)", "1e400",
     "\n", "(TaskRunner pid=7) ", "\x1b[0m", "x"]
)  # fmt: skip


def _text(pieces: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(pieces, max_size=40).map("".join)


def _one_line_within_a_second(read, text: str, errors: tuple[type[Exception], ...]) -> None:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "input"
        path.write_text(text)
        start = time.perf_counter()
        try:
            read(path)
        except errors as error:
            assert "\n" not in str(error).strip(), str(error)
        assert time.perf_counter() - start < 5.0  # generous for a loaded machine: the bound is on size, not speed


@settings(max_examples=200, deadline=None)
@given(_text(SHELL))
def test_any_launch_script_gives_a_command_or_one_line(text: str) -> None:
    _one_line_within_a_second(lambda path: read_launch_script(path, ("python3 -m verl",)), text, (LaunchScriptError,))


@settings(max_examples=200, deadline=None)
@given(_text(PRINTED))
@example("{'actor_rollout_ref': {{'actor_rollout_ref': {\n{'actor_rollout_ref': {")  # a set of dicts: was a TypeError
def test_any_printed_config_gives_a_config_or_one_line(text: str) -> None:
    _one_line_within_a_second(read_printed_config, text, (PrintedConfigError,))


@settings(max_examples=200, deadline=None)
@given(_text(CONSOLE))
def test_any_console_log_gives_steps_or_one_line(text: str) -> None:
    _one_line_within_a_second(read_metrics_log, text, (MetricsLogError,))


def _real_event(step: int) -> bytes:
    return _event(step, "timing_s/gen", simple=1.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=64).map(_record) | st.integers(0, 2**40).map(_real_event), max_size=8))
def test_any_tensorboard_file_gives_steps_or_one_line(payloads: list[bytes]) -> None:
    # Records framed with valid CRCs around arbitrary bytes, so the protobuf parser sees them, between real events.
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "events.out.tfevents.1.host"
        path.write_bytes(b"".join(payloads))
        _one_line_within_a_second(lambda _: read_metrics_log(path), "", (MetricsLogError,))
