"""`python -m inference.refine`, as the docs show it: the command is :mod:`inference.algorithms.refine`."""

if __name__ == "__main__":
    import sys

    from inference.algorithms.refine import main

    sys.exit(main())
