"""`python -m inference.marginal_ppl`, as the docs show it: the command is :mod:`inference.evaluation.marginal_ppl`."""

if __name__ == "__main__":
    import sys

    from inference.evaluation.marginal_ppl import main

    sys.exit(main())
