"""Shared test configuration."""

# The failure corpus is deliberately broken .qpat text checked by tests/lang/test_checker.py;
# the .qpat pytest plugin must not collect it as rule tests.
collect_ignore_glob = ["lang/failures/*.qpat"]
