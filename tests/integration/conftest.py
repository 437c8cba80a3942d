"""Integration tests share the e2e suite's CRD fixtures."""

from tests.e2e.conftest import crds, custom, identity  # noqa: F401 - pytest fixtures
