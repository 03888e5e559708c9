"""`python -m inference.grid`, as the docs show it: the command is :mod:`inference.training.grid`."""

if __name__ == "__main__":
    import sys

    from inference.training.grid import main

    sys.exit(main())
