"""`python -m inference.marginal_ppl`, as the docs show it: the command is :mod:`inference.commands.marginal_ppl`."""

if __name__ == "__main__":
    import sys

    from inference.commands.marginal_ppl import main

    sys.exit(main())
