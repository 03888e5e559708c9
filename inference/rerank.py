"""`python -m inference.rerank`, as the docs show it: the command is :mod:`inference.commands.rerank`."""

if __name__ == "__main__":
    import sys

    from inference.commands.rerank import main

    sys.exit(main())
