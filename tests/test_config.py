"""Config file and flag parsing for ``supervisor run``."""

import pytest

from shared.units import parse_duration, parse_size
from supervisor.config import (
    ConfigError,
    apply_queue_flags,
    build_config,
    load_file_settings,
)


def test_pyproject_section_is_read(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.supervisor]\nchildren = 3\nmax-memory-per-child = "1GiB"\n'
        "[tool.supervisor.queues.images]\nweight = 3\nmax_rate = 20\nburst = 5\n"
    )
    config = build_config(load_file_settings(None, cwd=tmp_path))
    assert config.children == 3
    assert config.max_memory_per_child == 1024**3
    images = config.policy("images")
    assert (images.weight, images.max_rate, images.burst) == (3, 20, 5)
    assert config.policy("other").weight == 1


def test_explicit_file_and_cli_overrides(tmp_path):
    path = tmp_path / "supervisor.toml"
    path.write_text("children = 3\ngrace = 10\n[queues.a]\nmax_workers = 2\n")
    config = build_config(load_file_settings(str(path)), {"children": 5, "grace": None})
    assert config.children == 5 and config.grace == 10
    config = apply_queue_flags(config, ["a.max_workers=1", "b.prefetch=8"])
    assert config.policy("a").max_workers == 1
    assert config.policy("b").prefetch == 8


@pytest.mark.parametrize(
    "text, message",
    [
        ("childrn = 3\n", "unknown setting 'childrn'"),
        ("[queues.a]\nwieght = 3\n", "queue 'a': unknown setting 'wieght'"),
        ("[queues.a]\nweight = 0\n", "weight must be > 0"),
        ("heartbeat_timeout = 1\nheartbeat_interval = 2\n", "heartbeat_timeout"),
        ("children = [\n", "cannot read config file"),
        # The aged claim computes now() - aging seconds: past a century it overflows
        # (tests/test_aging.py), so the setting is refused here, not at every claim.
        ("[queues.a]\naging = 1e12\n", "queue 'a': aging must be .* at most 3153600000"),
        ("database_deadline = 0\n", "database_deadline must be positive"),
        ("statement_timeout = 5\n", "statement_timeout .5 s. must be below database_deadline"),
        ("statement_timeout = 1\ndatabase_deadline = 1\n", "must be below database_deadline"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path, text, message):
    path = tmp_path / "supervisor.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        build_config(load_file_settings(str(path)))


def test_missing_config_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load_file_settings("/nonexistent/supervisor.toml")


def test_bad_queue_flag():
    config = build_config({})
    with pytest.raises(ConfigError, match=r"QUEUE\.KEY=VALUE"):
        apply_queue_flags(config, ["images-max_rate=3"])
    with pytest.raises(ConfigError, match=r"images\.max_rate: expected a number, got 'fast'"):
        apply_queue_flags(config, ["images.max_rate=fast"])
    assert apply_queue_flags(config, ["images.aging=30s"]).policy("images").aging == 30.0
    with pytest.raises(ConfigError, match=r"queue 'images': aging must be .* at most"):
        apply_queue_flags(config, ["images.aging=1000000000000"])


def test_run_refuses_an_aging_the_claim_cannot_compute_with_one_line():
    from click.testing import CliRunner

    from supervisor.cli.main import main

    result = CliRunner().invoke(main, ["run", "-n", "1", "--app", "nowhere",
                                       "--queue-setting", "images.aging=1000000000000"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "queue 'images': aging must be" in lines[0] and "Traceback" not in result.output


def test_parse_size():
    assert parse_size("512MB") == 512 * 1000**2
    assert parse_size("1GiB") == 1024**3
    assert parse_size(4096) == 4096
    with pytest.raises(ValueError, match="expected a size"):
        parse_size("lots")


def test_parse_duration():
    assert parse_duration("250ms") == 0.25
    assert parse_duration("7d") == 7 * 86400
    assert parse_duration("5") == 5.0 and parse_duration(2) == 2.0
    for bad in ("soon", "-3s", True, float("inf")):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)


@pytest.mark.parametrize("text, expected", [
    ('retention = "7d"\n', ("retention", 7 * 86400.0)),
    ('default_timeout = "5"\n', ("default_timeout", 5.0)),
    ('grace = "90s"\nkill_grace = "500ms"\n', ("kill_grace", 0.5)),
    ('max_memory_per_child = "512MB"\n', ("max_memory_per_child", 512 * 1000**2)),
])
def test_durations_and_sizes_take_units(tmp_path, text, expected):
    path = tmp_path / "supervisor.toml"
    path.write_text(text)
    key, value = expected
    assert getattr(build_config(load_file_settings(str(path))), key) == value


@pytest.mark.parametrize("text, message", [
    ('prefetch = "4"\n', "prefetch: expected a whole number, got '4'"),
    ('max_jobs_per_child = "100"\n', "max_jobs_per_child: expected a whole number"),
    ("children = 2.5\n", "children: expected a whole number, got 2.5"),
    ('retention = "a week"\n', "retention: expected seconds or a duration"),
    ('synchronous_commit = "off"\n', "unknown setting 'synchronous_commit'"),
    ('metrics_port = "9100"\n', "metrics_port: expected a whole number"),
    ('[queues.a]\nweight = "3"\n', "queue 'a': weight: expected a number, got '3'"),
    ('[queues.a]\nmax_workers = true\n', "queue 'a': max_workers: expected a whole number"),
    ("[queues]\na = 3\n", "queues.a: expected a table of settings"),
])
def test_a_setting_of_the_wrong_type_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "supervisor.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        build_config(load_file_settings(str(path)))


@pytest.mark.parametrize(("size", "shown"), [
    (512, "0.5 KiB"), (1024**2, "1 MiB"), (1536 * 1024, "1.5 MiB"), (300 * 1024**2, "300 MiB"),
    (2076 * 1024**2 + 300_000, "2076 MiB"),
])
def test_sizes_are_shown_with_a_unit_that_shows_them(size, shown):
    """A memory-cap message once read 'RSS 29 MiB passed the 0 MiB max_memory_per_child'
    for a cap of 512 bytes (issue 30)."""
    from shared.units import format_size

    assert format_size(size) == shown


@pytest.mark.parametrize(("value", "kept"), [("64KiB", 65536), (0, 0), ("1MB", 1_000_000)])
def test_output_capture_is_a_size_and_reaches_the_children(value, kept):
    config = build_config({"output_capture": value})
    assert config.output_capture == kept and config.pool_settings().output_capture == kept


@pytest.mark.parametrize(("value", "message"), [
    ("-1", "expected a size"), ("20MB", "over the 16 MiB maximum"), ("lots", "expected a size"),
])
def test_a_bad_output_capture_is_one_clear_error(value, message):
    with pytest.raises(ConfigError, match=message):
        build_config({}, {"output_capture": value})
