"""`python -m coref.resolver`, as the docs show it: the command is :mod:`coref.resolution.ranker`."""

if __name__ == "__main__":
    import sys

    from coref.resolution.ranker import main

    sys.exit(main())
