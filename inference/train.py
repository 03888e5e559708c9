"""`python -m inference.train`, as the docs show it: the command is :mod:`inference.commands.train`."""

if __name__ == "__main__":
    import sys

    from inference.commands.train import main

    sys.exit(main())
