"""`apt`: Debian packages present (optionally at pinned versions), latest, or absent; held or not.

Converged means: every package installed (at its pinned version, `*` globs allowed) or absent, and,
with `hold: true`, held. An apt cache refresh (`update_cache`) happens only as part of an install,
and only when the lists are older than `cache_valid_time` (or a package to install has no candidate);
on its own (no packages) it is not a change. An interrupted dpkg (`dpkg --audit`, pending updates, or
a half-installed package) is repaired first with `dpkg --configure -a`, waiting for the dpkg lock.
`start_services: false` installs under a temporary /usr/sbin/policy-rc.d that forbids starting
daemons (removed by a trap; a copy left by a killed run is found by the probe and removed). A
policy-rc.d that someone else put there is left alone. Held packages are changed with
`--allow-change-held-packages` and held again afterwards. `latest` with a stale cache cannot know in
advance whether a newer version exists: the plan refreshes and installs, and apply reports a change
only when a version actually moved.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from provision.errors import TaskFailed
from provision.facts.dpkg_rows import dpkg_rows_shell
from provision.ops.apt_update import apt_update_script, update_stall_progress
from provision.ops.base import Action, ApplyContext, ApplyResult, OpArgs, Operation, Plan, Probe, register
from provision.ops.dpkg_lock import dpkg_lock_script, lock_wait_progress
from provision.ops.needs import Need, Packages
from provision.ops.scripting import quick_block
from provision.ops.streaming import run_streaming
from provision.shell import Command, parse_fields, parse_records, quote

PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?$")
PACKAGE_VERSION = re.compile(r"^[A-Za-z0-9.+~:*-]+$")
HALF_STATES = set("HUFWt")
POLICY_RC = "/usr/sbin/policy-rc.d"
POLICY_RC_MARK = "provision-temporary"
UPDATE_STAMP = "/var/lib/apt/periodic/update-success-stamp"
APT_GET = ("apt-get -y -q -o DPkg::Lock::Timeout=600 "
           "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold")
CHANGED_MARK = "provision_changed=1"
DPKG_LOCK_TIMEOUT_S = 600


def _package_list(value: object) -> object:
    """`curl`, `[curl, jq=1.6-2]` or `{curl: null, jq: 1.6-2}` -> ["curl", "jq=1.6-2"]."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [f"{name}={version}" if version not in (None, "") else str(name) for name, version in value.items()]
    return value


class AptArgs(OpArgs):
    name: Annotated[list[str], BeforeValidator(_package_list)] = []
    state: Literal["present", "absent", "latest"] = "present"
    hold: bool | None = None
    update_cache: bool = False
    cache_valid_time: int = Field(default=3600, ge=0)
    install_recommends: bool = True
    start_services: bool = True
    purge: bool = False
    # packages of another origin or flavour that `name` replaces: removed (purged with purge: true)
    # in the same apt-get transaction that installs `name`, so no mixture of the two is ever left
    replaces: list[str] = []

    @field_validator("name", "replaces")
    @classmethod
    def _valid_specs(cls, value: list[str]) -> list[str]:
        for spec in value:
            package, _, version = spec.partition("=")
            if not PACKAGE_NAME.match(package):
                raise ValueError(f"{package!r} is not a valid Debian package name")
            if "=" in spec and not PACKAGE_VERSION.match(version):
                raise ValueError(f"{version!r} is not a valid package version (in {spec!r})")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> AptArgs:
        pinned = [spec for spec in self.name if "=" in spec]
        if pinned and self.state != "present":
            raise ValueError(f"pinned versions ({', '.join(pinned)}) only make sense with state: present")
        if self.hold and self.state == "absent":
            raise ValueError("hold: true contradicts state: absent")
        if self.replaces and self.state == "absent":
            raise ValueError("replaces only makes sense with packages to install (state: present or latest)")
        if any("=" in spec for spec in self.replaces):
            raise ValueError("replaces names packages, without versions")
        return self

    @property
    def specs(self) -> list[tuple[str, str | None]]:
        """(package, version or None) pairs."""
        return [(spec.partition("=")[0], spec.partition("=")[2] or None) for spec in self.name]


@dataclass(frozen=True)
class PackageState:
    version: str
    status: str  # dpkg's db:Status-Abbrev: want, status, error flags ("ii ", "hi ", "iU ", "rc ")

    @property
    def installed(self) -> bool:
        return self.status[1:2] == "i"

    @property
    def half(self) -> bool:
        return self.status[1:2] in HALF_STATES or self.status[2:3] == "R"

    @property
    def present(self) -> bool:
        """Anything dpkg would have to remove (installed, half-installed, or config files for purge)."""
        return self.status[1:2] not in ("n", "")


@dataclass
class AptState:
    packages: dict[str, PackageState]
    held: set[str]
    candidates: dict[str, str]
    dpkg_interrupted: bool
    policy_rc: str  # "", "leftover" (ours, from a killed run) or "foreign"
    cache_age: float | None  # seconds; None: no lists at all


def _bare(package: str) -> str:
    return package.split(":", 1)[0]


def parse_state(state: str) -> AptState:
    if "now=" not in state:
        raise TaskFailed(f"the apt probe printed nothing usable: {state.strip()[:200]!r}")
    packages = {}
    for record in parse_records(state, "pkg"):
        parts = record.split("\t")
        if len(parts) >= 3:
            packages[parts[0]] = PackageState(version=parts[1], status=parts[2].ljust(3))
    candidates = {}
    for record in parse_records(state, "candidate"):
        package, _, version = record.partition("\t")
        if version and version != "(none)":
            candidates[_bare(package)] = version
    fields = parse_fields(state)
    held = {name for name, pkg in packages.items() if pkg.status[:1] == "h"}
    now = float(fields.get("now") or 0)
    newest = float(fields.get("lists_mtime") or 0)  # the lists' and the update stamp's newest
    return AptState(
        packages=packages,
        held={_bare(name) for name in held},
        candidates=candidates,
        dpkg_interrupted=bool(fields.get("dpkg_audit") or fields.get("dpkg_updates")),
        policy_rc=fields.get("policy_rc", ""),
        cache_age=(now - newest) if newest and now else None,
    )


def version_matches(installed: str, wanted: str) -> bool:
    return fnmatch.fnmatchcase(installed, wanted) if "*" in wanted else installed == wanted


# holds are dpkg selections: Status-Abbrev's first letter is "h" (so no slow `apt-mark showhold`)
PROBE_PACKAGES = r"""dpkg_rows apt NAMES; state=${dpkg_rows_out%$'\n'}
while IFS= read -r line; do [ -n "$line" ] && echo "pkg=$line"; done <<<"$state"
"""
# apt-cache is slow (it builds its cache): ask it only about the packages that are not installed
PROBE_NOT_INSTALLED = r"""need=''
for p in NAMES; do
  found=''
  while IFS=$'\t' read -r name _ status; do
    [ "$name" = "${p%%:*}" ] && [ "${status:1:1}" = i ] && found=1
  done <<<"$state"
  [ -n "$found" ] || need="$need $p"
done"""
PROBE_CANDIDATES = r"""[ -n "$need" ] && apt-cache policy -- $need \
  | awk '/^[^ ]/ { name = $1; sub(/:$/, "", name) } /^  Candidate:/ { print "candidate=" name "\t" $2 }'"""
# What `dpkg --configure -a` repairs: a package left half-way by an interrupted dpkg (the states
# `dpkg --audit` lists as installed only partially, dpkg(1) and dpkg's src/main/enquiry.c), read from
# the status file with one grep instead of dpkg's own audit (it loads the whole database: ~10 ms of
# the host's CPU, in every apt task's probe), and journal entries dpkg has not folded in yet.
DPKG_STATUS = "/var/lib/dpkg/status"
DPKG_INTERRUPTED = ("^Status: [a-z]+ [a-z]+ "
                    "(half-installed|unpacked|half-configured|triggers-awaited|triggers-pending)$")
# The grep (~1.6 ms of a lab host's CPU, most of a converged apt probe) runs only when the status file
# may have changed since a read found it clean: a probe stamps `.checked` before it reads and `.clean`
# after a read that found nothing, both in the tool's folder (as the run lock's holder record, in
# --check too). Skipped only while `.checked` is newer than the status file (so that read saw this
# content) and `.clean` is not older than `.checked` (that read ended clean; a probe killed between the
# two, or a read that found a package half-way, leaves `.checked` newer). Writes within one clock tick
# have equal times (measured: two files written in turn, the same ns): not newer, so read again.
DPKG_STATUS_READ = "/var/lib/provision/dpkg-status"


def interrupted_dpkg_probe(status: str = DPKG_STATUS, stamps: str = DPKG_STATUS_READ) -> str:
    """The probe lines that print `dpkg_audit=1` when the status file names a package half-way."""
    checked, clean = quote(stamps + ".checked"), quote(stamps + ".clean")
    return rf"""if ! [ {checked} -nt {quote(status)} ] || ! [ -e {clean} ] || [ {checked} -nt {clean} ]; then
  echo > {checked}
  if grep -Eq '{DPKG_INTERRUPTED}' {quote(status)}; then echo dpkg_audit=1; else echo > {clean}; fi
fi"""


PROBE_SYSTEM = rf"""{interrupted_dpkg_probe()}
for f in /var/lib/dpkg/updates/*; do [ -e "$f" ] && echo dpkg_updates=1; break; done
if [ -e {POLICY_RC} ]; then
  grep -q {POLICY_RC_MARK} {POLICY_RC} && echo policy_rc=leftover || echo policy_rc=foreign
fi
echo "now=${{EPOCHSECONDS:-$(date +%s)}}"
"""
# the lists' and the update stamp's newest mtime: one stat of them all (find | sort | tail was three
# processes), the newest picked by bash
PROBE_LISTS = rf"""lists=()
for f in /var/lib/apt/lists/*; do [ -f "$f" ] && [ "${{f##*/}}" != lock ] && lists+=("$f"); done
newest=0
while read -r mtime; do [ "$mtime" -gt "$newest" ] && newest=$mtime
done < <(stat -c %Y -- "${{lists[@]}}" {UPDATE_STAMP} 2>/dev/null)
echo "lists_mtime=$newest"
"""

DPKG_CONFIGURE = """dpkg_configure() {
  local deadline=$((SECONDS + 600)) out rc
  while :; do
    rc=0; out=$(dpkg --force-confdef --force-confold --configure -a 2>&1) || rc=$?
    printf '%s\\n' "$out" >&2
    [ "$rc" -eq 0 ] && return 0
    case "$out" in *lock*) [ "$SECONDS" -lt "$deadline" ] && { sleep 5; continue; } ;; esac
    return "$rc"
  done
}
dpkg_configure"""


def install_script(install_args: str, start_services: bool) -> str:
    """apt-get install, under a temporary policy-rc.d (removed by a trap) when services must not start."""
    install = f"{APT_GET} install {install_args}"
    if start_services:
        return install
    policy = f"#!/bin/sh\\n# {POLICY_RC_MARK}: keeps package scripts from starting services\\nexit 101\\n"
    return f"""(
if [ ! -e {POLICY_RC} ] || grep -q {POLICY_RC_MARK} {POLICY_RC}; then
  trap 'rm -f -- {POLICY_RC} {POLICY_RC}.provision' EXIT
  printf '{policy}' > {POLICY_RC}.provision
  chmod 0755 {POLICY_RC}.provision
  mv -f -- {POLICY_RC}.provision {POLICY_RC}
fi
{install}
)"""


def package_words(value: Any) -> list[str]:
    """`name:` as a task gives it (a word, a list, or a name -> version mapping) as `name[=version]` words."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, dict):
        return [f"{name}={version}" if version else str(name) for name, version in value.items()]
    return [str(item) for item in value or []]


@dataclass(frozen=True)
class UpgradeIfNewer(Action):
    """Run `command`, an "upgrade if newer" whose versions are not known before: it changed the host
    when it printed CHANGED_MARK (the versions moved)."""

    command: Command


@register
class AptOperation(Operation):
    name = "apt"
    Args = AptArgs
    refreshes_facts = True  # drivers, docker and the like are facts
    offline_arguments = ("name", "state", "install_recommends")
    offline_reports_unrendered = True  # a package the bundle lacks would fail the offline run

    def offline_needs(self, args: dict[str, Any], render_file: Callable[[str], str]) -> list[Need]:
        if args.get("state", "present") not in ("present", "latest"):
            return []
        return [Packages(tuple(package_words(args.get("name"))), bool(args.get("install_recommends", True)))]

    def probe(self, args: AptArgs) -> Probe[AptState]:
        names = " ".join(quote(package) for package in [*(p for p, _ in args.specs), *args.replaces])
        parts = []
        if names:
            parts += [dpkg_rows_shell(), PROBE_PACKAGES.replace("NAMES", names)]
        if names and (args.update_cache or args.state == "latest"):
            if args.state == "latest":
                parts.append(f"need={quote(' '.join(package for package, _ in args.specs))}")
            else:
                parts.append(PROBE_NOT_INSTALLED.replace("NAMES", names))
            parts.append(PROBE_CANDIDATES)
        parts.append(PROBE_SYSTEM)
        parts.append(self._lists_probe(args))
        return Probe(quick_block("\n".join(parts)), parse_state)

    @staticmethod
    def _lists_probe(args: AptArgs) -> str:
        """The lists' age, read only where `plan` may refresh them: with `update_cache`, and (for
        unpinned packages to keep present) only when one of them is not installed as `plan` counts it
        (the last dpkg line of its name, installed and not reinst-required): a converged rerun skips a
        stat of every list (~2 ms of the host's CPU)."""
        if not args.update_cache or args.state == "absent":
            return ""
        names = [name for name, _ in args.specs]
        if not names or args.state == "latest" or any(version for _, version in args.specs):
            return PROBE_LISTS
        return rf"""missing=''
for p in {" ".join(quote(name) for name in names)}; do
  found=''
  while IFS=$'\t' read -r name _ status; do
    [ "$name" = "${{p%%:*}}" ] && {{ found=''; [ "${{status:1:1}}" = i ] && [ "${{status:2:1}}" != R ] && found=1; }}
  done <<<"$state"
  [ -n "$found" ] || missing=1
done
if [ -n "$missing" ]; then
{PROBE_LISTS}fi"""

    def plan(self, args: AptArgs, facts: Any, current: AptState) -> Plan:
        packages = {name: current.packages.get(_bare(name)) for name, _ in args.specs}
        repair = current.dpkg_interrupted or any(pkg and pkg.half for pkg in packages.values())
        install, remove, upgrade_unknown = self._package_changes(args, current, packages)
        replaced = [name for name in args.replaces
                    if (pkg := current.packages.get(_bare(name))) and (pkg.installed or pkg.half)]
        names = [name for name, _ in args.specs]
        held = [name for name in names if _bare(name) in current.held]
        hold = [name for name in names if name not in held] if args.hold else []
        unhold = held if args.hold is False else []
        stale = current.cache_age is None or current.cache_age > args.cache_valid_time
        no_candidate = any(_bare(spec.partition("=")[0]) not in current.candidates for spec in install)
        refresh = args.update_cache and (stale or no_candidate) and bool(install or upgrade_unknown or not names)
        if upgrade_unknown and not refresh:
            upgrade_unknown = []  # the cache is fresh: the candidates already said nothing is newer

        steps: list[str] = []
        summary: list[str] = []
        if repair:
            steps.append(DPKG_CONFIGURE)
            summary.append("repair interrupted dpkg")
        if current.policy_rc == "leftover":
            steps.append(f"rm -f -- {POLICY_RC}")
            summary.append(f"remove leftover {POLICY_RC}")
        if unhold:
            steps.append("apt-mark unhold " + " ".join(map(quote, unhold)))
            summary.append("unhold " + " ".join(unhold))
        if refresh:
            stamp_dir = UPDATE_STAMP.rsplit("/", 1)[0]
            steps.append(f"{apt_update_script(APT_GET)}\nmkdir -p -- {stamp_dir}\ntouch -- {UPDATE_STAMP}")
            summary.append("refresh apt cache")
        if upgrade_unknown:
            steps.append(f"before=$({self._versions_query(upgrade_unknown)})")
        targets = install + [name for name in upgrade_unknown if name not in install]
        if targets or replaced:
            if not targets:
                targets = [name for name, _ in args.specs]  # installed already: the transaction only removes
            steps.append(install_script(self._install_flags(args, targets, held, replaced), args.start_services))
            summary.append(("install " if install else "upgrade if newer ") + " ".join(targets))
            if replaced:
                summary.append(("purge " if args.purge else "remove ") + " ".join(replaced) + " (replaced)")
        if remove:
            verb = "purge" if args.purge else "remove"
            allow = " --allow-change-held-packages" if any(name in held for name in remove) else ""
            steps.append(f"{APT_GET} {verb}{allow} " + " ".join(map(quote, remove)))
            summary.append(f"{verb} " + " ".join(remove))
        changed_names = {spec.partition("=")[0] for spec in targets}
        # apt-get drops the hold of a held package it installs (--allow-change-held-packages): hold again
        rehold = hold + ([name for name in held if name in changed_names] if args.hold is not False else [])
        if rehold:
            steps.append("apt-mark hold " + " ".join(map(quote, rehold)))
            if hold:
                summary.append("hold " + " ".join(hold))
        if upgrade_unknown:
            steps.append(f'[ "$before" = "$({self._versions_query(upgrade_unknown)})" ] || echo {CHANGED_MARK}')

        if not steps:
            return Plan.ok(self._converged_summary(args))
        changed = bool(repair or current.policy_rc == "leftover" or unhold or install or remove or hold or replaced)
        # wait for the dpkg lock ourselves first, showing who holds it (apt-get waits silently)
        steps.insert(0, f"{dpkg_lock_script()}\nwait_dpkg_lock {DPKG_LOCK_TIMEOUT_S}")
        command = Command(script="\n".join(steps), description="apt: " + "; ".join(summary))
        detect = bool(upgrade_unknown) and not changed
        return Plan(changed=changed, steps=[UpgradeIfNewer(command.description, command) if detect else command],
                    summary="; ".join(summary))

    def _package_changes(
        self, args: AptArgs, current: AptState, packages: dict[str, PackageState | None],
    ) -> tuple[list[str], list[str], list[str]]:
        """(specs to install, names to remove, installed names that may have a newer version)."""
        install, remove, upgrade_unknown = [], [], []
        for name, version in args.specs:
            package = packages[name]
            spec = f"{name}={version}" if version else name
            if args.state == "absent":
                if package and (package.present if args.purge else package.installed or package.half):
                    remove.append(name)
                continue
            wrong_version = bool(package and version and not version_matches(package.version, version))
            if package is None or not package.installed or package.half or wrong_version:
                install.append(spec)
            elif args.state == "latest":
                candidate = current.candidates.get(_bare(name))
                if candidate and candidate != package.version:
                    install.append(spec)
                else:
                    upgrade_unknown.append(name)
        return install, remove, upgrade_unknown

    @staticmethod
    def _install_flags(args: AptArgs, targets: list[str], held: list[str], replaced: Sequence[str] = ()) -> str:
        """apt-get install's arguments; `replaced` packages get apt's trailing "-" (remove in this transaction)."""
        flags = ["--purge"] if replaced and args.purge else []
        if not args.install_recommends:
            flags.append("--no-install-recommends")
        if any("=" in spec for spec in targets):
            flags.append("--allow-downgrades")
        if any(spec.partition("=")[0] in held for spec in targets) or replaced:
            flags.append("--allow-change-held-packages")  # a replaced driver was usually held
        return " ".join([*flags, *map(quote, targets), *(quote(name + "-") for name in replaced)])

    @staticmethod
    def _versions_query(names: list[str]) -> str:
        return "dpkg-query -W -f='${Package}=${Version}\\n' -- " + " ".join(map(quote, names)) + " || true"

    @staticmethod
    def _converged_summary(args: AptArgs) -> str:
        if not args.name:
            return "apt cache is fresh"
        what = {"present": "installed", "latest": "at the latest version", "absent": "absent"}[args.state]
        held = " and held" if args.hold else ""
        return f"{', '.join(args.name)}: {what}{held}"

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        def on_line(line: str) -> None:
            if (waiting := lock_wait_progress(line) or update_stall_progress(line)) is not None:
                ctx.progress(waiting)

        last = None
        changed = plan.changed
        for step in plan.steps:
            if isinstance(step, UpgradeIfNewer):
                last = run_streaming(ctx.conn, step.command, on_line)
                changed = changed or CHANGED_MARK in last.stdout
            elif isinstance(step, Command):
                last = run_streaming(ctx.conn, step, on_line)
            else:
                raise TypeError(f"apt cannot apply {step!r}")
        return ApplyResult(changed=changed, stdout=last.stdout if last else "",
                           stderr=last.stderr if last else "", rc=last.rc if last else 0, result=dict(plan.result))
