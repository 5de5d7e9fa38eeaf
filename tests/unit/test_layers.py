"""The layer order DESIGN.md draws is the order the code imports in: every import of `provision/` goes
down the list in DESIGN.md's "The layers" block (or to a package on the same line), and no package
imports one that imports it back. Read from the source with `ast`, lazy imports inside functions
included; imports for type hints only (under `if TYPE_CHECKING:`) are not counted."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).parents[2]
PACKAGE = REPO / "provision"
BOTTOM = "bottom"  # the modules at the top of provision/ (shell.py, errors.py, ...)
ENTRY = "__main__"  # `python -m provision`: above the command line it starts


def design_layers(text: str) -> list[list[str]]:
    """The layers as DESIGN.md's first code block after "## The layers" lists them, bottom first:
    each line that starts at column 0 names its packages (`cli/`, `vllm/  office_gateway/`, `bottom`)."""
    section = text.split("## The layers", 1)[1]
    block = section.split("```", 2)[1]
    layers = []
    for line in block.splitlines():
        if not line or line[0].isspace():
            continue
        names = []
        for word in line.split():
            if word == BOTTOM or re.fullmatch(r"[a-z_]+/", word):
                names.append(word.rstrip("/"))
            else:
                break
        assert names, f"DESIGN.md's layers: {line!r} names no package"
        layers.append(names)
    return layers[::-1]


def package_of(module: str) -> str:
    """`provision.cli.fleet` -> `cli`; a module at the top of provision/ -> the bottom floor."""
    parts = module.split(".")
    if len(parts) > 1 and (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return ENTRY if parts[1:] == [ENTRY] else BOTTOM


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(tree: ast.AST) -> Iterator[str]:
    """Every `provision` module a file imports, at any depth, except under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            yield from (name for child in node.orelse for name in imported(child))
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("provision."))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "provision":  # `from provision import shell, interrupt`
                yield from (f"provision.{alias.name}" for alias in node.names)
            elif node.module.startswith("provision."):
                yield node.module
        yield from imported(node)


def import_graph() -> dict[str, dict[str, set[str]]]:
    """Package -> package it imports -> the files that do."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        source = package_of(module)
        for target in map(package_of, imported(ast.parse(path.read_text(), str(path)))):
            if target != source:
                graph.setdefault(source, {}).setdefault(target, set()).add(str(path.relative_to(REPO)))
    return graph


def problems(graph: dict[str, dict[str, set[str]]], layers: list[list[str]]) -> list[str]:
    """Each import up a layer, each package DESIGN.md does not place, and each cycle."""
    level = {name: index for index, names in enumerate(layers) for name in names}
    level[ENTRY] = len(layers)
    found = []
    packages = set(graph) | {target for targets in graph.values() for target in targets}
    found += [f"provision/{name}/ is in no layer of DESIGN.md" for name in sorted(packages - set(level))]
    for source, targets in sorted(graph.items()):
        for target, files in sorted(targets.items()):
            if source in level and target in level and level[target] > level[source]:
                found.append(f"{source} imports {target}, a layer above it: {', '.join(sorted(files))}")
    found += [f"cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    return found


def cycles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """One cycle through each package that is on one (depth-first search)."""
    found: list[list[str]] = []
    seen: set[str] = set()

    def walk(node: str, path: list[str]) -> None:
        for target in sorted(graph.get(node, {})):
            if target in path:
                cycle = [*path[path.index(target):], target]
                if not any(set(cycle) == set(other) for other in found):
                    found.append(cycle)
            elif target not in seen:
                walk(target, [*path, target])
        seen.add(node)

    for start in sorted(graph):
        if start not in seen:
            walk(start, [start])
    return found


def test_every_import_goes_down_the_layers_design_md_draws_and_none_comes_back() -> None:
    layers = design_layers((REPO / "DESIGN.md").read_text())
    assert [BOTTOM] in layers and ["cli"] in layers, layers
    found = problems(import_graph(), layers)
    assert found == [], "\n".join(found)


def test_the_check_finds_an_upward_import_a_cycle_and_an_unplaced_package() -> None:
    # the test above can fail: the same check on a graph with each fault
    layers = [[BOTTOM], ["connection"], ["runner"], ["cli"]]
    up = {"connection": {"cli": {"provision/connection/ssh.py"}}, "cli": {"connection": {"provision/cli/up.py"}}}
    assert problems(up, layers) == [
        "connection imports cli, a layer above it: provision/connection/ssh.py",
        "cycle: cli -> connection -> cli"]
    beside = {"vllm": {"status_page": {"x"}}, "status_page": {"vllm": {"y"}}}
    assert problems(beside, [[BOTTOM], ["vllm", "status_page"]]) == ["cycle: status_page -> vllm -> status_page"]
    assert problems({"newpkg": {BOTTOM: {"z"}}}, layers) == ["provision/newpkg/ is in no layer of DESIGN.md"]


def test_imports_for_type_hints_only_are_not_counted_and_lazy_ones_are() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from provision.cli.up import x\n"
                     "def f():\n    from provision.runner.runner import Runner\n"
                     "from provision import shell\nimport provision.facts.probe\n")
    assert sorted(imported(tree)) == ["provision.facts.probe", "provision.runner.runner", "provision.shell"]
