"""`python -m coref.pos`, as the docs show it: the command is :mod:`coref.resolution.pos`."""

if __name__ == "__main__":
    import sys

    from coref.resolution.pos import main

    sys.exit(main())
