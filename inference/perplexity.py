"""`python -m inference.perplexity`, as the docs show it: the command is :mod:`inference.commands.perplexity`."""

if __name__ == "__main__":
    import sys

    from inference.commands.perplexity import main

    sys.exit(main())
