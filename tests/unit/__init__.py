"""A package, so that its test modules are imported as unit.<name> and may share a basename with another folder's
(tests/unit/test_gates.py beside tests/workflow/test_gates.py)."""
