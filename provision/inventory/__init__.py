"""Inventory: host.yaml or an Ansible-style fleet YAML -> validated `Host` objects with merged vars."""

from provision.inventory.extra_vars import parse_extra_vars
from provision.inventory.loader import load_inventory
from provision.inventory.model import Host, Inventory

__all__ = ["Host", "Inventory", "load_inventory", "parse_extra_vars"]
