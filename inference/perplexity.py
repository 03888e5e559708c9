"""`python -m inference.perplexity`, as the docs show it: the command is :mod:`inference.evaluation.perplexity`."""

if __name__ == "__main__":
    import sys

    from inference.evaluation.perplexity import main

    sys.exit(main())
