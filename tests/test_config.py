"""Config validation: good files load, bad ones name the key path, secrets stay secret."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from binlog.mysql.config import server_id_range
from cdc.app.config import config_reference, load_config, parse_config
from cdc.model.config import parse_duration_s
from cdc.model.errors import ConfigError

GOOD: dict[str, Any] = {
    "source": {"username": "cdc", "password": "${TEST_CDC_PW}", "tables": ["shop\\..*"]},
    "sink": {"type": "delta", "path": "./lake"},
    "checkpoint": "./checkpoints/shop",
}


def with_source(**changes: Any) -> dict[str, Any]:
    return {**GOOD, "source": {**GOOD["source"], **changes}}


@pytest.fixture(autouse=True)
def _password_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_CDC_PW", "s3cret-value")


def test_good_config_gets_defaults_and_expands_env() -> None:
    config = parse_config(GOOD)
    assert config.source.resolved_password() == "s3cret-value"
    assert config.source.chunk_size == 32768 and config.source.startup_mode == "initial"
    assert config.parallelism == 2 and parse_duration_s(config.trigger_interval) == 1.0
    assert "s3cret-value" not in repr(config) and "s3cret-value" not in str(config)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (with_source(chunk_size=0), r"source\.chunk_size: .*greater than 0 \(got 0\)"),
        (with_source(chunk_sise=5), r"source\.chunk_sise: unknown key"),
        (with_source(server_id="9-3"), r"source\.server_id: .*first <= last"),
        (with_source(tables=[]), r"source\.tables: "),
        (with_source(tables=["shop.("]), r"source\.tables: .*not a valid regular expression"),
        (with_source(startup_mode="now"), r"source\.startup_mode: "),
        (with_source(startup_mode="specific-offset"), r"source: .*startup_offset"),
        (with_source(startup_mode="timestamp"), r"source: .*startup_timestamp_ms"),
        (with_source(port=70000), r"source\.port: "),
        ({**GOOD, "trigger_interval": "soon"}, r"trigger_interval: .*duration"),
        ({**GOOD, "parallelism": 0}, r"parallelism: "),
        ({k: v for k, v in GOOD.items() if k != "sink"}, r"sink: Field required"),
        ({**GOOD, "sink": {"type": "iceberg", "path": "x"}}, r"sink\.type: "),
    ],
)
def test_bad_config_names_the_key_path(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_missing_env_var_names_the_key_and_variable() -> None:
    with pytest.raises(ConfigError, match=r"source\.password: environment variable NOT_SET_ANYWHERE"):
        parse_config(with_source(password="${NOT_SET_ANYWHERE}"))


def test_plain_text_password_warns_without_the_value(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cdc.model.config"):
        parse_config(with_source(password="hunter2"))
    assert "plain text" in caplog.text and "hunter2" not in caplog.text


def test_invalid_password_value_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(with_source(password=["hunter2"]))
    assert "hunter2" not in str(info.value)


def test_password_file(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    source = {k: v for k, v in GOOD["source"].items() if k != "password"}
    config = parse_config({**GOOD, "source": {**source, "password_file": str(secret)}})
    assert config.source.resolved_password() == "from-file"
    with pytest.raises(ConfigError, match="password or password_file, not both"):
        parse_config(with_source(password_file=str(secret)))


def test_load_config_reports_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("source: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)


def test_example_configs_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYSQL_PASSWORD", "from-env")
    for name, value in {"MYSQL_HOST": "127.0.0.1", "MYSQL_PORT": "3307", "CDC_DEMO_DIR": "/tmp/demo",
                        "KAFKA_BOOTSTRAP": "127.0.0.1:9092", "KAFKA_USER": "u", "KAFKA_PASSWORD": "p",
                        "PG_HOST": "127.0.0.1", "PG_PORT": "5432", "PG_PASSWORD": "from-env",
                        "PULSAR_SERVICE_URL": "pulsar://127.0.0.1:6650",
                        "PULSAR_ADMIN_URL": "http://127.0.0.1:8080",
                        "PRAVEGA_CONTROLLER_URI": "tcp://127.0.0.1:9090"}.items():
        monkeypatch.setenv(name, value)  # configs/demo*.yaml: set by `python -m cdc demo`; kafka.yaml: by you
    for path in sorted(Path(__file__).parent.parent.joinpath("configs").glob("*.yaml")):
        load_config(path)


def test_server_id_ranges_and_durations() -> None:
    assert list(server_id_range("5400-5402")) == [5400, 5401, 5402]
    assert list(server_id_range("7")) == [7]
    with pytest.raises(ValueError):
        server_id_range("0")
    assert parse_duration_s("500ms") == 0.5 and parse_duration_s("2m") == 120


def test_every_invalid_key_is_listed_separately() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**with_source(chunk_size=0, port="x"), "parallelism": 0})
    errors = info.value.context["errors"]
    assert len(errors) == 3 and all(": " in e for e in errors)
    assert {e.split(":")[0] for e in errors} == {"source.chunk_size", "source.port", "parallelism"}


def test_state_dir_defaults_to_next_to_the_checkpoint() -> None:
    assert parse_config(GOOD).state_path() == "./checkpoints/shop_state"
    assert parse_config({**GOOD, "state_dir": "/s"}).state_path() == "/s"


def test_config_reference_lists_every_key_with_a_meaning() -> None:
    reference = config_reference()
    for key in ("checkpoint", "source.hostname", "source.startup_offset.file", "sink.storage_options"):
        assert f"| `{key}` |" in reference
    rows = [line for line in reference.splitlines()[2:] if line.startswith("| `")]
    assert all(not line.endswith("|  |") for line in rows), "a field has no description"


def test_every_registered_sink_serves_its_own_type_with_its_own_config_model() -> None:
    from sinks.registry import SINK_NAMES, config_class, sink_class, sink_module

    for name in SINK_NAMES:
        assert sink_class(name).name == name
        assert sink_class(name).config_class is config_class(name)
        assert sink_class(name).__module__ == sink_module(name)
    with pytest.raises(ConfigError, match=r"sink\.type 'nope' is not one of"):
        sink_class("nope")
