"""`python -m inference.generate`, as the docs show it: the command is :mod:`inference.algorithms.generate`."""

if __name__ == "__main__":
    import sys

    from inference.algorithms.generate import main

    sys.exit(main())
