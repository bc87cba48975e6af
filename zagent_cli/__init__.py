"""The ``zagent`` command line."""
