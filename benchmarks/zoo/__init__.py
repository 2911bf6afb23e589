"""The model zoo that must analyse (issue 24): see definition.py and runner.py."""
