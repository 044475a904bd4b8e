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
    """Every key of the job file as Markdown: a heading and a table per section. The docs site's
    configuration reference (docs/reference/configuration.md, scripts/docs_pages.py) is this text.

    The job's own keys come first, then the ``source:`` keys every dialect shares, then each
    dialect's own keys (or its own default of a shared one); then the same for the sinks. A new
    dialect or sink gets its section from its registry line.
    """
    groups: list[tuple[str, str, list[Section]]] = [
        ("The job", "The job file's own keys, beside `source:` and `sink:`.", [("", JobConfig, None)]),
        ("`source:`, every type", _first_line(model.SourceConfig), [("source.", model.SourceConfig, None)])]
    for name, config in sorted(source_configs().items()):
        groups.append((f"`source.type: {name}`", _first_line(config), _sections("source.", config, model.SourceConfig)))
    groups.append(("`sink:`, every type", _first_line(model.SinkConfig), [("sink.", model.SinkConfig, None)]))
    for name, sink in sorted(sink_configs().items()):
        groups.append((f"`sink.type: {name}`", _first_line(sink), _sections("sink.", sink, model.SinkConfig)))
    return "\n".join(f"## {title}\n\n{intro}\n\n" + model.config_reference([(*s, "") for s in sections])
                     for title, intro, sections in groups)


Section = tuple[str, type[BaseModel], "list[str] | None"]  # (key prefix, model, the fields to list or None: all)


def _first_line(config: type[BaseModel]) -> str:
    """The first sentence of a config model's docstring, in Markdown."""
    text = " ".join((config.__doc__ or "").split("\n\n")[0].split())
    return text.replace("``", "`")


def _sections(prefix: str, config: type[BaseModel], base: type[BaseModel]) -> list[Section]:
    """A dialect's or sink's own keys, then the keys of each section nested in them."""
    own = _own_fields(config, base)
    out: list[Section] = [(prefix, config, own)]
    for field_name in own:
        nested = config.model_fields[field_name].annotation
        for candidate in getattr(nested, "__args__", (nested,)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                out.append((f"{prefix}{field_name}.", candidate, None))
    return out


def _own_fields(cls: type[BaseModel], base: type[BaseModel]) -> list[str]:
    """The fields ``cls`` adds to ``base`` or declares again (another default, type or text)."""
    inherited = base.model_fields
    return [name for name, info in cls.model_fields.items()
            if name not in inherited or repr(info) != repr(inherited[name])]
