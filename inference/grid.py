"""`python -m inference.grid`, as the docs show it: the command is :mod:`inference.commands.grid`."""

if __name__ == "__main__":
    import sys

    from inference.commands.grid import main

    sys.exit(main())
