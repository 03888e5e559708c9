"""`python -m inference.posterior`, as the docs show it: the command is :mod:`inference.commands.posterior`."""

if __name__ == "__main__":
    import sys

    from inference.commands.posterior import main

    sys.exit(main())
