"""The launch command of a training framework's shell script, read without running it.

    run_dapo.sh ─► statements (newline, ;, &&, ||, |), comments and line continuations dropped
        X=…, export X=…, NAME=( … )          ─► variables (assignments in if/for bodies too, in order)
        words: '…', "…", \\c, $X, ${X}, ${X:-default}, ${X-default}, ${X:=default}, ${A[@]}, $((arithmetic))
        ─► the first command with ``-m MODULE`` (MODULE under one of the prefixes asked for)
        ─► LaunchCommand(module, arguments after it, the line it starts on, what could not be expanded)

A small subset of the shell, enough for the recipe scripts of verl and OpenRLHF: nothing is executed.
Command substitution (``$(…)``, backquotes) is left as written and reported; the environment is not
read, so a variable the script does not set expands to nothing (``${X:-default}`` to its default) and is
reported; conditions are not evaluated (``if [ … ]; then X=1; fi`` sets X). Arithmetic takes integers,
variables, ``+ - * / % **`` and parentheses, as ``$(( ))`` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from asyncrl.frameworks.common.shell_arithmetic import integer_value

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.DOTALL)
_DECLARERS = ("export", "declare", "local", "readonly", "typeset")
_KEYWORDS = ("then", "else", "do", "{", "!")
_REDIRECTION = re.compile(r"\d*(?:>>|>&|<&|&>|>|<)\d*-?")
_SEPARATORS = ("&&", "||", ";;", ";", "|", "&", "\n")
_UNSET = object()
_ALL_ARGUMENTS = "\x00@"  # "$@": the script's arguments, none here (a word of only that vanishes)
_ELEMENTS = "\x01"  # between an array's elements: "${A[@]}" is a word per element, quoted or not
#: The most characters the variables may put into the script's words, all expansions together: a recipe's
#: script expands to a few KB; ``a2="$a1$a1…"`` chains grow tenfold a line and would fill memory for minutes.
MAX_EXPANSION = 8 << 20


class LaunchScriptError(ValueError):
    """A script with no launch command of the kind asked for, or one that cannot be read; one line."""


@dataclass
class LaunchCommand:
    """The launch command found, its arguments expanded, and what the expansion could not know."""

    path: Path
    module: str
    arguments: list[str]
    line: int
    unset: list[str] = field(default_factory=list)  # variables used but never set (the environment is not read)
    unexpanded: list[str] = field(default_factory=list)  # command substitutions left as written


def read_launch_script(path: Path, prefixes: tuple[str, ...]) -> LaunchCommand:
    """The first ``python -m MODULE …`` of the script whose MODULE starts with one of ``prefixes``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise LaunchScriptError(f"{path}: cannot read it ({exc.strerror})") from None
    shell = _Shell(text, path)
    for line, words in shell.commands():
        command = _launch(words, prefixes)
        if command is not None:
            module, arguments = command
            return LaunchCommand(path, module, arguments, line, sorted(shell.unset), shell.unexpanded)
        _assign(shell, words)
    wanted = " or ".join(f"python -m {prefix}…" for prefix in prefixes)
    raise LaunchScriptError(f"{path}: no `{wanted}` command in the script")


def _launch(words: list[str], prefixes: tuple[str, ...]) -> tuple[str, list[str]] | None:
    """``(module, the words after it)`` when the command runs ``-m MODULE`` with a module asked for."""
    for index, word in enumerate(words[:-1]):
        module = words[index + 1]
        if word == "-m" and any(module == prefix or module.startswith(f"{prefix}.") for prefix in prefixes):
            return module, words[index + 2 :]
    return None


def _assign(shell: _Shell, words: list[str]) -> None:
    """A command of assignments only (``export`` ones too) sets variables; one before a command does not."""
    while words and words[0] in _KEYWORDS:
        words = words[1:]
    if words and words[0] in _DECLARERS:
        words = [word for word in words[1:] if not word.startswith("-")]
    matches = [_ASSIGNMENT.match(word) for word in words]
    if not words or not all(matches):
        return
    for match in matches:
        assert match is not None  # all matched
        name, append, value = match.groups()
        shell.variables[name] = (str(shell.variables.get(name, "")) if append else "") + value


class _Shell:
    """A scanner over the script's text that yields each command's words, expanded with the variables so far."""

    def __init__(self, text: str, path: Path, outer: _Shell | None = None) -> None:
        """A scanner of ``text``; an ``outer`` one (a default's text inside it) shares its variables and counts."""
        self.text, self.path, self.position = text, path, 0
        self.line: int = outer.line if outer else 1
        self.variables: dict[str, str | list[str]] = outer.variables if outer else {}
        self.in_array = False
        self.unset: set[str] = outer.unset if outer else set()
        self.unexpanded: list[str] = outer.unexpanded if outer else []
        self.expanded: list[int] = outer.expanded if outer else [0]  # characters the variables put into words so far

    def _spend(self, value: str) -> str:
        """``value``, counted against ``MAX_EXPANSION``."""
        self.expanded[0] += len(value)
        if self.expanded[0] > MAX_EXPANSION:
            raise LaunchScriptError(
                f"{self.path}: line {self.line}: its variables expand past {MAX_EXPANSION >> 20} MiB; asyncrl "
                "reads a launch script's settings, not a script that grows without bound"
            )
        return value

    def commands(self) -> Iterator[tuple[int, list[str]]]:
        """Each command as (its first line, its words); array assignments are applied as they are read."""
        while self.position < len(self.text):
            start, words = self.line, self._command()
            if words:
                yield start, words

    # ── scanning ───────────────────────────────────────────────────────────────

    def _peek(self, count: int = 1) -> str:
        return self.text[self.position : self.position + count]

    def _advance(self, count: int = 1) -> str:
        taken = self.text[self.position : self.position + count]
        self.position += count
        self.line += taken.count("\n")
        return taken

    def _command(self) -> list[str]:
        words: list[str] = []
        while self.position < len(self.text):
            char = self._peek()
            if self._peek(2) == "\\\n":
                self._advance(2)
            elif char in " \t\r":
                self._advance()
            elif char == "#":
                self._until("\n")
            elif _REDIRECTION.match(self.text, self.position) and self._redirection():
                continue
            elif any(self.text.startswith(sep, self.position) for sep in _SEPARATORS):
                self._advance(next(len(sep) for sep in _SEPARATORS if self.text.startswith(sep, self.position)))
                return words
            else:
                words += self._word()
        return words

    def _redirection(self) -> bool:
        """Skip ``2>&1``, ``> log`` and the like (and the file they name); False where it is a word's digits."""
        match = _REDIRECTION.match(self.text, self.position)
        assert match is not None
        operator_text = match.group()
        if operator_text.isdigit() or not any(char in operator_text for char in "<>"):
            return False
        self._advance(len(operator_text))
        if operator_text[-1] in "<>":  # the target is the next word
            while self._peek() in " \t":
                self._advance()
            self._word()
        return True

    def _word(self) -> list[str]:
        """One word, split where an unquoted expansion holds blanks (``${A[@]}`` gives each element)."""
        pieces: list[tuple[str, bool]] = []  # (text, from an unquoted expansion: split at blanks)
        while self.position < len(self.text):
            char = self._peek()
            if char in " \t\r\n;&|" or (char == ")" and self.in_array):
                break
            if char in "()" and not pieces:  # a subshell's parentheses: skipped
                self._advance()
                break
            if self._peek(2) == "\\\n":
                self._advance(2)
            elif char == "\\":
                self._advance()
                pieces.append((self._advance(), False))
            elif char == "'":
                self._advance()
                pieces.append((self._until("'"), False))
                self._advance()
            elif char == '"':
                self._advance()
                pieces.append((self._double_quoted(), False))
            elif char == "$":
                substitution = self._peek(2) == "$(" and self._peek(3) != "$(("  # left whole, as written
                pieces.append((self._dollar(), not substitution))
            elif char == "`":
                pieces.append((self._substitution(), False))
            elif char == "(" and _ASSIGNMENT.match("".join(text for text, _ in pieces) or "-"):
                return self._array("".join(text for text, _ in pieces))
            else:
                pieces.append((self._advance(), False))
        words = [element for word in _split(pieces) for element in word.split(_ELEMENTS)]
        return [word.replace(_ALL_ARGUMENTS, "") for word in words if word != _ALL_ARGUMENTS]

    def _until(self, end: str) -> str:
        start = self.position
        while self.position < len(self.text) and self._peek() != end:
            self._advance()
        return self.text[start : self.position]

    def _double_quoted(self) -> str:
        out = []
        while self.position < len(self.text) and self._peek() != '"':
            if self._peek() == "\\" and self._peek(2)[1:] in ('"', "\\", "$", "`", "\n"):
                self._advance()
                escaped = self._advance()
                out.append("" if escaped == "\n" else escaped)
            elif self._peek() == "$":
                out.append(self._dollar())
            elif self._peek() == "`":
                out.append(self._substitution())
            else:
                out.append(self._advance())
        self._advance()
        return "".join(out)

    def _array(self, assignment: str) -> list[str]:
        """``NAME=( words … )`` over several lines: the words become the variable's elements."""
        self._advance()  # (
        name = assignment.rstrip("=+")
        elements: list[str] = []
        self.in_array = True
        while self.position < len(self.text) and self._peek() != ")":
            if self._peek() in " \t\r\n":
                self._advance()
            elif self._peek(2) == "\\\n":
                self._advance(2)
            elif self._peek() == "#":
                self._until("\n")
            else:
                elements += self._word()
        self.in_array = False
        self._advance()  # )
        self.variables[name] = elements
        return []

    # ── expansions ─────────────────────────────────────────────────────────────

    def _dollar(self) -> str:
        self._advance()  # $
        if self._peek(2) == "((":
            return self._arithmetic()
        if self._peek() == "(":
            return self._substitution(dollar=True)
        if self._peek() == "{":
            self._advance()
            return self._braced(self._balanced("{", "}"))
        if self._peek() in "@*":
            self._advance()
            return _ALL_ARGUMENTS
        if self._peek() in "#?$!0123456789-":
            self._advance()
            return ""  # positional and special parameters: nothing is passed to the script
        name = _NAME.match(self.text, self.position)
        if name is None:
            return "$"
        self._advance(name.end() - self.position)
        return self._scalar(name.group())

    def _balanced(self, opening: str, closing: str) -> str:
        """The text up to the ``closing`` that balances what is open (the opening one already read)."""
        depth, start = 1, self.position
        while self.position < len(self.text):
            char = self._advance()
            if char == opening:
                depth += 1
            elif char == closing:
                depth -= 1
                if depth == 0:
                    return self.text[start : self.position - 1]
        return self.text[start:]

    def _braced(self, inner: str) -> str:
        """``${X}``, ``${X:-default}`` (also ``-``, ``:=``, ``=``), ``${A[@]}``, ``${A[0]}``."""
        if inner.startswith(("@", "*")):  # ${@}, ${@:1}
            return _ALL_ARGUMENTS
        array = re.fullmatch(r"([A-Za-z_]\w*)\[([@*]|\d+)\]", inner)
        if array:
            value = self.variables.get(array.group(1), _UNSET)
            items = value if isinstance(value, list) else [] if value is _UNSET else [str(value)]
            if value is _UNSET:
                self.unset.add(array.group(1))
            index = int(array.group(2)) if array.group(2).isdigit() else None
            return self._spend(_ELEMENTS.join(items) if index is None else (items[index] if index < len(items) else ""))
        match = re.fullmatch(r"([A-Za-z_]\w*)(:?[-=])(.*)", inner, re.DOTALL)
        if match is None and _NAME.fullmatch(inner):
            return self._scalar(inner)
        if match is None:  # ${#X}, ${X/a/b}, ...: not this subset's
            self.unexpanded.append(f"${{{inner}}}")
            return ""
        name, operation, default = match.groups()
        value = self.variables.get(name, _UNSET)
        empty = value is _UNSET or (operation.startswith(":") and value in ("", []))
        if not empty:
            return self._scalar(name)
        expanded = self._expand_inline(default)
        if operation.endswith("="):
            self.variables[name] = expanded
        return expanded

    def _scalar(self, name: str) -> str:
        value = self.variables.get(name, _UNSET)
        if value is _UNSET:
            self.unset.add(name)
            return ""
        if isinstance(value, list):  # an array read as a scalar: its first element
            return self._spend(value[0] if value else "")
        return self._spend(str(value))

    def _expand_inline(self, text: str) -> str:
        """A default's text (``${X:-"${HOME}/verl"}``), expanded with the same rules and variables."""
        return " ".join(_Shell(text, self.path, outer=self)._command())

    def _substitution(self, dollar: bool = False) -> str:
        """``$(…)`` or a backquoted command: never run; left as written, and reported."""
        start = self.position - 1 if dollar else self.position
        self._advance()  # ( or `
        if dollar:
            self._balanced("(", ")")
        else:
            self._until("`")
            self._advance()
        written = self.text[start : self.position]
        self.unexpanded.append(written)
        return written

    def _arithmetic(self) -> str:
        self._advance(2)  # ((
        expression = self._balanced("(", ")")
        self._advance()  # the second )
        return str(self._evaluate(expression))

    def _evaluate(self, expression: str) -> int:
        """Integer arithmetic as ``$(( ))`` does it: variables by name or ``$name``, nothing else."""
        with_values = re.sub(r"\$\{?([A-Za-z_]\w*)\}?|\b([A-Za-z_]\w*)\b", self._number, expression)
        try:
            return integer_value(with_values)
        except (SyntaxError, ValueError, ZeroDivisionError):
            self.unexpanded.append(f"$(({expression}))")
            return 0

    def _number(self, match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        text = self._scalar(name).strip() or "0"
        return f"({text})" if re.fullmatch(r"-?\d+", text) else f"({self._evaluate(text)})"


def _split(pieces: list[tuple[str, bool]]) -> list[str]:
    """The word's text, split at blanks that an unquoted expansion brought in (as the shell splits words)."""
    words, current, started = [], [], False
    for text, splittable in pieces:
        if not splittable:
            current.append(text)
            started = True
            continue
        parts = re.split(r"[ \t\n]+", text)
        for index, part in enumerate(parts):
            if index > 0 and (current or started):
                words.append("".join(current))
                current, started = [], False
            if part:
                current.append(part)
                started = True
    if current or started:
        words.append("".join(current))
    return words
