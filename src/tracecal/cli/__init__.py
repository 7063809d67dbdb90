"""The `tracecal` command line: `tracecal.cli.app` (the typer app, every command registered), `common` (the
consoles, `fail`, the `user_errors` decorator, the number formatter), and one module per command group:
`traces` (generate, score, fit-calibrator), `evaluate`, `listing` (tasks, estimators, passes), `stats` (selective,
learning-curve), `report`, `secl`, `serve`. ``python -m tracecal.cli`` runs the app."""
