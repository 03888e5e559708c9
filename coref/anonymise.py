"""`python -m coref.anonymise`, as the docs show it: the command is :mod:`inference.commands.anonymise`."""

if __name__ == "__main__":
    import sys

    from inference.commands.anonymise import main

    sys.exit(main())
