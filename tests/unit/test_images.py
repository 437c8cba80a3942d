"""The images' one definition (hack/images/images.toml): the Dockerfiles are rendered from it without
drift, and it agrees with what the chart runs (user, image name, tag)."""

from __future__ import annotations

import yaml

from tests.support.identity import IMAGE_REPOSITORY
from tests.support.rig import REPO, load_hack_module

images = load_hack_module("images", "images.py")


def test_the_dockerfiles_are_rendered_from_the_definition_without_drift():
    assert images.render(check=True) == 0, "run hack/images.py render"


def test_the_definition_agrees_with_the_chart():
    values = yaml.safe_load((REPO / "charts" / "railyard" / "values.yaml").read_text())
    base = images.definition()["base"]
    uid, gid = (int(x) for x in base["user"].split(":"))
    assert (values["podSecurityContext"]["runAsUser"], values["podSecurityContext"]["runAsGroup"]) == (uid, gid)
    assert values["image"]["repository"] == "", "no default registry: the admin names the one they pushed to"
    assert images.reference("operator") == f"{IMAGE_REPOSITORY}:{images.app_version()}", "the rig's installs"
    assert images.definition()["operator"]["cmd"] == ["operator"], "the chart passes args [operator]"
