"""Reading a job file with the registered dialects and sinks (the model layer parses; this
module knows which ``source.type`` and ``sink.type`` exist)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from binlog.registry import source_configs
from cdc.model import config as model
from cdc.model.config import JobConfig
from cdc.model.errors import ConfigError
from sinks.registry import sink_configs

DEFAULT_SOURCE, DEFAULT_SINK = "mysql", "delta"


def parse_config(raw: Any, origin: str = "<config>", *, warn_plain_password: bool = True) -> JobConfig:
    """Validate a loaded YAML tree against the registered dialects and sinks.

    Raises:
        ConfigError: the message names every invalid key path.
    """
    return model.parse_config(raw, source_configs(), sink_configs(), origin,
                              warn_plain_password=warn_plain_password,
                              default_types=(DEFAULT_SOURCE, DEFAULT_SINK))


def load_config(path: str | Path) -> JobConfig:
    """Read and validate a YAML job file.

    Raises:
        ConfigError: the file is missing, is not YAML, or does not validate.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(raw, str(path))


def config_reference() -> str:
    """Every key of the job file as a Markdown table (README.md's reference is this text).

    The ``source:`` keys every dialect shares come first, then each dialect's own (or its own
    default), labelled with its ``type``; then each sink's keys.
    """
    sections: list[tuple[str, type[BaseModel], list[str] | None, str]] = [
        ("", JobConfig, None, ""), ("source.", model.SourceConfig, None, "")]
    for name, config in sorted(source_configs().items()):
        sections += _sections("source.", config, model.SourceConfig, name)
    sections.append(("sink.", model.SinkConfig, None, ""))
    for name, sink in sorted(sink_configs().items()):
        sections += _sections("sink.", sink, model.SinkConfig, name)
    return model.config_reference(sections)


def _sections(prefix: str, config: type[BaseModel], base: type[BaseModel],
              name: str) -> list[tuple[str, type[BaseModel], list[str] | None, str]]:
    """A dialect's or sink's own keys, then the keys of each section nested in them."""
    own = _own_fields(config, base)
    out: list[tuple[str, type[BaseModel], list[str] | None, str]] = [(prefix, config, own, f"({name}) ")]
    for field_name in own:
        nested = config.model_fields[field_name].annotation
        for candidate in getattr(nested, "__args__", (nested,)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                out.append((f"{prefix}{field_name}.", candidate, None, f"({name}) "))
    return out


def _own_fields(cls: type[BaseModel], base: type[BaseModel]) -> list[str]:
    """The fields ``cls`` adds to ``base`` or declares again (another default, type or text)."""
    inherited = base.model_fields
    return [name for name, info in cls.model_fields.items()
            if name not in inherited or repr(info) != repr(inherited[name])]
