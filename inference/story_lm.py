"""`python -m inference.story_lm`, as the docs show it: the command is :mod:`inference.training.mneme`."""

if __name__ == "__main__":
    import sys

    from inference.training.mneme import main

    sys.exit(main())
