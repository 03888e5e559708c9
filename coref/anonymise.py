"""`python -m coref.anonymise`, as the docs show it: the command is :mod:`coref.corpora.anonymise`."""

if __name__ == "__main__":
    import sys

    from coref.corpora.anonymise import main

    sys.exit(main())
