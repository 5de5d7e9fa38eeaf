"""Every reference in the documents resolves: a newcomer who follows one never lands on nothing.

The documents are README.md, DESIGN.md, docs/*.md and benchmarks/RESULTS.md (every other .md file of
the repository gets the same checks but the settings one). Checked, because each
went stale before (DESIGN.md pointed at `LAB.md` and REFERENCE.md, which were never in the repository):
- every relative Markdown link `[text](path#anchor)` names a file that exists, and its anchor a
  heading of that file (GitHub's slugs);
- every `*.md` file named in the text exists (beside the document, or from the repository root);
- every repository path named (`provision/...`, `roles/...`, `tests/...`, `benchmarks/...`,
  `playbooks/...`, `inventory/...`, `docs/...`) exists; `{a,b}` is expanded as the shell does;
- every symbol named as `path.py::Name` (pytest's notation) is defined at the top of that file or in
  one of its classes (`def Name`, `class Name`, `Name =`, `Name:`);
- every role setting named (a backticked word that starts with a role's prefix, as `vllm_port`)
  is declared in some roles/*/meta/argument_specs.yaml or defaults.yaml.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TOP_FOLDERS = ("provision", "roles", "tests", "benchmarks", "playbooks", "inventory", "docs")


def documents() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "DESIGN.md", *sorted((ROOT / "docs").glob("*.md"))]
    results = ROOT / "benchmarks" / "RESULTS.md"
    return found + ([results] if results.exists() else [])


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
MD_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
REPO_PATH = re.compile(r"(?<![\w/.~$-])((?:" + "|".join(TOP_FOLDERS) + r")/[\w./{},*<>-]*)")
SYMBOL = re.compile(r"`([\w/.-]+\.(?:py|sh))::([A-Za-z_][\w.]*)`")
BACKTICKED = re.compile(r"`([a-z][a-z0-9_]*)`")


def _expand_braces(text: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", text)
    if not match:
        return [text]
    out = []
    for part in match.group(1).split(","):
        out.extend(_expand_braces(text[: match.start()] + part + text[match.end():]))
    return out


def _slug(heading: str) -> str:
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _problems_of_links(doc: Path) -> list[str]:
    problems = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            problems.append(f"link to {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            problems.append(f"link to {target}: no heading #{anchor} in {dest.name}")
    return problems


def _problems_of_md_names(doc: Path) -> list[str]:
    problems = []
    text = LINK.sub("", doc.read_text())
    for name in sorted(set(MD_NAME.findall(text))):
        if not ((doc.parent / name).exists() or (ROOT / name).exists()):
            problems.append(f"{name}: not in the repository")
    return problems


def generated_folders() -> tuple[str, ...]:
    """Folders the tests write and git ignores (`tests/artifacts/`): named, never committed."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    return tuple(line for line in lines if line.endswith("/") and line.startswith(TOP_FOLDERS))


def _problems_of_paths(doc: Path) -> list[str]:
    problems = []
    for raw in sorted(set(REPO_PATH.findall(doc.read_text()))):
        path = raw.rstrip(".,;:")
        if any(c in path for c in "<>*") or "..." in path:
            continue  # a pattern (`roles/<role>/`, `tests/unit/test_status_page*.py`), not one path
        for one in _expand_braces(path):
            if not (ROOT / one).exists() and not one.startswith(generated_folders()):
                problems.append(f"{one}: no such path")
    return problems


def _defined(path: Path, name: str) -> bool:
    """Each part of a dotted name (`Inventory.check_lookups`) is defined in the file."""
    text = path.read_text()
    for part in name.split("."):
        name_re = re.escape(part)
        if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name_re}\b|^\s*{name_re}\s*[:=]", text, re.M):
            return False
    return True


def _problems_of_symbols(doc: Path) -> list[str]:
    problems = []
    for file, name in SYMBOL.findall(doc.read_text()):
        path = ROOT / file
        if not path.exists():
            problems.append(f"{file}::{name}: no such file")
        elif not _defined(path, name):
            problems.append(f"{file}::{name}: not defined there")
    return problems


def declared_settings() -> set[str]:
    names: set[str] = set()
    for spec in ROOT.glob("roles/*/meta/argument_specs.y*ml"):
        names |= _option_names((yaml.safe_load(spec.read_text()) or {}).get("options") or {})
    for defaults in ROOT.glob("roles/*/defaults.yaml"):
        names |= set(yaml.safe_load(defaults.read_text()) or {})
    for profile in ROOT.glob("roles/vllm/models/*.yaml"):
        names |= set(yaml.safe_load(profile.read_text()) or {})
    return names


def _option_names(options: dict) -> set[str]:
    out = set(options)
    for value in options.values():
        if isinstance(value, dict) and isinstance(value.get("options"), dict):
            out |= _option_names(value["options"])
    return out


def role_names() -> set[str]:
    return {p.name for p in (ROOT / "roles").iterdir() if p.is_dir()}


def operation_names() -> set[str]:
    """The operations' names (a name, not a setting): the engine's table with the products' hooks."""
    from provision.ops import OPERATION_MODULES

    return set(OPERATION_MODULES)


def template_functions() -> set[str]:
    """The functions offered to templates (`provision/playbook/templating.py` FUNCTIONS, the products'
    included)."""
    from provision.playbook.templating import FUNCTIONS

    return set(FUNCTIONS)


def setting_prefixes() -> tuple[str, ...]:
    return tuple(sorted({f"{r}_" for r in role_names()} | {"vllm_", "office_", "hf_", "bundle_"}))


def _problems_of_settings(doc: Path, declared: set[str], prefixes: tuple[str, ...]) -> list[str]:
    names = role_names() | operation_names() | template_functions()
    return [f"`{word}`: no role declares this setting" for word in sorted(set(BACKTICKED.findall(doc.read_text())))
            if word.startswith(prefixes) and word not in declared and word not in names]


def other_markdown() -> list[Path]:
    """Every other .md file of the repository (a role's README, a fixture's SOURCES.md, ...)."""
    skip = {".venv", ".lab", ".git", "build", "dist", "node_modules"}
    main = set(documents())
    return sorted(p for p in ROOT.rglob("*.md") if not skip & set(p.relative_to(ROOT).parts) and p not in main
                  and not str(p.relative_to(ROOT)).startswith(generated_folders()))


@pytest.mark.parametrize("doc", other_markdown(), ids=_ids(other_markdown()))
def test_every_reference_in_the_other_markdown_files_resolves(doc):
    """The same checks but the settings one (a vendored or fixture page may name other things)."""
    problems = (_problems_of_links(doc) + _problems_of_md_names(doc) + _problems_of_paths(doc)
                + _problems_of_symbols(doc))
    assert not problems, f"{doc.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("doc", documents(), ids=_ids(documents()))
def test_every_reference_in_the_document_resolves(doc):
    problems = (_problems_of_links(doc) + _problems_of_md_names(doc) + _problems_of_paths(doc)
                + _problems_of_symbols(doc) + _problems_of_settings(doc, declared_settings(), setting_prefixes()))
    assert not problems, f"{doc.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


def test_the_checks_catch_what_went_stale(tmp_path):
    """The checks fail on the kinds of reference that went stale before (so this test can fail)."""
    doc = tmp_path / "DOC.md"
    doc.write_text("See `LAB.md` beside this file, [the reference](REFERENCE.md), `provision/nowhere.py`,\n"
                   "`provision/shell.py::no_such_function`, `vllm_no_such_setting`, [x](#no-heading).\n# A heading\n")
    assert _problems_of_md_names(doc) == ["LAB.md: not in the repository"]
    assert _problems_of_links(doc) == ["link to REFERENCE.md: no such file",
                                       "link to #no-heading: no heading #no-heading in DOC.md"]
    assert _problems_of_paths(doc) == ["provision/nowhere.py: no such path"]
    assert _problems_of_symbols(doc) == ["provision/shell.py::no_such_function: not defined there"]
    assert _problems_of_settings(doc, declared_settings(), setting_prefixes()) == [
        "`vllm_no_such_setting`: no role declares this setting"]
    doc.write_text("[ok](#a-heading) `provision/runner/run_lock.{py,sh}` `provision/shell.py::quote`"
                   " `vllm_port`\n# A heading\n")
    assert not (_problems_of_links(doc) + _problems_of_paths(doc) + _problems_of_symbols(doc)
                + _problems_of_settings(doc, declared_settings(), setting_prefixes()))


FLAG_DEFINED = re.compile(r"""add_argument\(\s*(?:"-\w",\s*)?"(--[a-z][a-z-]*)"(?:,\s*"(--[a-z][a-z-]*)")?""")


def cli_flags() -> set[str]:
    """Every long flag the command line defines (provision/cli/)."""
    found: set[str] = set()
    for path in (ROOT / "provision" / "cli").glob("*.py"):
        for names in FLAG_DEFINED.findall(path.read_text()):
            found |= {name for name in names if name}
    return found


def test_docs_commands_names_every_flag_and_only_real_ones():
    """docs/commands.md is the reference of every flag: one added to the CLI is documented there, and one
    named there is one the CLI has (a renamed flag left in the page fails here)."""
    page = (ROOT / "docs" / "commands.md").read_text()
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*[a-z])", page)) - {"--help"}
    defined = cli_flags()
    assert len(defined) > 30, defined  # the pattern still finds the parser's flags
    assert not defined - named, f"flags the CLI has that docs/commands.md does not name: {sorted(defined - named)}"
    assert not named - defined, f"flags docs/commands.md names that the CLI does not have: {sorted(named - defined)}"


def test_every_reference_section_cited_in_the_code_is_a_section_of_docs_reference():
    """Comments cite the domain facts as "REFERENCE §2" or "REFERENCE.md §1-2": each N is a section of
    docs/reference.md (the page that file became inside the repository)."""
    sections = set(re.findall(r"^## (\d+)\.", (ROOT / "docs" / "reference.md").read_text(), re.M))
    cited: dict[str, set[str]] = {}
    for path in [*ROOT.glob("provision/**/*"), *ROOT.glob("roles/**/*"), *ROOT.glob("tests/**/*")]:
        if not path.is_file() or path.suffix not in {".py", ".yaml", ".yml", ".sh", ".j2", ".md", ".txt"}:
            continue
        for first, last in re.findall(r"REFERENCE(?:\.md)? §(\d+)(?:-(\d+))?", path.read_text(errors="replace")):
            for n in range(int(first), int(last or first) + 1):
                cited.setdefault(str(n), set()).add(str(path.relative_to(ROOT)))
    assert cited, "no citation found: the pattern no longer matches how the code cites the reference"
    missing = {n: sorted(paths) for n, paths in cited.items() if n not in sections}
    assert not missing, f"sections cited but not in docs/reference.md: {missing}"
