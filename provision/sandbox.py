"""The one Jinja environment every template renders in: Jinja's immutable sandbox, with bounds.

`ImmutableSandboxedEnvironment` refuses `_`-prefixed and internal attributes (`''.__class__`,
`lipsum.__globals__`, `cycler.__init__`) and methods that change a list or dict
(https://jinja.palletsprojects.com/en/stable/sandbox/). The sandbox bounds `range` only; a template
can still loop for hours or build a string of gigabytes, which the sandbox documentation leaves to
the application. Here one render gets `MAX_STEPS` loop iterations and calls, a text, string or list
it makes holds at most `MAX_TEXT` items, an integer at most `MAX_INT_BITS` bits, and Python's
recursion limit ends a recursive macro. A violation is `LimitExceeded`, a Jinja `SecurityError`
naming the limit, which the callers report as the input error it is (exit 2, never a hang).
"""

from __future__ import annotations

import functools
import math
import re
import string
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.environment import Environment, Template
from jinja2.exceptions import SecurityError
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import generate_lorem_ipsum

from provision.lookups import lookup, query

#: loop iterations one render may make, a call counting as CALL_STEPS of them (about 0.2 s of loops or
#: 0.6 s of macro calls on the 2-core lab machine; a role's largest template makes a few hundred)
MAX_STEPS = 1_000_000
CALL_STEPS = 10
#: items of one `range` (Jinja's own sandbox bound, jinja2.sandbox.MAX_RANGE)
MAX_RANGE = 100_000
#: characters of a rendered text, and items of any string or list a template makes
MAX_TEXT = 4 * 1024 * 1024
#: bits of an integer a template computes (Python refuses to print one of over 4300 digits)
MAX_INT_BITS = 8_192
#: what a runaway template raises besides LimitExceeded: Python's own limits
RUNAWAY = (RecursionError, MemoryError, OverflowError)
_STEPS_LEFT = "_provision_steps_left"  # on the render's Context: macros and loop() share it
_PERCENT_FIELD = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})
_PRECHECKED_FILTERS = frozenset({"center", "indent", "slice", "wordwrap", "format", "join", "replace"})


class LimitExceeded(SecurityError):
    """A template went past one of the sandbox's bounds; the message names the limit."""


def _exceeded(what: str, limit: int, name: str) -> LimitExceeded:
    return LimitExceeded(f"the template exceeds the sandbox's limit of {limit:,} {what} ({name})")


def runaway(error: BaseException) -> LimitExceeded:
    """One of Python's own limits (RUNAWAY), hit while rendering, as the LimitExceeded it is."""
    what: dict[type[BaseException], str] = {RecursionError: "nesting depth (a macro that calls itself?)",
                                           MemoryError: "memory"}
    return LimitExceeded(f"the template exceeds Python's limit on {what.get(type(error), 'number size')}: {error}")


def _spend(context: Context, steps: int = 1) -> None:
    left = context.__dict__.get(_STEPS_LEFT, MAX_STEPS) - steps
    if left < 0:
        raise _exceeded(f"loop iterations (a call counts {CALL_STEPS}) in one render", MAX_STEPS, "MAX_STEPS")
    context.__dict__[_STEPS_LEFT] = left


def _sized(value: Any) -> Any:
    """`value`, refused when it is a string or list longer than MAX_TEXT or an integer over MAX_INT_BITS."""
    if isinstance(value, str | list | tuple | dict) and len(value) > MAX_TEXT:
        raise _exceeded("characters (or items) in one value", MAX_TEXT, "MAX_TEXT")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise _exceeded("bits in one integer", MAX_INT_BITS, "MAX_INT_BITS")
    return value


def _check_width(width: Any) -> None:
    if isinstance(width, int) and width > MAX_TEXT:
        raise _exceeded("characters in one value", MAX_TEXT, "MAX_TEXT")


def _check_percent(template: str, values: Any) -> None:
    """`template % values` would not make a field wider than MAX_TEXT (`%999999999s`, `%*s`)."""
    for match in _PERCENT_FIELD.finditer(template):
        for width in match.groups():
            if width and width != "*":
                _check_width(int(width))
    if "*" in template:
        for item in values if isinstance(values, tuple) else (values,):
            _check_width(item)


def _check_format(template: str, args: Iterable[Any], kwargs: dict[str, Any]) -> None:
    """`template.format(...)` would not make a field wider than MAX_TEXT (`{:>999999999}`)."""
    try:
        specs = [spec for _, _, spec, _ in string.Formatter().parse(template) if spec]
    except ValueError:
        return  # the call itself reports the malformed format
    for spec in specs:
        for width in re.findall(r"\d+", spec):
            _check_width(int(width))
        if "{" in spec:  # a nested field: the width is an argument
            for value in (*args, *kwargs.values()):
                _check_width(value)


def _check_joined(parts: Any, separator: Any = "") -> None:
    """Joining `parts` would not make a string longer than MAX_TEXT."""
    if isinstance(parts, list | tuple):
        size = len(str(separator)) * len(parts)
        size += sum(len(part) if isinstance(part, str) else 0 for part in parts)
        _check_width(size)


def _check_replaced(text: Any, old: Any, new: Any) -> None:
    """`text.replace(old, new)` would not make a string longer than MAX_TEXT (`''` matches everywhere)."""
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        _check_width(len(text) + (text.count(old) if old else len(text) + 1) * len(new))


def _check_method(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A string method called from a template would not make a string longer than MAX_TEXT."""
    owner = getattr(method, "__self__", None)
    if not isinstance(owner, str):
        return
    name = getattr(method, "__name__", "")
    if name in _WIDTH_METHODS:
        for value in (*args, *kwargs.values()):
            _check_width(value)
    elif name == "join" and args:
        _check_joined(args[0], owner)
    elif name == "replace" and len(args) >= 2:
        _check_replaced(owner, args[0], args[1])


def _check_filter(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The filters that can make a huge value from a small one, checked before they run."""
    passed = Context | EvalContext | Environment  # what Jinja hands a filter before its value
    values = [value for value in (*args, *kwargs.values()) if not isinstance(value, passed)]
    if name in ("center", "indent", "slice", "wordwrap"):
        for value in values[1:]:
            _check_width(value)
        if name == "slice" and len(values) > 1 and isinstance(values[1], int) and values[1] > MAX_RANGE:
            raise _exceeded("slices", MAX_RANGE, "MAX_RANGE")
    elif name == "format" and values and isinstance(values[0], str):
        _check_percent(values[0], tuple(values[1:]))
    elif name == "join" and values:
        _check_joined(values[0], values[1] if len(values) > 1 else "")
    elif name == "replace" and len(values) >= 3:
        _check_replaced(str(values[0]), values[1], values[2])


def _sum_of_lists(function: Callable[..., Any], environment: Environment, iterable: Iterable[Any],
                  attribute: Any = None, start: Any = 0) -> Any:
    """`lists | sum(start=[])` (Ansible's flatten-by-one) in linear time, sized as it grows: Python's
    `sum` copies the list so far at every item, quadratic in their number."""
    if not isinstance(start, list) or attribute is not None:
        return function(environment, iterable, attribute, start)
    total = list(start)
    for item in iterable:
        total.extend(item)
        _sized(total)
    return total


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(function, "_provision_bounded", False):
        return function

    if name == "sum":
        def bounded(*args: Any, **kwargs: Any) -> Any:
            return _sized(_sum_of_lists(function, *args, **kwargs))
    elif name in _PRECHECKED_FILTERS:
        def bounded(*args: Any, **kwargs: Any) -> Any:
            _check_filter(name, args, kwargs)
            return _sized(function(*args, **kwargs))
    else:  # most filters: only the size of what they made
        def bounded(*args: Any, **kwargs: Any) -> Any:
            return _sized(function(*args, **kwargs))

    functools.update_wrapper(bounded, function)  # keeps jinja_pass_arg: Jinja passes the context on as before

    bounded._provision_bounded = True  # type: ignore[attr-defined]
    return bounded


class _BoundedFilters(dict[str, Callable[..., Any]]):
    """The environment's filters, each checked for the sizes it can make (what make_environment adds too)."""

    def __init__(self, filters: dict[str, Callable[..., Any]]) -> None:
        super().__init__()
        self.update(filters)

    def __setitem__(self, name: str, function: Callable[..., Any]) -> None:
        super().__setitem__(name, _bounded_filter(name, function))

    def update(self, *mappings: Any, **filters: Callable[..., Any]) -> None:  # type: ignore[override]
        for name, function in dict(*mappings, **filters).items():
            self[name] = function


def _bounded_range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise _exceeded("items in one range", MAX_RANGE, "MAX_RANGE")
    return numbers


def _bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    _check_width(n * max)
    return str(generate_lorem_ipsum(n, html, min, max))


def _check_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0 \
            and exponent * math.log2(abs(base)) > MAX_INT_BITS:
        raise _exceeded("bits in one integer", MAX_INT_BITS, "MAX_INT_BITS")


def _check_product(left: Any, right: Any) -> None:
    for sequence, count in ((left, right), (right, left)):
        if isinstance(sequence, str | list | tuple) and isinstance(count, int):
            _check_width(len(sequence) * count)


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, with every loop's items counted and every `~` result sized."""

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        counted = nodes.Call(nodes.EnvironmentAttribute("counted_loop"), [nodes.ContextReference(), node.iter],
                             [], None, None, lineno=node.lineno)
        super().visit_For(nodes.For(node.target, counted, node.body, node.else_, node.test, node.recursive,
                                    lineno=node.lineno), frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.sized(")
        super().visit_Concat(node, frame)
        self.write(")")


class _BoundedTemplate(Template):
    def render(self, *args: Any, **kwargs: Any) -> str:
        try:
            return super().render(*args, **kwargs)
        except RUNAWAY as error:
            raise runaway(error) from None


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with bounds on loops, calls, ranges, integers and sizes."""

    code_generator_class = _BoundedCodeGenerator
    template_class = _BoundedTemplate
    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filters = _BoundedFilters(self.filters)
        self.globals.update(range=_bounded_range, lipsum=_bounded_lipsum, lookup=lookup, query=query, q=query)

    @staticmethod
    def sized(value: Any) -> Any:
        return _sized(value)

    @staticmethod
    def counted_loop(context: Context, items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            _spend(context)
            yield item

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _spend(__context, CALL_STEPS)
        _check_method(__obj, args, kwargs)
        return _sized(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            _check_power(left, right)
        elif operator == "*":
            _check_product(left, right)
        elif operator == "%" and isinstance(left, str):
            _check_percent(left, right)
        return _sized(super().call_binop(context, operator, left, right))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        template = value.__self__

        @functools.wraps(wrapped)
        def checked(*args: Any, **kwargs: Any) -> str:
            _check_format(template, args, kwargs)
            return wrapped(*args, **kwargs)

        return checked

    def concat(self, parts: Iterable[str]) -> str:  # type: ignore[override]  # Environment.concat is "".join
        """A template's whole text, refused as soon as it grows past MAX_TEXT."""
        collected = []
        size = 0
        for part in parts:
            size += len(part)
            if size > MAX_TEXT:
                raise _exceeded("characters of output", MAX_TEXT, "MAX_TEXT")
            collected.append(part)
        return "".join(collected)
