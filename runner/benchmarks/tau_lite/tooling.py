"""A ported tool: its kind, its parameters (tau2's signature as coercion specs), its body."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from runner.benchmarks.tau_lite.schema import SchemaError, coerce
from runner.benchmarks.tau_lite.store import DomainError

Kind = Literal["read", "write", "generic"]  # tau2's ToolType READ / WRITE / GENERIC


@dataclass(frozen=True)
class Tool:
    name: str
    kind: Kind
    params: dict[str, Any]  # name -> schema spec; every tau2 tool parameter is required
    fn: Callable[..., Any]

    def bind(self, args: Any) -> dict[str, Any]:
        """The call's arguments checked against the signature (a misfit is the agent's error:
        tau2 would raise TypeError / pydantic ValidationError, here DomainError)."""
        if not isinstance(args, Mapping):
            raise DomainError(f"{self.name}: arguments must be an object")
        missing = sorted(set(self.params) - set(args))
        unknown = sorted(set(args) - set(self.params))
        if missing or unknown:
            raise DomainError(f"{self.name}: missing arguments {missing}, unknown {unknown}")
        try:
            return {k: coerce(spec, args[k], k) for k, spec in self.params.items()}
        except SchemaError as exc:
            raise DomainError(f"{self.name}: {exc}") from None


def tool(
    registry: dict[str, Tool], kind: Kind, _name: str | None = None, **params: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = _name or fn.__name__
        registry[name] = Tool(name, kind, params, fn)
        return fn

    return deco


_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def calculate(expression: str) -> str:
    """tau2's `calculate`: same characters, same rounding; evaluated over the AST, not eval()
    (deviation: an exponent beyond 64 is refused, so `9**9**9` cannot hang the destination)."""
    if not all(char in "0123456789+-*/(). " for char in expression):
        raise DomainError("Invalid characters in expression")

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise DomainError("exponent too large")
            return _OPS[type(node.op)](left, right)
        raise DomainError("invalid expression")

    try:
        return str(round(float(ev(ast.parse(expression, mode="eval"))), 2))
    except (SyntaxError, ZeroDivisionError, OverflowError, TypeError) as exc:
        raise DomainError(f"invalid expression: {exc}") from None
