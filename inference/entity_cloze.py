"""`python -m inference.entity_cloze`, as the docs show it: the command is :mod:`inference.commands.entity_cloze`."""

if __name__ == "__main__":
    import sys

    from inference.commands.entity_cloze import main

    sys.exit(main())
