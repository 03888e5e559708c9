"""`python -m inference.pretrain_context`, as the docs show it: the command is
:mod:`inference.commands.pretrain_context`."""

if __name__ == "__main__":
    import sys

    from inference.commands.pretrain_context import main

    sys.exit(main())
