"""`python -m inference.pretrain_context`, as the docs show it: the command is :mod:`inference.training.context_encoder`."""

if __name__ == "__main__":
    import sys

    from inference.training.context_encoder import main

    sys.exit(main())
