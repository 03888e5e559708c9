"""`python -m coref.corpora`, as the docs show it: the command is :mod:`inference.commands.corpora`."""

if __name__ == "__main__":
    import sys

    from inference.commands.corpora import main

    sys.exit(main())
