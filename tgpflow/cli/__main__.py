"""``python -m tgpflow.cli``: the ``tgpflow`` command."""

from tgpflow.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
