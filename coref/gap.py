"""`python -m coref.gap`, as the docs show it: the command is :mod:`coref.corpora.gap`."""

if __name__ == "__main__":
    import sys

    from coref.corpora.gap import main

    sys.exit(main())
