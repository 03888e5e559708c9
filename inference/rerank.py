"""`python -m inference.rerank`, as the docs show it: the command is :mod:`inference.evaluation.rerank`."""

if __name__ == "__main__":
    import sys

    from inference.evaluation.rerank import main

    sys.exit(main())
