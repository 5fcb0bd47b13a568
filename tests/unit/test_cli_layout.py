"""The command line as a package: each subcommand's arguments and the function that runs it live together in one
module of ``attnviz.cli`` named for it, and the parser is those modules' pieces in ``--help``'s order."""

import argparse
import importlib

import pytest

from attnviz import cli
from tests.cli import SUBCOMMANDS


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(action for action in parser._actions if action.dest == "command").choices


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_a_subcommand_is_one_module_with_its_arguments_and_its_function(name):
    module = importlib.import_module(f"attnviz.cli.{name.replace('-', '_')}")
    alone = argparse.ArgumentParser(prog="python -m attnviz")
    module.add_command(alone.add_subparsers(dest="command"))
    assert list(subcommands(alone)) == [name]  # the module adds its own subcommand and no other
    command = subcommands(alone)[name]
    assert command.get_default("func").__module__ == module.__name__
    full = subcommands(cli.build_parser())[name]
    assert full.get_default("func") is command.get_default("func")
    assert [a.option_strings or a.dest for a in full._actions] == [a.option_strings or a.dest for a in command._actions]


def test_the_parser_offers_the_modules_in_order():
    assert [module.__name__ for module in cli.COMMANDS] == [f"attnviz.cli.{n.replace('-', '_')}" for n in SUBCOMMANDS]
