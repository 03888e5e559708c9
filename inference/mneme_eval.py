"""`python -m inference.mneme_eval`, as the docs show it: the command is :mod:`inference.commands.mneme_eval`."""

if __name__ == "__main__":
    import sys

    from inference.commands.mneme_eval import main

    sys.exit(main())
