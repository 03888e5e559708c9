"""`python -m coref.resolve`, as the docs show it: the command is :mod:`coref.resolution.pipeline`."""

if __name__ == "__main__":
    import sys

    from coref.resolution.pipeline import main

    sys.exit(main())
