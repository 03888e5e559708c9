"""`python -m coref.resolver`, as the docs show it: the command is :mod:`inference.commands.resolver`."""

if __name__ == "__main__":
    import sys

    from inference.commands.resolver import main

    sys.exit(main())
