"""`python -m inference.generate`, as the docs show it: the command is :mod:`inference.commands.generate`."""

if __name__ == "__main__":
    import sys

    from inference.commands.generate import main

    sys.exit(main())
