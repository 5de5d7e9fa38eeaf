"""The controller's caches (controller_cache.py): compiled Jinja templates and parsed role YAML kept
between runs. A hint only: what comes out of a cache equals what compiling or parsing gives, a broken
file is compiled or parsed again, an error is never kept, and a secret is never written."""

from __future__ import annotations

import jinja2
import pytest

from provision import yaml_loader
from provision.errors import InputError
from provision.playbook import template_cache
from provision.playbook.templating import Renderer, make_environment
from provision.secrets import Secret
from provision.yaml_loader import load_yaml_file


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def generated(monkeypatch):
    """How many times Jinja generated code (lexing, parsing and code generation: what is cached)."""
    calls: list[str] = []
    generate = jinja2.Environment._generate

    def counting(self, source, *args, **kwargs):
        calls.append("generate")
        return generate(self, source, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "_generate", counting)
    return calls


def render_all(variables):
    renderer = Renderer(make_environment(), variables)
    return (renderer.render("port {{ port + 1 }} on {% if tls %}https{% else %}http{% endif %}"),
            renderer.render("{{ names | join(',') }}"), renderer.condition("port > 80 and tls"))


def test_a_second_run_compiles_nothing_and_renders_the_same(cache_dir, generated):
    first = render_all({"port": 8000, "tls": True, "names": ["a", "b"]})
    assert generated and list((cache_dir / "templates").iterdir())
    compiled_once = len(generated)
    second = render_all({"port": 8000, "tls": True, "names": ["a", "b"]})  # a new environment: a new run
    assert second == first == ("port 8001 on https", "a,b", True)
    assert len(generated) == compiled_once
    assert render_all({"port": 80, "tls": False, "names": []}) == ("port 81 on http", "", False)


def test_a_broken_cache_file_is_compiled_again(cache_dir, generated):
    render_all({"port": 1, "tls": True, "names": []})
    for stored in (cache_dir / "templates").iterdir():
        stored.write_bytes(b"not marshal")
    compiled = len(generated)
    assert render_all({"port": 1, "tls": True, "names": []}) == ("port 2 on https", "", False)
    assert len(generated) > compiled


def test_a_syntax_error_is_jinjas_own_and_never_kept(cache_dir):
    with pytest.raises(jinja2.TemplateSyntaxError) as plain:
        jinja2.Environment().compile_expression("port +")
    for _ in range(2):
        with pytest.raises(jinja2.TemplateSyntaxError) as cached:
            make_environment().compile_expression("port +")
        assert str(cached.value) == str(plain.value)
    assert not (cache_dir / "templates").exists()


def test_a_template_holding_a_secret_is_not_written(cache_dir):
    Secret("hunter2-token-value")
    rendered = Renderer(make_environment(), {}).render("Bearer hunter2-token-value {{ 1 }}")
    assert rendered == "Bearer hunter2-token-value 1"
    assert not (cache_dir / "templates").exists()


def test_the_cache_files_are_the_users_own(cache_dir):
    render_all({"port": 1, "tls": True, "names": []})
    folder = cache_dir / "templates"
    assert folder.stat().st_mode & 0o777 == 0o700
    assert {path.stat().st_mode & 0o777 for path in folder.iterdir()} == {0o600}


def test_a_change_in_the_templating_code_is_a_different_key(cache_dir, monkeypatch, generated):
    render_all({"port": 1, "tls": True, "names": []})
    compiled = len(generated)
    monkeypatch.setattr(template_cache, "_VERSION", "another provision")
    render_all({"port": 1, "tls": True, "names": []})
    assert len(generated) == 2 * compiled


ROLE_TASKS = """\
- name: a task
  file: {path: /etc/x, state: directory}
  when: facts.os.id == "debian"
"""


def test_role_yaml_is_parsed_once_with_its_lines(cache_dir, tmp_path, monkeypatch):
    path = tmp_path / "tasks.yaml"
    path.write_text(ROLE_TASKS)
    parsed = load_yaml_file(path)
    assert load_yaml_file(path, cached=True) == parsed
    monkeypatch.setattr(yaml_loader, "load_yaml_text", lambda *_: pytest.fail("parsed again"))
    again = load_yaml_file(path, cached=True)
    assert (again.data, again.key_lines, again.value_lines) == (parsed.data, parsed.key_lines, parsed.value_lines)
    assert again.line((0, "when")) == 3


def test_an_edited_file_is_read_as_it_is_now(cache_dir, tmp_path):
    path = tmp_path / "defaults.yaml"
    path.write_text("port: 8000\n")
    assert load_yaml_file(path, cached=True).data == {"port": 8000}
    path.write_text("port: 9000\n")
    assert load_yaml_file(path, cached=True).data == {"port": 9000}


def test_an_error_is_reported_every_time_and_never_kept(cache_dir, tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_text("a: 1\na: 2\n")
    for _ in range(2):
        with pytest.raises(InputError, match="duplicate key") as error:
            load_yaml_file(path, cached=True)
        assert f"{path}:2" in str(error.value)
    assert not (cache_dir / "yaml").exists()


def test_a_document_with_a_secret_is_parsed_every_time_and_not_written(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_TOKEN", "s3cr3t-value-here")
    path = tmp_path / "vars.yaml"
    path.write_text("token: !env SOME_TOKEN\nplain: !secret also-s3cr3t\n")
    for _ in range(2):
        data = load_yaml_file(path, cached=True).data
        assert isinstance(data["token"], Secret) and data["token"].reveal() == "s3cr3t-value-here"
    assert not (cache_dir / "yaml").exists()
