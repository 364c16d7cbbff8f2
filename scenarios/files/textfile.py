"""Reading the small text files a scenario points to, with one-line errors and a size limit.

    path ──read_text(path, limit, what)──► str ──parse_yaml(text, path)──► data
         └─ ValueError "<path>: not a file" / "... bytes, more than ..." / "not UTF-8 text" / OS error
                                                    └─ ValueError "<path>:<line>:<column>: not valid YAML: ..."
    text ──safe_load(text)──► data       every YAML asyncrl reads (scenarios, verl/NeMo-RL configs, overrides)
    text ──parse_json(text, source)──► data                  ValueError "<source>: nested more than ... deep"

Scenario files, cost profiles and lengths files all go through here, so a
directory, a binary file, a huge file or one that cannot be read is one line
naming the file instead of a traceback or a read that fills memory.

``safe_load`` is ``yaml.safe_load`` with three refusals, each a ``yaml.MarkedYAMLError`` with the line:
nesting deeper than ``MAX_DEPTH`` (Python's recursion would fail first, far later), aliases that
expand to more than ``MAX_EXPANDED_NODES`` nodes (a "billion laughs" file is a few hundred bytes that
expand to gigabytes once anything walks them), and a key given twice in one mapping (YAML keeps the
last silently: two ``schedule:`` sections would be one). ``parse_json`` refuses nesting deeper than
Python's JSON reader can follow, naming the file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml


def read_text(path: Path, limit: int, what: str) -> str:
    """The file's text; ValueError (one line, naming ``path``) if it is not a readable UTF-8 file of at most ``limit`` bytes."""
    try:
        if not path.is_file():
            raise ValueError(f"file not found: {path}" if not path.exists() else f"{path}: not a file")
        size = path.stat().st_size
        if size > limit:
            raise ValueError(f"{path}: {size:,} bytes, more than {limit:,} for {what}")
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise ValueError(f"{path}: more than {limit:,} bytes for {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start:,} cannot be decoded); expected {what}") from None


MAX_DEPTH = 64
MAX_EXPANDED_NODES = 1_000_000
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YAMLLimitError(yaml.MarkedYAMLError):
    """YAML that ``safe_load`` refuses: too deep, aliases that expand too far, or a key given twice."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class GuardedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a depth limit, an expansion limit on aliases, and duplicate keys refused."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise YAMLLimitError(f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, set())
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in seen:
                line = seen[key] + 1
                raise YAMLLimitError(f"key {key!r} given twice (first on line {line})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many nodes ``node`` holds once every alias is expanded; YAMLLimitError beyond the limit."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise YAMLLimitError("an alias refers to a node that holds it", node.start_mark)
    open_nodes.add(key)
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    else:
        children = []
    size = 1 + sum(_expanded_size(child, sizes, open_nodes) for child in children)
    if size > MAX_EXPANDED_NODES:
        raise YAMLLimitError(f"aliases expand to more than {MAX_EXPANDED_NODES:,} nodes", node.start_mark)
    open_nodes.discard(key)
    sizes[key] = size
    return size


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` with the depth, alias-expansion and duplicate-key refusals (``yaml.YAMLError``)."""
    loader = GuardedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def parse_json(text: str | bytes, source: object, *, strict: bool = False) -> Any:
    """``text`` as JSON; ValueError naming ``source`` when it nests deeper than the reader follows, and with
    ``strict`` when it holds ``NaN`` or ``Infinity`` (Python's extensions: not JSON, and not a figure).

    Other errors are ``json.JSONDecodeError`` as ``json.loads`` raises them, for callers that say where.
    """
    import json

    def refuse(constant: str) -> float:
        raise ValueError(f"{source}: holds {constant}, which is not a number")

    try:
        return json.loads(text, parse_constant=refuse) if strict else json.loads(text)
    except RecursionError:
        raise ValueError(f"{source}: nested too deeply to read") from None


def shown_value(value: object, largest: int) -> str:
    """``value`` as a message shows it: its ``repr``, or "a 31-digit number" for an integer beyond ``largest``
    (a 401-digit one keeps the message one short line)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > largest:
        return f"a {len(str(abs(value)))}-digit number"
    return repr(value)


def json_safe(data: Any) -> Any:
    """``data`` with every infinite or NaN float as None, so that ``json.dumps`` writes JSON (``null``), never
    the bare ``Infinity``/``NaN`` no JSON reader but Python's takes."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: json_safe(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [json_safe(value) for value in data]
    return data


def dumps(data: Any, **options: Any) -> str:
    """``json.dumps`` of ``json_safe(data)``: strict JSON."""
    import json

    return json.dumps(json_safe(data), allow_nan=False, **options)


def parse_yaml(text: str, path: Path) -> Any:
    """``text`` as YAML; ValueError ``"<path>:<line>:<column>: not valid YAML: <problem>"`` on one line."""
    try:
        return safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = " ".join(str(exc.problem or exc.context or "syntax error").split())
        raise ValueError(f"{where}: not valid YAML: {problem}") from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, before any parsing
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        raise ValueError(
            f"{path}:{line}:{column}: not valid YAML: character #x{exc.character:04x} is not allowed"
        ) from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
