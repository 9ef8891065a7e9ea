"""``python -m reconciler`` runs the ``sbrules`` command line."""

from reconciler.cli import main

main()
