"""`python -m inference.story_lm`, as the docs show it: the command is :mod:`inference.commands.story_lm`."""

if __name__ == "__main__":
    import sys

    from inference.commands.story_lm import main

    sys.exit(main())
