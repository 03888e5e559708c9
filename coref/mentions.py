"""`python -m coref.mentions`, as the docs show it: the command is :mod:`inference.commands.mentions`."""

if __name__ == "__main__":
    import sys

    from inference.commands.mentions import main

    sys.exit(main())
