"""The shell's ``$(( ))`` arithmetic on integers, for the launch-script reader: parsed, never evaluated as code.

"(4 * 8) / 3"  ─► ast.parse ─► integers and + - * / % ** only (anything else a ValueError) ─► 10
"""

from __future__ import annotations

import ast
import operator


def integer_value(expression: str) -> int:
    """The value of ``expression`` (variables already replaced by their numbers); an empty one is 0.
    SyntaxError, ValueError (not integer arithmetic) or ZeroDivisionError where there is none."""
    return _integer(ast.parse(expression.strip() or "0", mode="eval").body)


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Mod: lambda a, b: a - b * _quotient(a, b),  # the shell's %: the dividend's sign (C's, not Python's)
    ast.Pow: operator.pow,
    ast.Div: lambda a, b: _quotient(a, b),
    ast.FloorDiv: lambda a, b: _quotient(a, b),
}


def _quotient(a: int, b: int) -> int:
    """The shell's ``/``: truncated toward zero."""
    if b == 0:
        raise ZeroDivisionError
    return int(a / b)


def _integer(node: ast.AST) -> int:
    """An arithmetic expression of integers only; anything else is a ValueError (never evaluated)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _integer(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _integer(node.left), _integer(node.right)
        if isinstance(node.op, ast.Pow) and (right < 0 or right > 64):
            raise ValueError("exponent out of range")
        return int(_OPERATORS[type(node.op)](left, right))
    raise ValueError(f"not integer arithmetic: {ast.dump(node)}")
