"""`python -m inference.reading`, as the docs show it: the command is :mod:`inference.commands.reading`."""

if __name__ == "__main__":
    import sys

    from inference.commands.reading import main

    sys.exit(main())
