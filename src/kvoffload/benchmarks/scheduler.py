"""TODO placeholder benchmark."""


def add_arguments(parser) -> None:  # noqa: ANN001
    return None


def run(args) -> dict:  # noqa: ANN001
    raise NotImplementedError
