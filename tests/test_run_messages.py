"""What ``supervisor run`` says about a new user's mistakes, exactly: a mistyped
setting names the file and the nearest key, a size without a unit is refused, a
``[queues.X]`` table outside ``[tool.supervisor]`` is not silently ignored, ``-n two``
says what -n wants, an --app that fails on import names the file and line, and Ctrl-C
is logged as SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner
from e2e import ROOT, Supervisor

from supervisor.cli.main import main
from supervisor.config import ConfigError, build_config

pytestmark = pytest.mark.timeout(60)


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["run", *args, "--app", "nosuchapp_for_tests"])
    return result.exit_code, result.output


def test_unknown_setting_names_the_file_and_the_nearest_key(tmp_path):
    path = tmp_path / "supervisor.toml"
    path.write_text('max_memory_per_chlid = "1GiB"\n')
    assert run_cli("--config", str(path)) == (2, (
        f"supervisor: error: unknown setting 'max_memory_per_chlid' in {path}; did you "
        "mean 'max_memory_per_child'?\n"))
    path.write_text("[queues.a]\nwieght = 3\n")
    assert run_cli("--config", str(path)) == (2, (
        f"supervisor: error: queue 'a': unknown setting 'wieght' in {path}; did you mean "
        "'weight'?\n"))
    path.write_text("zzz = 3\n")  # nothing close: no guess
    assert run_cli("--config", str(path))[1] == (
        f"supervisor: error: unknown setting 'zzz' in {path}\n")


@pytest.mark.parametrize("value", ["512", '"512"', '"900KB"'])
def test_a_memory_cap_below_one_mib_is_refused(tmp_path, value):
    path = tmp_path / "supervisor.toml"
    path.write_text(f"max_memory_per_child = {value}\n")
    code, output = run_cli("--config", str(path))
    shown = repr(value.strip('"')) if value.startswith('"') else value
    size = 900_000 if "KB" in value else 512
    assert (code, output) == (2, (
        f"supervisor: error: max_memory_per_child: {shown} is {size} bytes, below the 1 MiB "
        'minimum; give a unit, e.g. "512MB" or "1GiB"\n'))
    assert run_cli("--max-memory-per-child", "512")[1] == (
        "supervisor: error: max_memory_per_child: '512' is 512 bytes, below the 1 MiB "
        'minimum; give a unit, e.g. "512MB" or "1GiB"\n')
    assert build_config({"max_memory_per_child": "512MiB"}).max_memory_per_child == 512 << 20


def test_queues_table_outside_tool_supervisor_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[tool.supervisor]\nchildren = 2\n[queues.reports]\naging = 300\n')
    monkeypatch.chdir(tmp_path)
    assert run_cli() == (2, (
        f"supervisor: error: {tmp_path / 'pyproject.toml'}: [queues.reports] is outside "
        "[tool.supervisor] and would be ignored: write it as "
        "[tool.supervisor.queues.reports]\n"))
    (tmp_path / "pyproject.toml").write_text(
        '[tool.supervisor.queues.reports]\naging = 300\n')
    from supervisor.config import load_file_settings
    config = build_config(load_file_settings(None, cwd=tmp_path))
    assert config.policy("reports").aging == 300


def test_children_flag_says_what_it_wants():
    code, output = run_cli("-n", "two")
    assert code == 2
    assert output.splitlines()[-1] == (
        "Error: Invalid value for '-n' / '--children': 'two': -n wants how many child "
        "processes to fork, a whole number of at least 1 (default: the number of CPUs)")


APPS = {
    "badjson": ("import json\n\nCONFIG = json.loads('')\n",
                "badjson.py line 3: JSONDecodeError: Expecting value: line 1 column 1 "
                "(char 0)"),
    "badsyntax": ("def f(:\n    pass\n", "badsyntax.py line 1: SyntaxError: invalid syntax"),
    "badnested": ("import helper_raises\n",
                  "helper_raises.py line 2: RuntimeError: boom"),
    "nosuchapp": (None, "ModuleNotFoundError: No module named 'nosuchapp'"),
}


@pytest.mark.parametrize("name", list(APPS))
def test_app_that_fails_on_import_names_file_and_line(tmp_path, name):
    source, message = APPS[name]
    if source is not None:
        (tmp_path / f"{name}.py").write_text(source)
    (tmp_path / "helper_raises.py").write_text("x = 1\nraise RuntimeError('boom')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app", name, "--dsn",
                           "postgresql://127.0.0.1:1/x"], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=30)
    assert proc.returncode == 1
    assert proc.stderr == f"supervisor: error: cannot import --app {name}: {message}\n"


def test_config_errors_default_to_naming_the_config_file():
    with pytest.raises(ConfigError, match=r"^unknown setting 'chidren' in the config file; "
                                          r"did you mean 'children'\?$"):
        build_config({"chidren": 3})


@pytest.mark.slow
def test_ctrl_c_is_logged_as_sigint(dsn):
    sup = Supervisor(dsn, "-n", "1")
    try:
        sup.wait_for_log("starting 1 children", timeout=30)
        sup.signal(signal.SIGINT)
        sup.wait_for_log("SIGINT: draining")
        assert sup.wait(30) == 0
        assert "SIGTERM" not in sup.err
    finally:
        sup.stop()
