"""A small declarative schema for JSON data, in plain Python: each key's type, range and size in
one table (spec.py's SCHEMA), checked by one function with one-line errors naming the key path.

    Obj({"runs": Int(1, 10**9, default=1000), "robust": Bool(default=False)})

Rules: ``Int`` (JSON integers only: no booleans, no 1e3), ``Num`` (finite numbers, no
booleans), ``Bool`` (JSON true/false only: "false", "no" and 0 are errors), ``Str``,
``Choice``, ``Obj`` (unknown keys refused, defaults filled), ``List``, ``Map`` (string keys to
one rule) and ``Either`` (the first rule that accepts). ``check`` returns the value with every
default filled in; ``depth`` bounds the nesting of raw JSON before anything else looks at it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from compiler.errors import CbfsimError

REQUIRED = object()


class SchemaError(CbfsimError, ValueError):
    """A value outside its rule; the message names the key path."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class Rule:
    default: Any = field(default=REQUIRED, kw_only=True)
    nullable: bool = field(default=False, kw_only=True)

    def describe(self) -> str:
        raise NotImplementedError

    def accepts(self, value: Any, where: str) -> Any:
        """The checked value, or SchemaError."""
        raise NotImplementedError

    def fail(self, value: Any, where: str) -> SchemaError:
        got = _kind(value) if isinstance(value, (dict, list)) else f"{_kind(value)} {_show(value)}"
        return SchemaError(f"{where}: expected {self.describe()}{' or null' if self.nullable else ''}, got {got}")


@dataclass(frozen=True)
class Int(Rule):
    lo: int = 0
    hi: int = 2 ** 63 - 1

    def describe(self) -> str:
        return f"an integer in [{self.lo}, {self.hi}]"

    def accepts(self, value: Any, where: str) -> Any:
        if type(value) is not int or not self.lo <= value <= self.hi:
            raise self.fail(value, where)
        return value


@dataclass(frozen=True)
class Num(Rule):
    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False

    def describe(self) -> str:
        low = "" if self.lo == -math.inf else f"{'>' if self.lo_open else '>='} {self.lo:g}"
        high = "" if self.hi == math.inf else f"<= {self.hi:g}"
        return "a finite number" + (f" {' and '.join(p for p in (low, high) if p)}" if low or high else "")

    def accepts(self, value: Any, where: str) -> Any:
        if type(value) not in (int, float) or not math.isfinite(value) or value > self.hi or value < self.lo \
                or (self.lo_open and value == self.lo):
            raise self.fail(value, where)
        return value


@dataclass(frozen=True)
class Bool(Rule):
    def describe(self) -> str:
        return "true or false (a JSON boolean, not a string or a number)"

    def accepts(self, value: Any, where: str) -> Any:
        if type(value) is not bool:
            raise self.fail(value, where)
        return value


@dataclass(frozen=True)
class Str(Rule):
    max_len: int = 256

    def describe(self) -> str:
        return f"a string of 1 to {self.max_len} characters"

    def accepts(self, value: Any, where: str) -> Any:
        if type(value) is not str or not 0 < len(value) <= self.max_len:
            raise self.fail(value, where)
        return value


@dataclass(frozen=True)
class Choice(Rule):
    choices: tuple = ()

    def describe(self) -> str:
        return "one of " + ", ".join(repr(c) for c in self.choices)

    def accepts(self, value: Any, where: str) -> Any:
        if type(value) is not str or value not in self.choices:
            raise self.fail(value, where)
        return value


@dataclass(frozen=True)
class List(Rule):
    item: Rule = field(default_factory=Rule)
    min_items: int = 0
    max_items: int = 10_000

    def describe(self) -> str:
        return f"a list of {self.min_items} to {self.max_items} items, each {self.item.describe()}"

    def accepts(self, value: Any, where: str) -> Any:
        if type(value) is not list:
            raise self.fail(value, where)
        if not self.min_items <= len(value) <= self.max_items:
            raise SchemaError(f"{where}: expected {self.min_items} to {self.max_items} items, got {len(value)}")
        return [check(v, self.item, f"{where}[{i}]") for i, v in enumerate(value)]


@dataclass(frozen=True)
class Map(Rule):
    """An object with free string keys (names) and one rule for every value."""
    item: Rule = field(default_factory=Rule)
    max_items: int = 64

    def describe(self) -> str:
        return f"an object of at most {self.max_items} names, each {self.item.describe()}"

    def accepts(self, value: Any, where: str) -> Any:
        if type(value) is not dict or len(value) > self.max_items:
            raise self.fail(value, where)
        return {k: check(v, self.item, f"{where}.{k}") for k, v in value.items()}


@dataclass(frozen=True)
class Obj(Rule):
    fields: dict = field(default_factory=dict)

    def describe(self) -> str:
        return "an object with the keys " + ", ".join(self.fields)

    def accepts(self, value: Any, where: str) -> Any:
        if type(value) is not dict:
            raise self.fail(value, where)
        unknown = sorted(set(value) - set(self.fields))
        if unknown:
            raise SchemaError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(self.fields))}")
        out = {}
        for key, rule in self.fields.items():
            path = f"{where}.{key}" if where else key
            if key in value:
                out[key] = check(value[key], rule, path)
            elif rule.default is REQUIRED:
                raise SchemaError(f"{path} is required")
            else:
                out[key] = check(rule.default, rule, path)
        return out


@dataclass(frozen=True)
class Either(Rule):
    options: tuple = ()

    def describe(self) -> str:
        return " or ".join(o.describe() for o in self.options)

    def accepts(self, value: Any, where: str) -> Any:
        for option in self.options:
            try:
                return check(value, option, where)
            except SchemaError:
                continue
        raise self.fail(value, where)


def check(value: Any, rule: Rule, where: str = "") -> Any:
    """``value`` checked against ``rule`` (defaults filled in), or SchemaError naming ``where``."""
    if value is None and rule.nullable:
        return None
    return rule.accepts(value, where or "the spec")


def depth(value: Any, limit: int, where: str = "the spec") -> None:
    """Refuse JSON nested deeper than ``limit`` (iteratively: no recursion on hostile input)."""
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            if level >= limit:
                raise SchemaError(f"{where} is nested deeper than {limit} levels")
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
