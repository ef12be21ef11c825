"""Subcommands of the ``kvoffload`` command line, one module each (see ``kvoffload.cli``)."""
