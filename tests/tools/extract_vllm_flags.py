"""Write `roles/vllm/meta/vllm-serve-flags.txt` from the source of a vLLM wheel, without importing it.

The pinned image's vLLM (v0.21.0) cannot be imported here (it needs torch), so this reads the
source statically: `vllm/entrypoints/openai/cli_args.py` (make_arg_parser's own options and the
fields of BaseFrontendArgs/FrontendArgs, each `--field-name`) and `vllm/engine/arg_utils.py`
(EngineArgs/AsyncEngineArgs.add_cli_args: every `add_argument("--name", ..., **x_kwargs["field"])`,
with `x_kwargs = get_kwargs(SomeConfig)`); the kind follows get_kwargs' rules from the field's
annotation (bool -> BooleanOptionalAction with --no-NAME, int, float, else a value). Run:

    pip download --no-deps vllm==0.21.0 -d /tmp/w && cd /tmp/w && unzip -q vllm-*.whl 'vllm/*'
    python -m tests.tools.extract_vllm_flags /tmp/w > roles/vllm/meta/vllm-serve-flags.txt
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _annotations(root: Path) -> dict[str, dict[str, str]]:
    """Class name -> field -> annotation source, for every class of vllm/config and the two arg files."""
    found: dict[str, dict[str, str]] = {}
    files = [*sorted((root / "vllm/config").glob("*.py")), root / "vllm/engine/arg_utils.py",
             root / "vllm/entrypoints/openai/cli_args.py"]
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                fields = found.setdefault(node.name, {})
                for base in node.bases:  # fields of a base defined earlier come along
                    if isinstance(base, ast.Name) and base.id in found:
                        fields.update({k: v for k, v in found[base.id].items() if k not in fields})
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        fields[item.target.id] = ast.unparse(item.annotation)
    return found


def kind_of(annotation: str) -> str:
    """get_kwargs' choice, from the annotation text."""
    parts = {part.strip() for part in annotation.replace("Optional[", "").rstrip("]").split("|")}
    if parts == {"bool", "str", "None"}:
        return "bool_or_str"
    if "bool" in parts:
        return "bool"
    if any(p.startswith(("Literal", "list", "tuple", "set", "dict")) for p in parts):
        return "str"
    if "int" in parts:
        return "int"
    return "float" if "float" in parts else "str"


def _line(spellings: list[str], kind: str) -> str:
    off = [f"--no-{s[2:]}" for s in spellings if s.startswith("--")] if kind == "bool" else []
    return f"{','.join(spellings)} {kind}" + (f" off={','.join(off)}" if off else "")


def engine_flags(path: Path, classes: dict[str, dict[str, str]]) -> list[str]:
    lines = []
    for func in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(func, ast.FunctionDef) and func.name == "add_cli_args"):
            continue
        kwargs_of: dict[str, str] = {}
        for node in ast.walk(func):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", "") == "get_kwargs" and isinstance(node.targets[0], ast.Name)):
                kwargs_of[node.targets[0].id] = ast.unparse(node.value.args[0])
        for node in ast.walk(func):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
                continue
            spellings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not any(s.startswith("--") for s in spellings):
                continue
            kind = "str"
            for keyword in node.keywords:
                text = ast.unparse(keyword.value)
                spread = keyword.value
                if isinstance(spread, ast.Dict):  # **{**cache_kwargs["x"], "default": None}
                    spread = next((v for k, v in zip(spread.keys, spread.values, strict=True) if k is None), spread)
                if keyword.arg is None and isinstance(spread, ast.Subscript):
                    cls = kwargs_of.get(ast.unparse(spread.value), "")
                    field = ast.literal_eval(spread.slice)
                    kind = kind_of(classes.get(cls, {}).get(field, "str"))
                elif keyword.arg == "action":
                    kind = "bool" if "BooleanOptional" in text else "flag" if "store_true" in text else kind
                elif keyword.arg == "type":
                    kind = {"int": "int", "float": "float"}.get(text, kind)
            lines.append(_line(spellings, kind))
    return lines


def main(root: Path) -> None:
    classes = _annotations(root)
    version = next(line.split("=")[-1].strip().strip("'") for line in (root / "vllm/_version.py").read_text()
                   .splitlines() if line.startswith("__version__ ="))
    print(f"# program: vLLM {version} `vllm serve`")
    print("# The options of the pinned image's vLLM, one a line.")
    print("# Extracted statically by tests/tools/extract_vllm_flags.py from the vllm-" + version + " wheel on PyPI:")
    print("#   vllm/entrypoints/openai/cli_args.py make_arg_parser + FrontendArgs fields, and")
    print("#   vllm/engine/arg_utils.py EngineArgs/AsyncEngineArgs.add_cli_args. Format: provision/settings/flags.py")
    cli = root / "vllm/entrypoints/openai/cli_args.py"
    tree = ast.parse(cli.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "make_arg_parser":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument":
                    spellings = [a.value for a in call.args if isinstance(a, ast.Constant)]
                    if spellings and spellings[0].startswith("--"):
                        action = next((ast.unparse(k.value) for k in call.keywords if k.arg == "action"), "")
                        kind = next((ast.unparse(k.value) for k in call.keywords if k.arg == "type"), "str")
                        print(_line(spellings, "flag" if "store_true" in action else kind))
    for name, annotation in classes["FrontendArgs"].items():
        print(_line([f"--{name.replace('_', '-')}"], kind_of(annotation)))
    for line in engine_flags(root / "vllm/engine/arg_utils.py", classes):
        print(line)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
