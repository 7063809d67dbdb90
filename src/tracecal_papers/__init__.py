"""Reproducing the papers: the machinery that turns stored runs into the tables of docs/ (results.md, secl.md).

Not part of the library: ``import tracecal`` never loads this package, and nothing under ``tracecal`` imports it
(tests/papers/test_init.py). It reads what tracecal's commands wrote (run directories, SECL result files) and is
driven by the scripts that regenerate docs/ (``scripts/results_tables.py``, ``scripts/secl_grid.py``,
``scripts/secl_tables.py``):

* `tracecal_papers.evidence`: docs/results.md's evidence across models (headline, ablations side by side).
* `tracecal_papers.secl_grid`: the SECL evidence grid: the default configuration and the seven ablations as named
  variants, their run folders, the plan and its time estimate.
* `tracecal_papers.secl_tables`: docs/secl.md's three-family and ablation tables from the SECL run JSONs.
"""
