"""`python -m coref.pos`, as the docs show it: the command is :mod:`inference.commands.pos`."""

if __name__ == "__main__":
    import sys

    from inference.commands.pos import main

    sys.exit(main())
