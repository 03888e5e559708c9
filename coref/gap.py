"""`python -m coref.gap`, as the docs show it: the command is :mod:`inference.commands.gap`."""

if __name__ == "__main__":
    import sys

    from inference.commands.gap import main

    sys.exit(main())
