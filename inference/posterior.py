"""`python -m inference.posterior`, as the docs show it: the command is :mod:`inference.algorithms.posterior`."""

if __name__ == "__main__":
    import sys

    from inference.algorithms.posterior import main

    sys.exit(main())
