"""Subcommands of the ``kvoffload`` command line, one module each (see ``kvoffload_lab.cli``).

Each module's public API is ``add_parser(subparsers)``, which registers its parser and sets
``func`` (``args -> exit status``); ``kvoffload_lab.commands.errors.CommandError`` is the one error a
command raises for bad input (one line, exit status 2). No command imports the CLI.
"""
