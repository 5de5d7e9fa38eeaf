"""Typed settings: every variable declared once, in `roles/<role>/meta/argument_specs.yaml`, and
every host's merged variables checked against those declarations before any host is contacted."""

from provision.settings.spec import Option, Specs, load_specs
from provision.settings.validate import InvalidSettings, validate_hosts

__all__ = ["InvalidSettings", "Option", "Specs", "load_specs", "validate_hosts"]
