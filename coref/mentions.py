"""`python -m coref.mentions`, as the docs show it: the command is :mod:`coref.resolution.mentions`."""

if __name__ == "__main__":
    import sys

    from coref.resolution.mentions import main

    sys.exit(main())
