"""Compiled Jinja templates kept between runs, as Python keeps compiled modules in `__pycache__`.

Every run used to compile each template, `when` and argument expression again: lexing, parsing,
generating Python and compiling it took ~0.6-0.9 ms a template on the 2-core lab machine: 74 ms of a
`--check` of four GPU roles (83 templates), 99 ms of the whole site's rerun (166). Jinja's own
`bytecode_cache` covers only templates read through a loader, not `from_string` or
`compile_expression`, which is how task arguments and conditions are compiled; so
`CachingEnvironment` caches at `compile`, the one step all three go through, keyed by the source
text, its kind and name, Python's and Jinja's versions and this package's templating code (the
options an environment is made with live there). Stored with `marshal`, as `__pycache__` stores
code, in the controller's cache (`templates/`, controller_cache.py); a source holding a secret is
never stored (`REDACTOR.touches`). A syntax error is never cached: it is raised by Jinja's own code,
as before.
"""

from __future__ import annotations

import hashlib
import marshal
from pathlib import Path
from types import CodeType
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.environment import TemplateExpression
from jinja2.exceptions import TemplateSyntaxError
from jinja2.parser import Parser

from provision import controller_cache
from provision.sandbox import BoundedSandbox
from provision.secrets import REDACTOR

_HERE = Path(__file__).parent
# what decides the generated code besides the source: the interpreter, Jinja, and how our
# environments are made and extended (templating.py, the sandbox's code generator, and this file)
_VERSION = controller_cache.version_of(jinja2.__version__,
                                       sources=(_HERE / "templating.py", _HERE / "sandbox.py",
                                                _HERE / "template_cache.py"))


class CachingEnvironment(BoundedSandbox):
    """The sandbox (sandbox.py) whose compiled templates and expressions outlive the run."""

    def compile(self, source: Any, name: str | None = None, filename: str | None = None,  # type: ignore[override]
                raw: bool = False, defer_init: bool = False) -> Any:
        if raw:
            return super().compile(source, name, filename, True, defer_init)
        if not isinstance(source, str):
            return super().compile(source, name, filename, False, defer_init)
        return self._cached(("template", source, name, filename, defer_init),
                            lambda: super(CachingEnvironment, self).compile(source, name, filename, raw, defer_init))

    def compile_expression(self, source: str, undefined_to_none: bool = True) -> TemplateExpression:
        code = self._cached(("expression", source), lambda: self._compile_expression(source))
        template = self.template_class.from_code(self, code, self.make_globals(None), None)
        return TemplateExpression(template, undefined_to_none)

    def _compile_expression(self, source: str) -> CodeType:
        """`Environment.compile_expression`'s parse (its errors, word for word), compiled to code."""
        parser = Parser(self, source, state="variable")
        try:
            expr = parser.parse_expression()
            if not parser.stream.eos:
                raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno, None, None)
            expr.set_environment(self)
        except TemplateSyntaxError:
            self.handle_exception(source=source)
        body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
        return super().compile(nodes.Template(body, lineno=1))

    def _cached(self, key: tuple[Any, ...], compile_now: Any) -> CodeType:
        text = repr(key)
        digest = hashlib.sha256(f"{_VERSION}\0{text}".encode()).hexdigest()[:40]
        path = controller_cache.folder("templates") / f"{digest}.code"
        stored = controller_cache.read(path)
        if stored is not None:
            try:
                code = marshal.loads(stored)
                if isinstance(code, CodeType):
                    return code
            except (ValueError, EOFError, TypeError):
                pass
        code = compile_now()
        if not REDACTOR.touches(text):
            controller_cache.write(path, marshal.dumps(code))
        return code
