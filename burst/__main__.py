"""`python -m burst` runs the same CLI as the `burst` console script."""

from burst.cli.main import main

main()
