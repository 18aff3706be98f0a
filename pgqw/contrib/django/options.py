"""A pgqw subcommand's options on a management command, and back to the pgqw command line.

The options are declared once, by `pgqw` (pgqw.cli.build_parser); `manage.py pgqw_worker` takes the same
ones as `pgqw worker` (and `pgqw_migrate` those of `pgqw migrate`), with the same types, checks and help,
and hands them back as a command line to pgqw's own entry point. An option pgqw adds later appears here
without a change.
"""
from __future__ import annotations

import argparse
import copy
from collections.abc import Mapping
from typing import Any


def pgqw_actions(command: str) -> list[argparse.Action]:
    """The options of `pgqw COMMAND` (without --help), from pgqw's own parser."""
    from pgqw.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices[command]._actions if not isinstance(a, argparse._HelpAction)]


def add_pgqw_options(parser: argparse.ArgumentParser, command: str,
                     helps: Mapping[str, str] | None = None) -> list[argparse.Action]:
    """Adds the options of `pgqw COMMAND` to a management command's parser; helps: replacement help texts
    by dest. Returns the added options, for pgqw_argv."""
    added = []
    for action in pgqw_actions(command):
        action = copy.copy(action)
        if helps and action.dest in helps:
            action.help = helps[action.dest]
        parser._add_action(action)
        added.append(action)
    return added


def pgqw_argv(actions: list[argparse.Action], options: Mapping[str, Any], **replace: Any) -> list[str]:
    """The pgqw command-line arguments that give these parsed options (replace: values by dest instead of
    the parsed ones; None leaves an option out)."""
    argv: list[str] = []
    for action in actions:
        value = replace[action.dest] if action.dest in replace else options.get(action.dest)
        if value is None or value is False:
            continue
        if not action.option_strings:
            raise TypeError(f"pgqw's positional argument {action.dest!r} has no option to pass it by")
        flag = max(action.option_strings, key=len)
        if isinstance(action, argparse._StoreTrueAction):
            argv.append(flag)
        elif isinstance(action, argparse._AppendAction):
            for item in value:
                argv += [flag, str(item)]
        elif isinstance(action, argparse._StoreAction):
            argv += [flag, str(value)]
        else:
            raise TypeError(f"pgqw's option {flag} is a {type(action).__name__}, which cannot be passed on")
    return argv
