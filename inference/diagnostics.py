"""`python -m inference.diagnostics`, as the docs show it: the command is :mod:`inference.commands.diagnostics`."""

if __name__ == "__main__":
    import sys

    from inference.commands.diagnostics import main

    sys.exit(main())
