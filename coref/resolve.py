"""`python -m coref.resolve`, as the docs show it: the command is :mod:`inference.commands.resolve`."""

if __name__ == "__main__":
    import sys

    from inference.commands.resolve import main

    sys.exit(main())
