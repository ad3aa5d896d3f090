"""`python -m builder` runs the tfsmith CLI."""

from builder.cli import main

main()
