"""`python -m inference.train`, as the docs show it: the command is :mod:`inference.training.train`."""

if __name__ == "__main__":
    import sys

    from inference.training.train import main

    sys.exit(main())
