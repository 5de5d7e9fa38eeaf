import pytest

from provision.playbook.templating import Renderer, TemplateError, make_environment
from provision.secrets import REDACTOR, Secret


def renderer(**variables):
    return Renderer(make_environment(), variables)


def test_single_expression_keeps_type():
    assert renderer(ports=[1, 2]).render("{{ ports }}") == [1, 2]
    assert renderer(n=3).render({"a": ["{{ n + 1 }}"]}) == {"a": [4]}


def test_mixed_text_renders_string():
    assert renderer(name="x").render("name={{ name }}") == "name=x"


def test_undefined_variable_is_an_error_naming_it():
    with pytest.raises(TemplateError, match="missing"):
        renderer().render("{{ missing }}")


def test_when_conditions():
    r = renderer(source="distro", flag=False)
    assert r.condition('source == "distro"')
    assert not r.condition(["source == 'distro'", "flag"])
    assert r.condition(True)


def test_secret_is_revealed_for_the_host_but_redacted_for_people():
    token = Secret("hf_abcdefgh12345")
    rendered = renderer(token=token).render("HF_TOKEN={{ token }}")
    assert rendered == "HF_TOKEN=hf_abcdefgh12345"
    assert REDACTOR(rendered) == "HF_TOKEN=***"
    assert str(token) == "***" and "hf_" not in repr(token) and "hf_" not in f"{token}"


def test_combine_filter():
    assert renderer(a={"x": 1}).render("{{ a | combine({'y': 2}) }}") == {"x": 1, "y": 2}


def test_variables_holding_templates_are_rendered_on_use():
    r = renderer(base="https://example.org", url="{{ base }}/linux/{{ facts.os }}", facts={"os": "debian"},
                 urls=["{{ url }}/gpg"])
    assert r.render("{{ url }}") == "https://example.org/linux/debian"
    assert r.render("{{ urls[0] }}") == "https://example.org/linux/debian/gpg"


def test_a_variable_that_cannot_render_fails_only_when_used():
    r = renderer(later="{{ not_registered_yet.value }}", fine="x")
    assert r.render("{{ fine }}") == "x"
    with pytest.raises(TemplateError, match="later"):
        r.render("{{ later }}")
