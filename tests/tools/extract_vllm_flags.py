"""Write `roles/vllm/meta/vllm-serve-flags.txt` from the source of a vLLM wheel, without importing it.

The pinned image's vLLM (v0.21.0) cannot be imported here (it needs torch), so this reads the
source statically: `vllm/entrypoints/openai/cli_args.py` (make_arg_parser's own options and the
fields of BaseFrontendArgs/FrontendArgs, each `--field-name`) and `vllm/engine/arg_utils.py`
(EngineArgs/AsyncEngineArgs.add_cli_args: every `add_argument("--name", ..., **x_kwargs["field"])`,
with `x_kwargs = get_kwargs(SomeConfig)`). Each option's kind and choices follow the rules of
arg_utils.py `_compute_kwargs` from the config field's annotation, type aliases (`CacheDType =
Literal[...]`) followed through the imports of the module that declares the field, and names bound
only under `if TYPE_CHECKING:` read as `Any`, as they are when vLLM runs. A field whose kwargs
add_cli_args or `_customize_cli_kwargs` rewrites (a new `type`, more `choices`) keeps no choices, so
the list never refuses what vLLM accepts. Run:

    pip download --no-deps vllm==0.21.0 -d /tmp/w && cd /tmp/w && unzip -q vllm-*.whl 'vllm/*'
    python -m tests.tools.extract_vllm_flags /tmp/w > roles/vllm/meta/vllm-serve-flags.txt
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

BUILTINS = {"bool", "int", "float", "str", "dict", "list", "tuple", "set", "Any"}
COLLECTIONS = ("tuple", "list", "set")
HUMAN_INT_FIELDS = {"max_model_len", "max_num_batched_tokens", "kv_cache_memory_bytes",
                    "safetensors_prefetch_block_size"}  # _compute_kwargs: type=human_readable_int(_or_auto)


@dataclass
class Module:
    """One module's top-level names: assignments (aliases), imports and classes."""

    name: str
    assigned: dict[str, ast.expr] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)


@dataclass(frozen=True)
class Hint:
    """One member of a field's type union, as `_compute_kwargs` sees it."""

    kind: str  # bool int float str none any literal dataclass class dict tuple list set
    values: tuple[object, ...] = ()  # a literal's options
    element: tuple[Hint, ...] = ()  # a collection's element hints


class Source:
    """The unpacked vLLM package, read with `ast` only."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: dict[str, Module] = {}

    def module(self, dotted: str) -> Module | None:
        if dotted in self.modules:
            return self.modules[dotted]
        base = self.root / dotted.replace(".", "/")
        path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
        if path is None:
            return None
        found = self.modules[dotted] = Module(dotted)
        for node in _runtime_statements(ast.parse(path.read_text()).body):
            if isinstance(node, ast.ClassDef):
                found.classes[node.name] = node
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                found.assigned[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                found.assigned[node.target.id] = node.value
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    found.imported[alias.asname or alias.name] = (node.module, alias.name)
        return found

    def find(self, module: str, name: str) -> tuple[Module, ast.expr | ast.ClassDef] | None:
        """Where `name` as seen from `module` is defined, following `from x import name`."""
        for _ in range(10):
            found = self.module(module)
            if found is None:
                return None
            if name in found.classes:
                return found, found.classes[name]
            if name in found.assigned:
                return found, found.assigned[name]
            if name not in found.imported:
                return None
            module, name = found.imported[name]
        return None

    def hints(self, module: Module, node: ast.expr) -> set[Hint]:
        """`get_type_hints` of arg_utils.py: the union's members, Annotated unwrapped, aliases followed."""
        if isinstance(node, ast.Constant):
            if node.value is None:
                return {Hint("none")}
            return self.hints(module, ast.parse(node.value, mode="eval").body) if isinstance(node.value, str) else set()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.hints(module, node.left) | self.hints(module, node.right)
        if isinstance(node, ast.Subscript):
            return self._subscript(module, node)
        if isinstance(node, ast.Name):
            if node.id in BUILTINS and not self.find(module.name, node.id):
                return {Hint("any" if node.id == "Any" else node.id)}
            found = self.find(module.name, node.id)
            if found is None:
                return {Hint("any" if node.id == "Any" else "class")}
            where, value = found
            if isinstance(value, ast.ClassDef):
                decorators = {ast.unparse(d).split("(")[0] for d in value.decorator_list}
                return {Hint("dataclass" if decorators & {"config", "dataclass"} else "class")}
            return self.hints(where, value)
        return {Hint("class")}

    def _subscript(self, module: Module, node: ast.Subscript) -> set[Hint]:
        origin = ast.unparse(node.value).split(".")[-1]
        items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if origin in ("Annotated", "SkipValidation"):  # pydantic's SkipValidation[X] is Annotated[X, ...]
            return self.hints(module, items[0])
        if origin == "Optional":
            return self.hints(module, items[0]) | {Hint("none")}
        if origin == "Union":
            return set().union(*(self.hints(module, item) for item in items))
        if origin == "Literal":
            return {Hint("literal", self._literal_values(module, items))}
        if origin in COLLECTIONS:
            return {Hint(origin, element=tuple(sorted(self.hints(module, items[0]), key=str)))}
        if origin == "dict":
            return {Hint("dict")}
        return {Hint("class")}

    def _literal_values(self, module: Module, items: list[ast.expr]) -> tuple[object, ...]:
        """A Literal's options, nested Literal aliases flattened as `typing` does."""
        values: list[object] = []
        for item in items:
            if isinstance(item, ast.Constant):
                values.append(item.value)
            else:
                for hint in self.hints(module, item):
                    values.extend(hint.values)
        return tuple(values)


def _runtime_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module's top-level statements as they run: `if TYPE_CHECKING:` keeps only its else branch."""
    statements: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            statements.extend(_runtime_statements(node.orelse))
        elif isinstance(node, ast.Try):
            statements.extend(_runtime_statements(node.body))
        else:
            statements.append(node)
    return statements


@dataclass(frozen=True)
class Option:
    """An argparse option as the flag list records it."""

    kind: str
    choices: tuple[str, ...] = ()


def option_of(hints: set[Hint], name: str) -> Option:
    """`_compute_kwargs`' choice of type (and choices) for one field."""
    kinds = {hint.kind for hint in hints}
    literal = next((hint for hint in hints if hint.kind == "literal"), None)
    optional = "none" in kinds
    if "dataclass" in kinds:
        return Option("str")  # a JSON string
    if kinds == {"bool", "str", "none"}:
        return Option("bool_or_str")
    if "bool" in kinds:
        return Option("bool")
    if literal is not None:
        return _literal_option(literal, metavar_only="str" in kinds, optional=optional)
    collection = next((hint for hint in hints if hint.kind in COLLECTIONS), None)
    if collection is not None:
        element = {hint.kind for hint in collection.element}
        inner = next((hint for hint in collection.element if hint.kind == "literal"), None)
        if inner is not None and len(element) == 1:
            return _literal_option(inner, metavar_only=False, optional=optional)
        return Option(element.pop() if len(element) == 1 and element <= {"int", "float"} else "str")
    if "int" in kinds:
        return Option("human_int" if name in HUMAN_INT_FIELDS else "int")
    return Option("float" if "float" in kinds else "str")


def _literal_option(literal: Hint, metavar_only: bool, optional: bool) -> Option:
    """literal_to_kwargs: the options' type; choices unless `str` is also accepted (then a metavar)."""
    kind = "int" if all(isinstance(v, int) and not isinstance(v, bool) for v in literal.values) else "str"
    if metavar_only:
        return Option(kind)
    choices = [str(v) for v in sorted(literal.values)] + (["None"] if optional else [])  # optional_type's "None"
    assert not any("," in c or " " in c for c in choices), choices
    return Option(kind, tuple(choices))


def _line(spellings: list[str], option: Option) -> str:
    off = [f"--no-{s[2:]}" for s in spellings if s.startswith("--")] if option.kind == "bool" else []
    return (f"{','.join(spellings)} {option.kind}" + (f" off={','.join(off)}" if off else "")
            + (f" choices={','.join(option.choices)}" if option.choices else ""))


class Fields:
    """Config class name -> field -> its option, the classes' bases' fields included."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def option(self, module: str, cls: str, name: str) -> Option | None:
        found = self.source.find(module, cls)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return None
        where, node = found
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id == name:
                return option_of(self.source.hints(where, item.annotation), name)
        for base in node.bases:
            inherited = self.option(where.name, ast.unparse(base), name)
            if inherited is not None:
                return inherited
        return None

    def names(self, module: str, cls: str) -> list[str]:
        """The dataclass fields in order, bases first (ClassVar excluded)."""
        where, node = self.source.find(module, cls)  # type: ignore[misc]
        names: list[str] = []
        for base in node.bases:
            if self.source.find(where.name, ast.unparse(base)):
                names += self.names(where.name, ast.unparse(base))
        for item in node.body:
            if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    and "ClassVar" not in ast.unparse(item.annotation) and item.target.id not in names):
                names.append(item.target.id)
        return names


def rewritten(func: ast.FunctionDef) -> set[tuple[str, str]]:
    """(kwargs variable, field) whose kwargs the function changes after get_kwargs (`x["f"]["type"] = ...`,
    `x["f"]["choices"] += ...`, or through an alias `y = x["f"]; y["type"] = ...`)."""
    aliases: dict[str, tuple[str, str]] = {}
    changed: set[tuple[str, str]] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and _entry(node.value):
            aliases[node.targets[0].id] = _entry(node.value)  # type: ignore[assignment]
    for node in ast.walk(func):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AugAssign) else [t for t in node.targets] if isinstance(node, ast.Delete) else []
        for target in targets:
            if isinstance(target, ast.Subscript) and ast.unparse(target).split("[")[-1] != "'metavar']":
                inner = target.value
                key = _entry(inner) or (aliases.get(inner.id) if isinstance(inner, ast.Name) else None)
                if key:
                    changed.add(key)
    return changed


def _entry(node: ast.expr) -> tuple[str, str] | None:
    """`x["field"]` -> (x, field)."""
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
        return node.value.id, node.slice.value
    return None


def engine_flags(source: Source, fields: Fields) -> list[str]:
    module = source.module("vllm.engine.arg_utils")
    assert module is not None
    tree = ast.parse((source.root / "vllm/engine/arg_utils.py").read_text())
    lines = []
    for func in ast.walk(tree):
        if not (isinstance(func, ast.FunctionDef) and func.name == "add_cli_args"):
            continue
        kwargs_of: dict[str, str] = {}
        for node in ast.walk(func):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", "") == "get_kwargs" and isinstance(node.targets[0], ast.Name)):
                kwargs_of[node.targets[0].id] = ast.unparse(node.value.args[0])
        changed = rewritten(func)
        for node in ast.walk(func):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
                continue
            spellings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if any(s.startswith("--") for s in spellings):
                lines.append(_line(spellings, _added_option(node, kwargs_of, changed, fields)))
    return lines


def _added_option(call: ast.Call, kwargs_of: dict[str, str], changed: set[tuple[str, str]],
                  fields: Fields) -> Option:
    """One add_argument call's option: its `**x_kwargs["field"]`, then its own action/type/choices."""
    option = Option("str")
    for keyword in call.keywords:
        spread = keyword.value
        if isinstance(spread, ast.Dict):  # **{**cache_kwargs["x"], "default": None}
            spread = next((v for k, v in zip(spread.keys, spread.values, strict=True) if k is None), spread)
        entry = _entry(spread) if keyword.arg is None else None
        if entry:
            found = fields.option("vllm.engine.arg_utils", kwargs_of.get(entry[0], ""), entry[1])
            option = Option("str") if entry in changed else found or Option("str")
        text = ast.unparse(keyword.value)
        if keyword.arg == "action":
            option = Option("bool" if "BooleanOptional" in text else "flag" if "store_true" in text else option.kind)
        elif keyword.arg == "type":
            option = Option({"int": "int", "float": "float"}.get(text, "str"), option.choices)
        elif keyword.arg == "choices" and isinstance(keyword.value, ast.List):
            option = Option(option.kind, tuple(sorted(str(ast.literal_eval(v)) for v in keyword.value.elts)))
    return option


def frontend_flags(source: Source, fields: Fields) -> list[str]:
    cli = source.root / "vllm/entrypoints/openai/cli_args.py"
    tree = ast.parse(cli.read_text())
    lines = []
    changed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_customize_cli_kwargs":
            changed |= {name for _, name in rewritten(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "make_arg_parser":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument":
                    spellings = [a.value for a in call.args if isinstance(a, ast.Constant)]
                    if spellings and spellings[0].startswith("--"):
                        lines.append(_line(spellings, _added_option(call, {}, set(), fields)))
    module = "vllm.entrypoints.openai.cli_args"
    for name in fields.names(module, "FrontendArgs"):
        option = Option("str") if name in changed else fields.option(module, "FrontendArgs", name)
        lines.append(_line([f"--{name.replace('_', '-')}"], option or Option("str")))
    return lines


def main(root: Path) -> None:
    source = Source(root)
    fields = Fields(source)
    stamped = dict(line.split(" = ", 1) for line in (root / "vllm/_version.py").read_text().splitlines()
                   if line.startswith(("__version__ =", "__commit_id__ =")))
    version = stamped["__version__"].split("=")[-1].strip().strip("'")
    commit = stamped["__commit_id__"].split("=")[-1].strip().strip("'").removeprefix("g")
    print(f"# program: vLLM {version} `vllm serve`")
    print("# The options of the pinned image's vLLM, one a line, with their kind and (where vLLM's parser has")
    print("# them) their choices. Extracted statically by tests/tools/extract_vllm_flags.py from the")
    print(f"# vllm-{version} wheel on PyPI (built from vllm-project/vllm commit {commit}, tag v{version}):")
    print("#   vllm/entrypoints/openai/cli_args.py make_arg_parser + FrontendArgs fields, and")
    print("#   vllm/engine/arg_utils.py EngineArgs/AsyncEngineArgs.add_cli_args (kinds and choices by its")
    print("#   _compute_kwargs from the Literal types of vllm/config/*.py). Format: provision/settings/flags.py")
    for line in [*frontend_flags(source, fields), *engine_flags(source, fields)]:
        print(line)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
