"""`python -m coref.score`, as the docs show it: the command is :mod:`inference.commands.score`."""

if __name__ == "__main__":
    import sys

    from inference.commands.score import main

    sys.exit(main())
