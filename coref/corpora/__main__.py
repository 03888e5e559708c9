"""`python -m coref.corpora`, as the docs show it: the command is :mod:`coref.corpora.registry`."""

import sys

from coref.corpora.registry import main

sys.exit(main())
