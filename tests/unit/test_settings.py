"""The operator's settings: read from RAILYARD_* variables in one place, a bad value named with its variable."""

from __future__ import annotations

import pytest
from railyard.operator.base.settings import _VARIABLES, DraMode, Settings, SettingsError


def test_nothing_set_is_every_default_and_the_environment_is_read_only_by_from_env(monkeypatch):
    monkeypatch.setenv("RAILYARD_STARVATION_SECONDS", "5")
    read = Settings.from_env({})
    assert read == Settings(leader=read.leader), "every default (the leader's identity is drawn per process)"
    assert Settings().placement.starvation_seconds == 90, "Settings() ignores the environment"
    assert Settings.from_env().placement.starvation_seconds == 5


def test_each_concern_reads_its_variables_typed():
    settings = Settings.from_env({
        "RAILYARD_PREEMPTION": "off", "RAILYARD_PREEMPTIONS_PER_HOUR": "7", "RAILYARD_SPARES_PER_TOR": "1",
        "RAILYARD_QUARANTINE_MAX_SHARE": "0.2", "RAILYARD_DRA": "ON", "RAILYARD_DEFRAGMENTATION": "yes",
        "RAILYARD_LOSS_DEBOUNCE_SECONDS": "", "RAILYARD_UNRELATED": "x"})
    assert settings.preemption.enabled is False and settings.preemption.per_hour == 7
    assert settings.spares.per_tor == 1 and settings.quarantine.max_share == 0.2
    assert settings.dra.mode is DraMode.ON and settings.defragmentation.enabled is True
    assert settings.faults.loss_debounce_seconds == 2.0, "empty counts as unset"


def test_the_lease_lives_in_the_operators_namespace_unless_told_otherwise():
    assert Settings.from_env({"RAILYARD_NAMESPACE": "ops"}).leader.namespace == "ops"
    assert Settings.from_env({"RAILYARD_NAMESPACE": "ops", "RAILYARD_LEASE_NAMESPACE": "shared"}).leader.namespace \
        == "shared"


@pytest.mark.parametrize(("variable", "raw", "says"), [
    ("RAILYARD_STARVATION_SECONDS", "soon", "expected float"),
    ("RAILYARD_API_WORKERS", "2.5", "expected int"),
    ("RAILYARD_PREEMPTION", "maybe", "expected bool"),
    ("RAILYARD_DRA", "sometimes", "expected DraMode"),
    ("RAILYARD_QUARANTINE_MAX_SHARE", "1.5", "less than or equal to 1"),
    ("RAILYARD_MAX_RESERVATIONS", "0", "greater than or equal to 1"),
    ("RAILYARD_REPORT_RATE", "0", "greater than 0"),
])
def test_a_bad_value_is_an_error_naming_the_variable_and_the_value(variable, raw, says):
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({variable: raw})
    assert str(caught.value).startswith(f"{variable}={raw!r}") and says in str(caught.value)


def test_every_variable_lands_where_the_table_says_and_none_is_claimed_twice():
    assert len(_VARIABLES) == len({path for path, _ in _VARIABLES.values()})
    for variable, (path, field_type) in _VARIABLES.items():
        concern = Settings()
        for part in path:
            concern = getattr(concern, part)
        assert isinstance(concern, field_type if field_type is not str else (str, type(None))), variable


def test_of_rejects_a_name_that_is_no_setting():
    with pytest.raises(SettingsError, match="RAILYARD_SPARES: no such setting"):
        Settings.of({"RAILYARD_SPARES": 1})


def test_the_operator_stops_at_start_on_a_bad_setting_saying_which(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "RAILYARD_API_WORKERS": "lots", "KUBECONFIG": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-m", "railyard.operator.app.cli", "operator"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "RAILYARD_API_WORKERS='lots': expected int" in done.stderr


def test_a_mistyped_variable_is_named_not_silently_dropped():
    from railyard.operator.base.settings import unknown_variables

    assert unknown_variables({"RAILYARD_SPARES_PER_RACK": "1", "RAILYARD_SPARES_PER_TOR": "1", "RAILYARD_DEBUG": "1",
                              "HOME": "/"}) == ["RAILYARD_SPARES_PER_RACK"]
