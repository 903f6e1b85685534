"""HRM, TRM, URM and the transformer baseline under one ACT wrapper, state-dict compatible with upstream."""
