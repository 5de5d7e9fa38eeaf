"""HostFacts: what one probe found out about a host, as immutable values.

Operations plan from these (a pure function of facts and arguments), preflight refuses on them, and
templates read them through `as_vars()` (`facts.os.codename`, `facts.gpus[0].compute_cap`). The
fields are those the registered sections set (facts/sections.py; the generic ones' value types are
here, the NVIDIA ones' in provision/gpu/model.py). Every field has an "unknown/absent" default, so
`HostFacts.empty()` is a valid host that has nothing: the placeholder for check mode before a probe
ran, and the base that unit tests `replace()` from. Sequences are tuples (lists given to the
constructor are turned into tuples) so facts stay frozen.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Literal

from provision.errors import FactNotGathered

# "bios": booted without EFI (legacy BIOS/CSM, or a VM's direct kernel boot); "not_supported": EFI
# firmware without Secure Boot. In both Secure Boot cannot refuse a module, as with "disabled".
SecureBootState = Literal["enabled", "disabled", "bios", "not_supported", "unknown"]
SECURE_BOOT_WORDS: dict[str, str] = {"bios": "not available (BIOS boot)",
                                     "not_supported": "not available (the EFI firmware has none)"}


@dataclass(frozen=True)
class OsInfo:
    """From /etc/os-release: `id` "ubuntu"/"debian", `version_id` "24.04"/"12", `codename` "noble"."""

    id: str = ""
    version_id: str = ""
    codename: str = ""
    pretty: str = ""


@dataclass(frozen=True)
class DiskFree:
    """One filesystem from `df -Pk`: `path` is its mount point."""

    path: str
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class InstalledPackage:
    """A package dpkg has installed: the driver's (`nvidia-*`, `libnvidia-*`, ...) or a kernel meta-package."""

    name: str
    version: str
    held: bool = False


@dataclass(frozen=True)
class AptSourceLine:
    """A line of an apt sources file: a deb line, or a deb822 URIs or Signed-By line."""

    path: str
    line: str


@dataclass(frozen=True)
class LoginSession:
    """A logind session: `remote` False is someone at the machine (a desktop or a console login)."""

    id: str
    remote: bool
    session_class: str = ""
    type: str = ""
    state: str = ""


if TYPE_CHECKING:
    from provision.facts.sections import Registry


def _registry() -> Registry:
    from provision.facts.sections import registry  # not at import: the owners' modules import this one

    return registry()


class HostFacts:
    """Everything the probe learns about a host: `facts.NAME` for each registered field (see the
    owners' probe shell for the sources). Frozen, compared and hashed by value, like a dataclass.

    `gathered` is the fields this probe read (None: all of them); reading another one raises
    FactNotGathered. Derived fields are set when their inputs were gathered.
    """

    __slots__ = ("_values", "gathered")
    _values: dict[str, Any]
    gathered: frozenset[str] | None

    def __init__(self, gathered: frozenset[str] | None = None, **values: Any) -> None:
        registry = _registry()
        unknown = sorted(set(values) - registry.init_fields)
        if unknown:
            raise TypeError(f"HostFacts has no probed field {unknown[0]!r}")
        given = {name: values.get(name, default) for name, default in registry.defaults.items()}
        for name, default in registry.defaults.items():
            if isinstance(default, tuple):
                given[name] = tuple(given[name])
        for derived in registry.derived:
            computed = gathered is None or set(derived.inputs) <= gathered
            given[derived.name] = derived.compute(*(given[i] for i in derived.inputs)) if computed \
                else derived.default
        object.__setattr__(self, "_values", given)
        object.__setattr__(self, "gathered", gathered)

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name not in values:
            raise AttributeError(f"HostFacts has no fact {name!r}")
        gathered = object.__getattribute__(self, "gathered")
        if gathered is not None and name not in gathered:
            raise FactNotGathered(name)
        return values[name]

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostFacts) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={self._values[name]!r}" for name in self.known_fields())
        return f"HostFacts({shown})"

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle rebuild through __init__ (it is frozen)
        return (_rebuild, (self.gathered, self._probed()))

    def _probed(self) -> dict[str, Any]:
        init = _registry().init_fields
        return {name: value for name, value in self._values.items() if name in init}

    def replace(self, **changes: Any) -> HostFacts:
        """These facts with some probed fields changed (derived ones follow), as dataclasses.replace."""
        return HostFacts(gathered=self.gathered, **{**self._probed(), **changes})

    def known_fields(self) -> list[str]:
        """The fields that were gathered, in registration order."""
        return [name for name in _registry().field_order if self.gathered is None or name in self.gathered]

    def merged(self, more: HostFacts) -> HostFacts:
        """These facts with those `more` gathered in addition (a later play that reads more)."""
        mine, theirs = self.gathered, more.gathered
        if mine is None:
            return self
        init = _registry().init_fields
        values = {name: self._values[name] for name in self.known_fields() if name in init}
        values.update({name: more._values[name] for name in more.known_fields() if name in init})
        return HostFacts(**values, gathered=None if theirs is None else mine | theirs)

    @classmethod
    def empty(cls) -> HostFacts:
        """A host about which nothing is known (check-mode placeholder, unit-test base)."""
        return cls()

    def free_bytes(self, path: str) -> int | None:
        """Free bytes on the filesystem holding `path` (longest mount-point prefix); None if unknown."""
        best: DiskFree | None = None
        for disk in self.disks:
            mount = disk.path.rstrip("/") or "/"
            inside = mount == "/" or path == mount or path.startswith(mount + "/")
            if inside and (best is None or len(mount) > len(best.path.rstrip("/") or "/")):
                best = disk
        return None if best is None else best.free_bytes

    def as_vars(self) -> dict[str, Any]:
        """Plain nested dicts and lists of every gathered field, for Jinja templates and `--facts` output."""
        return {name: _plain(self._values[name]) for name in self.known_fields()}


def _rebuild(gathered: frozenset[str] | None, values: dict[str, Any]) -> HostFacts:
    return HostFacts(gathered=gathered, **values)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
