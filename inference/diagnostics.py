"""`python -m inference.diagnostics`, as the docs show it: the command is :mod:`inference.evaluation.diagnostics`."""

if __name__ == "__main__":
    import sys

    from inference.evaluation.diagnostics import main

    sys.exit(main())
