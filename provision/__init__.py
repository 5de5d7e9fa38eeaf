"""provision: agentless provisioning of GPU inference hosts."""

__version__ = "0.1.0"
