"""The thin ``python -m`` shells, one module per command: each parses its options, calls the library with plain
arguments or config dataclasses, and writes the result (:mod:`inference.commands.cli` holds what they share)."""
