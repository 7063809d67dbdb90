"""The contract of every member of every plug-in family (scikit-learn's ``estimator_checks`` is the model): each test
is parametrised over a registry, so a new member that breaks its family's contract fails here without a new test."""
