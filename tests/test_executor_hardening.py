"""The executor under careless use: checkpoints that are not summaries, bad resumes, user task code, the store's port."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from asyncrl.executor.processes.runtime import check, execute
from asyncrl.scenarios.spec.loading import load_scenario

from asyncrl.cli import main

FAST = ["workload.completion_tokens.max_tokens=48", "workload.prompts_per_step=2"]


def one_error(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("asyncrl: error: "), err
    return lines[0]


@pytest.mark.slow
def test_checkpoints_go_to_progress_and_a_resumed_run_says_so(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    scenario = load_scenario("cpu-timing", [*FAST, "run.steps=4", "run.checkpoint_every=2"])
    seen: dict[str, bool] = {}

    def stop_after_step_2(step: int, row: dict) -> None:
        if step == 1:  # the checkpoint at step 2 is written: a run going on has progress, no summary
            seen["summary"] = (out / "summary.json").exists()
            seen["progress"] = json.loads((out / "checkpoint" / "progress.json").read_text())["status"] == "checkpoint"
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute(scenario, out, on_step=stop_after_step_2)
    assert seen == {"summary": False, "progress": True}
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"

    args = ["execute", "cpu-timing", *[a for o in [*FAST, "run.steps=4"] for a in ("--set", o)], "--quiet"]
    assert main([*args, "--resume", str(out)]) == 0
    assert f"resumed from the checkpoint at step 2 in {out}/" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["resumed_from"], summary["steps"]) == ("complete", 2, 4)

    optimizer = out / "checkpoint" / "learner" / "optimizer.pt"
    optimizer.write_bytes(b"not a checkpoint")
    assert main([*args, "--resume", str(out)]) == 2
    assert f"--resume: {optimizer} cannot be loaded" in one_error(capsys.readouterr().err)
    assert json.loads((out / "summary.json").read_text())["status"] == "complete"  # left as it was


def test_task_code_runs_only_when_the_run_starts(tmp_path: Path, capsys, monkeypatch) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "hostile_task_module.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path
            Path({str(marker)!r}).write_text("imported")

            def make():
                raise RuntimeError("boom")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hostile_task_module", raising=False)
    override = "workload.task=hostile_task_module:make"
    check(load_scenario("cpu-timing", [override]), "cpu")  # validating the scenario imports nothing
    assert not marker.exists()

    out = tmp_path / "run"
    assert main(["execute", "cpu-timing", "--set", override, "--out", str(out), "--quiet"]) == 2
    error = one_error(capsys.readouterr().err)
    assert "workload.task: 'hostile_task_module:make' raised RuntimeError: boom" in error
    assert marker.exists() and not out.exists()


def listening_addresses(port: int) -> set[str]:
    """Local addresses of sockets listening on ``port`` (from /proc/net/tcp and tcp6, hex as the kernel writes)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the kernel's socket table")
def test_the_learners_store_listens_on_the_rendezvous_address_only() -> None:
    from asyncrl.executor.processes import distributed

    address = distributed.rendezvous_address("127.0.0.1")
    port = int(address.rpartition(":")[2])
    store = distributed._store(address, distributed._LISTENERS.pop(address), world_size=1)
    try:
        store.set("probe", "1")
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, not 0.0.0.0 or ::
    finally:
        del store
