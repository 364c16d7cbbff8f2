"""The README and the docs pages tell the truth: their shown commands, run, print what the blocks show.

A shown command is a fenced block whose first line starts with ``$ ``; a block holds one or more
commands, each followed by what it printed (up to the next ``$ `` line or the block's end). Each
block runs in a temporary working directory in which ``tests/`` and ``benchmarks/`` are links to the
repository's (so paths such as ``tests/data/...`` and ``runs/...`` mean what they mean in the docs),
its commands in order, and every command's output must equal the block's:

* ``asyncrl ...`` runs in process (``asyncrl.cli.main``), ``python ...`` as a subprocess, ``head -1 F``
  reads the first line of F;
* normalised are only what legitimately varies: trailing whitespace, the temporary directory in paths,
  timing figures (``in 0.4 s``), and the memory this machine has free (``--steps 10000000``'s refusal);
* a line ``...`` (or ``…``) in a block elides lines: what is around it must match, in order;
* an input a command reads that no earlier command of its block writes is made first, by the command
  the docs say makes it (``PREREQUISITES``), and files the docs show but do not say how they came about
  are written here (``FILES``);
* commands that run real executions, or benchmarks that take long or print timings, are not run
  (``SKIPPED``, each with its reason): their block is reported as skipped.

The numbers the simulator computes are seeded, so they must match exactly.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from asyncrl.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

# What the parser found (README.md and docs/*.md, 33 blocks of 50 commands, 16 blocks run): a parser
# that silently finds nothing, or a page that lost its examples, fails test_the_docs_show_commands.
MIN_BLOCKS, MIN_BLOCKS_RUN = 33, 16

# Commands not run, by prefix (after `.venv/bin/` is dropped from the program), and why.
SKIPPED: tuple[tuple[str, str], ...] = (
    ("asyncrl demo", "real executions: calibrates, executes and compares three scenarios (about 5½ minutes)"),
    ("asyncrl execute", "a real execution with torch (its figures are this machine's timings)"),
    ("asyncrl validate", "real executions of random scenarios"),
    ("asyncrl study", "real executions: a grid of training runs (minutes to hours)"),
    ("asyncrl calibrate cpu-timing", "executes short runs of the scenario on this machine (no --from-log)"),
    ("asyncrl compare runs/demo/", "compares the run directories that `asyncrl demo` writes"),
    ("asyncrl speedup cpu-study", "reads the profile and penalty `asyncrl study` writes (runs/study-sort5/)"),
    ("python -m tests.tiny_checkpoint", "writes the checkpoint for an `asyncrl execute` in the same block"),
    ("python benchmarks/published.py --steps", "simulates every published case (minutes)"),
    ("python benchmarks/simulator_memory.py", "a benchmark: peak memory of large simulations, machine-dependent"),
    ("python benchmarks/simulator_throughput.py", "a benchmark: rollouts per second, this machine's speed"),
    ("python benchmarks/early_stopping.py", "a benchmark: plans per second over 128 plans, this machine's speed"),
    ("python benchmarks/sizing_scale.py", "a benchmark: plans per CPU-minute by device count, this machine's speed"),
    ("python benchmarks/failure_whatif.py", "real executions: calibrates and executes cpu-pareto twice (minutes)"),
)

# Inputs a shown command reads that no command of its own block writes: the command the docs say writes
# each, run first (its output not checked; it must succeed).
PREREQUISITES: dict[str, str] = {
    # README.md and docs/calibration.md: "whose scenario and log `python benchmarks/published.py ...` writes"
    "runs/published/verl-one-step-off-7b-16-gpus-4-12/": (
        "python benchmarks/published.py benchmarks/published/verl-one-step-off-7b.yaml --no-intervals --keep runs/published"
    ),
    # docs/verl.md: the scenario its `asyncrl from-verl ... --out runs/gsm8k.yaml` block writes
    "runs/gsm8k.yaml": "",  # filled in below from the parsed commands: the one with `--out runs/gsm8k.yaml`
}

# Files docs/errors.md's refusals read, which the page shows but does not say how they were made.
FILES: dict[str, str] = {
    "broken.yaml": "name: x\nmodel: {preset: tiny\nhardware: [\n",  # an unclosed flow mapping: line 3, column 9
    "notes/ideas.md": "# ideas\n",  # a folder of notes: not a run record, so --out refuses it
    "notes/summary.json": "{}\n",
}

# Blocks that take more than a few seconds, marked slow (the quick loop, `pytest -m "not slow"`, leaves
# them out; the other blocks together take about 15 s on two cores). Times measured on two busy cores.
SLOW: tuple[tuple[str, str], ...] = (
    ("asyncrl size", "simulates 24 to 42 plans: 12 to 30 s"),
    ("asyncrl plan", "reads a recipe script and simulates 22 plans: 15 to 40 s"),
    (
        "python -m tests.rollout_dump_data",
        "imports transformers for the tokenizer it writes: 5 s, and its lengths 20 s",
    ),
    ("head -1 runs/published/", "benchmarks/published.py writes its scenarios and log first: 45 s in all"),
)

ELISION = {"...", "…"}


@dataclass(frozen=True)
class Command:
    line: int  # where its `$ ` line is, 1-based
    text: str  # the command, continuation lines joined, `.venv/bin/` dropped from the program
    shown: tuple[str, ...]  # the lines the block shows it printing

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)


@dataclass(frozen=True)
class Block:
    path: Path
    commands: tuple[Command, ...]

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.commands[0].line} {self.commands[0].text}"

    def skipped(self) -> str | None:
        """Why the block is not run (its first command that is not run), or None."""
        for command in self.commands:
            for prefix, reason in SKIPPED:
                if command.text.startswith(prefix):
                    return f"{prefix}: {reason}"
        return None

    def slow(self) -> bool:
        return any(command.text.startswith(prefix) for command in self.commands for prefix, _ in SLOW)


def program_dropped_of_venv(text: str) -> str:
    return re.sub(r"^(\./)?\.venv/bin/", "", text)


def parse(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page whose first line is a shown command."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        fence = re.match(r"^(```+|~~~+)", lines[index])
        if fence is None:
            index += 1
            continue
        start, index = index + 1, index + 1
        while index < len(lines) and not lines[index].startswith(fence.group(1)):
            index += 1
        body = lines[start:index]
        index += 1
        if body and body[0].startswith("$ "):
            blocks.append(Block(path, tuple(commands_of(body, first_line=start + 1))))
    return blocks


def commands_of(body: list[str], first_line: int) -> list[Command]:
    commands: list[Command] = []
    at = 0
    while at < len(body):
        line, text = first_line + at, body[at][2:]
        while text.endswith("\\") and at + 1 < len(body):  # a command continued on the next line
            at += 1
            text = text[:-1].rstrip() + " " + body[at].strip()
        at += 1
        shown_from = at
        while at < len(body) and not body[at].startswith("$ "):
            at += 1
        commands.append(Command(line, program_dropped_of_venv(text.strip()), tuple(body[shown_from:at])))
    return commands


BLOCKS = [block for page in DOCS for block in parse(page)]


def documented_writer(path: str) -> str:
    """The one shown command that writes ``path`` (``--out path``)."""
    writers = [c.text for b in BLOCKS for c in b.commands if f"--out {path}" in c.text]
    assert len(writers) == 1, f"{len(writers)} shown commands write {path}: {writers}"
    return writers[0]


PREREQUISITES["runs/gsm8k.yaml"] = documented_writer("runs/gsm8k.yaml")


def normalised(lines: list[str] | tuple[str, ...], workdir: Path = ROOT) -> list[str]:
    """The lines as compared: trailing whitespace, paths, timings and this machine's free memory made alike."""
    out = []
    for line in lines:
        for prefix in (f"{workdir}/", f"{workdir.resolve()}/", f"{ROOT}/"):
            line = line.replace(prefix, "")
        line = re.sub(r"\bin \d[\d,]*(\.\d+)? s\b", "in <time> s", line)
        line = re.sub(
            r"more than the [\d.]+ GB usable here; at most [\d,]+ steps fit",
            "more than the <free> GB usable here; at most <n> steps fit",
            line,
        )
        out.append(line.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` is ``shown``, where a line ``...`` in ``shown`` stands for any lines."""
    if not any(line.strip() in ELISION for line in shown):
        return shown == printed
    parts: list[list[str]] = [[]]
    for line in shown:
        if line.strip() in ELISION:
            parts.append([])
        else:
            parts[-1].append(line)
    head, *middle, tail = parts
    if printed[: len(head)] != head or len(printed) < len(head) + len(tail):
        return False
    at, end = len(head), len(printed) - len(tail)
    if tail and printed[end:] != tail:
        return False
    for part in middle:
        while at + len(part) <= end and printed[at : at + len(part)] != part:
            at += 1
        if at + len(part) > end:
            return False
        at += len(part)
    return True


def run(argv: list[str], workdir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run one shown command in ``workdir``: its exit status and everything it printed."""
    program, *args = argv
    if program == "asyncrl":
        capsys.readouterr()
        try:
            status = main(args)
        except SystemExit as exc:  # argparse's refusals
            status = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return status, captured.out + captured.err
    if program == "python":
        env = {key: value for key, value in os.environ.items() if key != "ASYNCRL_TRACEBACK"}
        done = subprocess.run([sys.executable, *args], cwd=workdir, env=env, capture_output=True, text=True)
        return done.returncode, done.stdout + done.stderr
    if program == "head" and len(args) == 2 and re.fullmatch(r"-\d+", args[0]):
        with (workdir / args[1]).open() as handle:
            return 0, "".join(line for _, line in zip(range(int(args[0][1:])), handle, strict=False))
    raise AssertionError(f"no way to run {shlex.join(argv)!r} here: add it to run() or to SKIPPED")


class Workdirs:
    """Where blocks run: a fresh directory each, prerequisites made once and copied in, and what each block printed.

    Blocks that show the same commands (the README's tour repeats some of the docs' pages) run once."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.made: dict[str, Path] = {}  # prerequisite path -> the directory its writer ran in
        self.printed: dict[tuple[str, ...], list[tuple[int, list[str]]]] = {}

    def fresh(self, name: str) -> Path:
        workdir = self.factory.mktemp(name)
        for folder in ("tests", "benchmarks"):
            (workdir / folder).symlink_to(ROOT / folder, target_is_directory=True)
        return workdir

    def prepare(self, command: Command, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Make the inputs ``command`` reads that its block has not written, as the docs say they come about."""
        for path, writer in PREREQUISITES.items():
            if path not in command.text or writer == command.text or (workdir / path).exists():
                continue
            if path not in self.made:
                where = self.fresh("prerequisite")
                os.chdir(where)
                try:
                    status, printed = run(shlex.split(writer), where, capsys)
                finally:
                    os.chdir(workdir)
                assert status == 0, f"{writer} (which writes {path}) failed:\n{printed}"
                assert (where / path).exists(), f"{writer} did not write {path}"
                self.made[path] = where
            source, target = self.made[path] / path, workdir / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target)
            else:
                shutil.copy2(source, target)
        for path, text in FILES.items():
            top = path.split("/")[0]
            if re.search(rf"(^|\s){re.escape(top)}(\s|$)", command.text) and not (workdir / path).exists():
                (workdir / path).parent.mkdir(parents=True, exist_ok=True)
                (workdir / path).write_text(text)

    def run_block(self, block: Block, capsys: pytest.CaptureFixture[str]) -> list[tuple[int, list[str]]]:
        """Each command's exit status and normalised output, the block's commands run in order in one directory."""
        key = tuple(command.text for command in block.commands)
        if key not in self.printed:
            workdir, back = self.fresh("block"), Path.cwd()
            os.chdir(workdir)
            try:
                results = []
                for command in block.commands:
                    self.prepare(command, workdir, capsys)
                    status, printed = run(command.argv, workdir, capsys)
                    results.append((status, normalised(printed.splitlines(), workdir)))
            finally:
                os.chdir(back)
            self.printed[key] = results
        return self.printed[key]


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory: pytest.TempPathFactory) -> Workdirs:
    return Workdirs(tmp_path_factory)


def params() -> list[object]:
    out = []
    for block in BLOCKS:
        marks = [pytest.mark.slow] if block.slow() else []
        out.append(pytest.param(block, id=block.name[:110], marks=marks))
    return out


@pytest.mark.parametrize("block", params())
def test_shown_block_prints_what_it_shows(
    block: Block, workdirs: Workdirs, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = block.skipped()
    if reason is not None:
        pytest.skip(reason)
    monkeypatch.delenv("ASYNCRL_TRACEBACK", raising=False)
    for command, (status, printed) in zip(block.commands, workdirs.run_block(block, capsys), strict=True):
        where = f"{block.path.relative_to(ROOT)}:{command.line}: $ {command.text}"
        shown = normalised(command.shown)
        if not matches(shown, printed):
            diff = "\n".join(difflib.unified_diff(shown, printed, "shown", "printed", lineterm=""))
            pytest.fail(f"{where}\n{diff}", pytrace=False)
        refusal = bool(shown) and all(line.startswith("asyncrl: error: ") for line in shown)
        assert status == (2 if refusal else 0), f"{where}: exit status {status}"  # bad input exits 2


def test_the_docs_show_commands() -> None:
    assert len(BLOCKS) >= MIN_BLOCKS, [block.name for block in BLOCKS]
    run_here = [block for block in BLOCKS if block.skipped() is None]
    assert len(run_here) >= MIN_BLOCKS_RUN, [block.name for block in run_here]
    assert all(command.shown for block in run_here for command in block.commands)


def test_the_prerequisites_are_the_docs_own() -> None:
    """Each prerequisite's command is one the docs name (in a block or in the text)."""
    text = "\n".join(page.read_text() for page in DOCS)
    shown = {command.text for block in BLOCKS for command in block.commands}
    for path, writer in PREREQUISITES.items():
        assert writer in shown or f"`{writer}`" in text, path


@pytest.mark.parametrize(
    ("shown", "printed", "expected"),
    [
        (["a", "...", "z"], ["a", "b", "c", "z"], True),
        (["a", "..."], ["a", "b"], True),
        (["a", "…", "c", "...", "z"], ["a", "b", "c", "d", "z"], True),
        (["a", "...", "z"], ["a", "b"], False),
        (["a", "b"], ["a", "b", "c"], False),
        (["... 15 more rows in the CSV"], ["... 15 more rows in the CSV"], True),
    ],
)
def test_elision(shown: list[str], printed: list[str], expected: bool) -> None:
    assert matches(shown, printed) is expected
