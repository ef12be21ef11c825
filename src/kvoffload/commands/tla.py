"""TODO(owner): replace this placeholder with the real command."""


def add_parser(subparsers) -> None:  # noqa: ANN001
    return None
