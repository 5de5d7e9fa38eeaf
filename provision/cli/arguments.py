"""The subcommands' arguments, apart from their handlers, so that `provision --help` and a typo's usage
error import none of what the commands run (pydantic models, paramiko, jinja2, the docker SDK).

A handler is named, not imported: `"provision.cli.fleet:cmd_plan"`, resolved by `handler_of` once the
arguments are parsed; only the chosen command's module is imported.
"""

from __future__ import annotations

import argparse
import importlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

AddArguments = Callable[[argparse.ArgumentParser], None]


def positive_int(text: str) -> int:
    """An argument that counts something: a whole number of at least 1 (`--forks 0` would run nothing)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def number_at_least_0(text: str) -> float:
    """A duration or a percentage: a finite number of at least 0 (`nan` compares false with every
    deadline, `inf` never comes, a negative one has passed)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of at least 0, got {text!r}")
    return value


def output_file(text: str) -> Path:
    """A file to write (`--json-file`): refused now when it is a folder or its folder is missing, not
    after the run."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: give the path of a file")
    if not path.absolute().parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder of {text!r} does not exist")
    return path


def handler_of(args: argparse.Namespace) -> Callable[..., int]:
    """The function a parsed command line runs, imported now (`module:function`)."""
    module, _, name = args.handler.partition(":")
    return getattr(importlib.import_module(module), name)


def add_json_arguments(parser: argparse.ArgumentParser, document: bool = False) -> None:
    """`--json` means one thing in every command: the command's result as JSON on stdout (progress on
    stderr). Commands that produce a results document also take `--json-file PATH`."""
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout (progress on stderr)")
    if document:
        parser.add_argument("--json-file", type=output_file, dest="json_path", metavar="PATH",
                            help="also write the results document (per host and task) to PATH")


def add_wait_lock_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait-lock", type=number_at_least_0, default=0, metavar="SECONDS", dest="wait_lock",
                        help="when another run holds a host, wait up to this long for it (default: refuse at once)")


def _playbook_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--playbook", type=Path, default=None, help="playbook file (default playbooks/site.yaml)")


def add_inventory_command(subcommands: Any, add_inventory_sources: AddArguments) -> None:
    """`provision inventory`."""
    parser = subcommands.add_parser("inventory", help="show the hosts, groups and variables as resolved (no contact)")
    add_inventory_sources(parser)
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--list", action="store_true", help="every group and host variable as JSON (the default)")
    shown.add_argument("--graph", nargs="?", const="all", metavar="GROUP", help="the group tree (from GROUP)")
    shown.add_argument("--host", metavar="NAME", help="one host's variables as JSON")
    parser.add_argument("-l", "--limit", help="Ansible host pattern selecting the hosts shown")
    parser.add_argument("--playbook", type=Path, default=None,
                        help="playbook whose folder's group_vars/host_vars apply (default playbooks/site.yaml)")
    parser.set_defaults(handler="provision.cli.inventory_cmd:cmd_inventory")


def add_serving_commands(subcommands: Any, add_inventory_arguments: AddArguments) -> None:
    """smoke, rollback and render."""
    smoke = subcommands.add_parser("smoke", help="wait for the model server, then the text and vision smoke checks")
    rollback = subcommands.add_parser("rollback", help="serve the previous release again (checked)")
    for parser, handler in ((smoke, "cmd_smoke"), (rollback, "cmd_rollback")):
        add_inventory_arguments(parser)
        _playbook_argument(parser)
        add_json_arguments(parser, document=True)
        parser.set_defaults(handler=f"provision.cli.serving:{handler}")
    add_wait_lock_argument(rollback)
    render = subcommands.add_parser("render", help="print each host's `vllm serve` arguments, one a line")
    render.add_argument("inventory", type=Path, help="host file (host.yaml) or Ansible-style fleet inventory")
    render.add_argument("-l", "--limit", help="hosts or groups (comma-separated, globs, !exclude)")
    render.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE",
                        help="override a variable (also @file.yaml or a JSON mapping); repeatable")
    _playbook_argument(render)
    render.add_argument("--roles-path", type=Path, default=None, help="roles folder (default ./roles, else shipped)")
    add_json_arguments(render)
    render.set_defaults(handler="provision.cli.serving:cmd_render")


def add_fleet_commands(subcommands: Any, add_inventory_arguments: AddArguments) -> None:
    """plan, bench and status."""
    from provision.vllm.bench import BenchSettings  # dataclasses only: the defaults shown in --help
    from provision.vllm.office_bench import OfficeWorkload

    plan = subcommands.add_parser("plan", help="per host: does max_model_len fit the GPU; the largest that does")
    bench = subcommands.add_parser("bench", help="measure decode tokens/s and judge its stability")
    status = subcommands.add_parser("status", help="per host: GPU, service, release, flag drift, health, metrics")
    for parser in (plan, bench, status):
        add_inventory_arguments(parser)
        _playbook_argument(parser)
    add_json_arguments(plan)
    plan.set_defaults(handler="provision.cli.fleet:cmd_plan")
    defaults = BenchSettings()
    bench.add_argument("--runs", type=positive_int, default=defaults.runs, help="measured runs after one warm-up (10)")
    office = OfficeWorkload()
    bench.add_argument("--workload", choices=("seed", "office"), default="seed",
                       help="seed: one fixed long generation, judged for stability (default); office: N users "
                            "sending documents up to the context with an image, kept as history per release")
    bench.add_argument("--max-tokens", type=positive_int, default=None,
                       help=f"tokens per run, forced (seed {defaults.max_tokens}, office {office.max_tokens})")
    bench.add_argument("--users", type=positive_int, default=office.users, help="office: concurrent users (3)")
    bench.add_argument("--gate", type=number_at_least_0, default=office.gate_tokens_per_s, dest="gate_tokens_per_s",
                       help="office: every stream must decode faster than this, tok/s (100)")
    bench.add_argument("--noise-band-percent", type=number_at_least_0, default=office.noise_band_percent,
                       help="office: a drop beyond this against the previous release's result is a regression (10)")
    bench.add_argument("--concurrency", type=positive_int, default=defaults.concurrency, help="requests at a time (1)")
    bench.add_argument("--max-range-percent", type=number_at_least_0, default=defaults.thresholds.max_range_percent,
                       help="fail when max - min exceeds this percentage of the mean (10)")
    bench.add_argument("--max-cv-percent", type=number_at_least_0, default=defaults.thresholds.max_cv_percent,
                       help="fail when the coefficient of variation exceeds this (5)")
    bench.add_argument("--cluster-gap-percent", type=number_at_least_0, default=defaults.thresholds.cluster_gap_percent,
                       help="runs further apart than this percentage of the median form separate clusters (20)")
    add_json_arguments(bench, document=True)
    bench.set_defaults(handler="provision.cli.fleet:cmd_bench")
    add_json_arguments(status)
    status.add_argument("--html", type=Path, default=None, metavar="FILE",
                        help="also write the status as one self-contained HTML page (charts included, works offline)")
    status.set_defaults(handler="provision.cli.fleet:cmd_status")


def add_gateway_commands(subcommands: Any, add_inventory_arguments: AddArguments) -> None:
    """`provision drain` and `provision undrain` (the office gateway's runtime API)."""
    drain = subcommands.add_parser("drain", help="the office gateway sends HOST no new request; those in flight finish")
    undrain = subcommands.add_parser("undrain", help="the office gateway sends HOST requests again")
    for parser, handler in ((drain, "cmd_drain"), (undrain, "cmd_undrain")):
        add_inventory_arguments(parser)
        parser.add_argument("host", help="the backend host (its inventory name)")
        _playbook_argument(parser)
        parser.set_defaults(handler=f"provision.cli.gateway:{handler}", wait=0)
    drain.add_argument("--wait", type=int, default=300, metavar="SECONDS",
                       help="wait this long for the requests in flight on HOST to finish (default 300)")


def add_variables_command(subcommands: Any, add_inventory_arguments: AddArguments) -> None:
    """`provision vars`."""
    variables = subcommands.add_parser("vars", help="every effective variable of each host, and where it was set")
    add_inventory_arguments(variables)
    variables.add_argument("--host", help="only this host")
    _playbook_argument(variables)
    add_json_arguments(variables)
    variables.set_defaults(handler="provision.cli.variables:cmd_vars")


def add_models_command(subcommands: Any) -> None:
    """`provision models`."""
    models = subcommands.add_parser("models", help="the model profiles and the context each fits on each known GPU")
    models.add_argument("--roles-path", type=Path, default=None, help="roles folder (default ./roles, else shipped)")
    add_json_arguments(models)
    models.set_defaults(handler="provision.cli.models:cmd_models")


def add_bundle_command(subcommands: Any, add_inventory_arguments: AddArguments) -> None:
    """`provision bundle`."""
    bundle = subcommands.add_parser("bundle", help="gather what the hosts need (packages, image, weights) into a "
                                                   "folder, for hosts with no internet (`up --bundle`)")
    add_inventory_arguments(bundle)
    _playbook_argument(bundle)
    bundle.add_argument("--out", type=Path, required=True, metavar="DIR", help="the bundle folder (created; a "
                        "killed build run again resumes)")
    bundle.add_argument("-t", "--tags", default="", help="only what these tags' tasks need (as `up --tags`)")
    bundle.add_argument("--skip-tags", default="", help="not what these tags' tasks need")
    bundle.add_argument("--key-dir", type=Path, default=Path("~/.config/provision/bundle-key"), metavar="DIR",
                        help="GnuPG home of the key that signs the bundle's apt repositories (made on first use)")
    bundle.set_defaults(handler="provision.cli.bundle:cmd_bundle")
