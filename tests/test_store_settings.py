"""The store's settings come through its constructor (issue 41): the engine resolves the
handlers' ``max_attempts``, ``poison_after`` and crash rule once and hands them to the
``Database`` it makes, which hands them to its ``Store``; nothing writes them later."""

from __future__ import annotations

import selectors
from dataclasses import FrozenInstanceError

import admission_handlers  # noqa: F401  (registers adm_segv_tolerated, adm_raise)
import pytest

from shared import defaults, jobs
from supervisor.config import RunConfig
from supervisor.db import Database, Store, StoreSettings
from supervisor.engine import Engine
from supervisor.observe.metrics import SupervisorMetrics

DSN = "postgresql://app@db.example/app"  # never connected to: nothing here opens it


def test_a_store_made_without_settings_applies_the_built_in_defaults():
    settings = Store(None, "me").settings
    assert settings.max_attempts == {} and settings.poison_after == {}
    assert settings.default_attempts == jobs.DEFAULT_MAX_ATTEMPTS
    assert settings.default_poison_after == defaults.POISON_AFTER


def test_the_database_hands_its_settings_to_its_store_and_they_cannot_change():
    settings = StoreSettings(max_attempts={"k": 2}, default_attempts=9)
    db = Database(DSN, "me", 30.0, selectors.DefaultSelector(), statement_timeout=5.0,
                  store_settings=settings)
    assert db.store.settings is settings
    with pytest.raises(FrozenInstanceError):
        settings.default_attempts = 1  # type: ignore[misc]


def test_the_engine_resolves_the_handlers_settings_once_for_the_store_it_makes():
    config = RunConfig(children=1, max_attempts=4, poison_after=3)
    engine = Engine(config, DSN, "me", ["default"], ["adm_segv_tolerated", "adm_raise"],
                    SupervisorMetrics("me"), selectors.DefaultSelector())
    settings = engine.db.store.settings
    assert settings.max_attempts == {"adm_segv_tolerated": 20, "adm_raise": 3}
    assert settings.default_attempts == 4
    assert settings.poison_after == {"adm_segv_tolerated": 0}
    assert settings.default_poison_after == 3
    assert engine.reporter.crash_rule is settings.crash_rule
