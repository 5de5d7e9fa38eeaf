"""Parse arguments, load inputs (before any host is touched), run, print, exit with a status.

Start-up imports only argparse and the argument definitions; the chosen command's module (and with it
rich, pydantic, paramiko, jinja2) is imported after parsing, so `--version` and `--help` are instant.

Exit status: 0 every host ok, 1 a host failed or was unreachable (or the rollout stopped),
2 usage or input error (nothing on any host was changed).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from provision import __version__, content
from provision.cli import arguments
from provision.cli.arguments import add_json_arguments, handler_of
from provision.errors import InputError, ProvisionError
from provision.secrets import REDACTOR

# pyinfra works on every host at once and Ansible on 5; a batch's hosts mostly wait on the network
# and on themselves, so the bound is only against unbounded threads (`--serial` paces a rollout)
DEFAULT_FORKS = 50

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2


class VersionAction(argparse.Action):
    """`--version`: the version, and where the playbook and roles come from (./, or the shipped ones)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"provision {__version__}\n{content.describe()}")
        parser.exit()


def add_inventory_arguments(parser: argparse.ArgumentParser) -> None:
    add_inventory_sources(parser)
    parser.add_argument("-l", "--limit", help="Ansible host pattern: web,db web:&prod all:!lab web* ~re web[0:2] @file")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE",
                        help="override a variable (also @file.yaml or a JSON mapping); repeatable")
    parser.add_argument("--forks", type=arguments.positive_int, default=DEFAULT_FORKS,
                        help=f"hosts worked on in parallel (default {DEFAULT_FORKS}: a whole batch, as pyinfra)")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="-v: each remote command and its exit code; -vv: also its output (secrets ***)")
    parser.add_argument("--roles-path", type=Path, default=None,
                        help="roles folder (default ./roles, else the one beside the playbook, else shipped)")
    parser.add_argument("--trust-new-host-keys", action="store_true",
                        help="record unknown SSH host keys in known_hosts (a changed key is always refused)")
    parser.add_argument("--connect-timeout", type=arguments.number_at_least_0, default=10, metavar="SECONDS",
                        help="give up connecting to a host after this long per attempt (default 10)")
    parser.add_argument("--command-timeout", type=arguments.number_at_least_0, default=7200, metavar="SECONDS",
                        help="a command without its own limit fails after this long (default 7200)")
    parser.add_argument("--silent-timeout", type=arguments.number_at_least_0, default=20, metavar="SECONDS",
                        help="a host that sends nothing for this long mid-run is reported unreachable (default 20)")
    parser.add_argument("-K", "--ask-become-pass", action="store_true",
                        help="ask for the sudo password (hosts whose inventory sets none); fed to sudo on stdin")


def add_inventory_sources(parser: argparse.ArgumentParser) -> None:
    """The inventory, positional or `-i` (repeatable, as with ansible)."""
    parser.add_argument("inventory", type=Path, nargs="?",
                        help="host file (host.yaml), or an Ansible inventory: YAML/INI file, folder, h1,h2,")
    parser.add_argument("-i", "--inventory-source", type=Path, action="append", default=[], dest="inventory_sources",
                        metavar="INVENTORY", help="an inventory source (as ansible's -i); repeatable")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="provision",
        description="Agentless provisioning of GPU inference hosts: a fresh laptop to a validated vLLM endpoint.")
    parser.add_argument("--version", action=VersionAction, nargs=0,
                        help="show the version and which playbook and roles would be used, then exit")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = subcommands.add_parser("up", help="converge hosts: run the playbook (default playbooks/site.yaml)")
    add_inventory_arguments(up)
    up.add_argument("--playbook", type=Path, default=None, help="playbook file (default playbooks/site.yaml)")
    up.add_argument("--check", action="store_true", help="report what would change; change nothing")
    up.add_argument("--diff", action="store_true", help="show the changes to files")
    up.add_argument("-t", "--tags", default="", help="only tasks with these tags (comma-separated; a role's name)")
    up.add_argument("--skip-tags", default="", help="skip tasks with these tags")
    up.add_argument("--serial", help="batch sizes: a number, a percentage, or a ramp like 1,25%%,100%%")
    up.add_argument("--max-fail-percent", type=arguments.number_at_least_0, default=None,
                    help="stop the rollout when more than this percentage of a batch fails")
    arguments.add_wait_lock_argument(up)
    up.add_argument("--bundle", metavar="DIR | host:PATH",
                    help="provision from an offline bundle (`provision bundle`): DIR here, copied to each host, "
                         "or host:PATH already on each host (a USB disk)")
    add_json_arguments(up, document=True)
    up.add_argument("--list-hosts", action="store_true", help="print the hosts each play would run on; run nothing")
    up.add_argument("--list-tasks", action="store_true", help="print the tasks each play would run; run nothing")
    up.set_defaults(handler="provision.cli.up:cmd_up")

    facts = subcommands.add_parser("facts", help="gather and print each host's facts")
    add_inventory_arguments(facts)
    add_json_arguments(facts)
    facts.set_defaults(handler="provision.cli.commands:cmd_facts")

    arguments.add_inventory_command(subcommands, add_inventory_sources)
    arguments.add_serving_commands(subcommands, add_inventory_arguments)
    arguments.add_fleet_commands(subcommands, add_inventory_arguments)
    arguments.add_variables_command(subcommands, add_inventory_arguments)
    arguments.add_gateway_commands(subcommands, add_inventory_arguments)
    arguments.add_models_command(subcommands)
    arguments.add_bundle_command(subcommands, add_inventory_arguments)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    undecodable = next((arg for arg in argv if any("\udc80" <= c <= "\udcff" for c in arg)), None)
    if undecodable is not None:  # Python keeps bytes that are not UTF-8 as lone surrogates; nothing can print them
        print(f"provision: error: an argument is not UTF-8 text: {undecodable!r}", file=sys.stderr)
        return EXIT_INPUT
    args = build_parser().parse_args(argv)
    # paramiko logs every failed attempt with a traceback; retries and errors are reported by us
    logging.getLogger("paramiko").setLevel(logging.CRITICAL + 1)
    from provision.cli.consoles import plain_console, styled  # after parsing: --help needs no rich
    from provision.cli.inputs import Invocation

    errors = plain_console(stderr=True)
    try:
        return handler_of(args)(Invocation(args, plain_console()))
    except InputError as error:
        errors.print(styled("error:", "bold red", f" {REDACTOR(str(error))}"), highlight=False, soft_wrap=True)
        return EXIT_INPUT
    except ProvisionError as error:
        errors.print(styled("error:", "bold red", f" {REDACTOR(str(error))}"), highlight=False, soft_wrap=True)
        return EXIT_FAILED
    except KeyboardInterrupt:
        errors.print(styled("interrupted", "bold red"))
        return 130


if __name__ == "__main__":
    sys.exit(main())
