"""`python -m tracecal.cli`: the command line."""

from tracecal.cli.app import main

if __name__ == "__main__":  # pragma: no cover
    main()
