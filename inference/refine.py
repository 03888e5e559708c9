"""`python -m inference.refine`, as the docs show it: the command is :mod:`inference.commands.refine`."""

if __name__ == "__main__":
    import sys

    from inference.commands.refine import main

    sys.exit(main())
