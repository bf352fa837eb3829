"""Shared test configuration."""

import atexit
import os
import shutil
import tempfile

# The failure corpus is deliberately broken .qpat text checked by tests/lang/test_checker.py;
# the .qpat pytest plugin must not collect it as rule tests.
collect_ignore_glob = ["lang/failures/*.qpat"]

# Parsed rule files are kept on disk between runs (qlower.lang.parse_store): the tests keep theirs in
# a folder of their own, not the user's cache (the CLI tests' subprocesses inherit it).
if "QLOWER_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="qlower-test-parsed-")
    os.environ["QLOWER_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
