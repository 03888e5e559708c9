"""`python -m coref.score`, as the docs show it: the command is :mod:`coref.metrics.score`."""

if __name__ == "__main__":
    import sys

    from coref.metrics.score import main

    sys.exit(main())
