"""`python -m inference.reading`, as the docs show it: the command is :mod:`inference.training.coref_gru`."""

if __name__ == "__main__":
    import sys

    from inference.training.coref_gru import main

    sys.exit(main())
