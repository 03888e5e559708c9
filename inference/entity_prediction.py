"""`python -m inference.entity_prediction`, as the docs show it: the command is
:mod:`inference.commands.entity_prediction`."""

if __name__ == "__main__":
    import sys

    from inference.commands.entity_prediction import main

    sys.exit(main())
