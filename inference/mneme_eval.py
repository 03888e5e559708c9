"""`python -m inference.mneme_eval`, as the docs show it: the command is :mod:`inference.evaluation.mneme`."""

if __name__ == "__main__":
    import sys

    from inference.evaluation.mneme import main

    sys.exit(main())
