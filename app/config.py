"""Configuration: conf/base.yaml layered with conf/<env>.yaml, ${ENV} substitution, --set overrides,
validated once into frozen dataclasses. Nothing else in the application reads YAML or env vars.

Errors name the offending key ('kafka.request_timeout_s: expected a number, got 'soon'').
Kafka client properties pass through untouched; every printed or logged form of the config goes
through `redact`, so secrets never leave the process in clear.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONF_DIR = REPO_ROOT / "conf"
LOCAL_BOOTSTRAP = "local"  # sentinel: the embedded broker managed by `offset-audit kafka-local`

_SECRET_KEY = re.compile(
    r"(password|secret|token|jaas|credential|api[._-]?key|private|key\.pem|keystore)", re.I
)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
REDACTED = "***"


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    app_name: str = "offset-audit"
    shuffle_partitions: int = 4
    driver_memory: str = "4g"
    # 'auto': leave the session alone when spark-submit already configured it (a real cluster),
    # otherwise build a local one. 'local': always local. 'cluster': never touch master or jars.
    mode: str = "auto"
    conf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.shuffle_partitions < 1:
            raise ConfigError("spark.shuffle_partitions", "must be at least 1")
        if self.mode not in ("auto", "local", "cluster"):
            raise ConfigError("spark.mode", f"must be auto, local or cluster, got '{self.mode}'")


@dataclass(frozen=True)
class LocalKafkaConfig:
    offsets_partitions: int = 5
    start_timeout_s: float = 90.0
    heap: str = "512m"

    def __post_init__(self) -> None:
        if not 1 <= self.offsets_partitions <= 1000:
            raise ConfigError("local_kafka.offsets_partitions", "must be between 1 and 1000")
        if self.start_timeout_s <= 0:
            raise ConfigError("local_kafka.start_timeout_s", "must be positive")


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str = LOCAL_BOOTSTRAP
    request_timeout_s: float = 30.0
    # Properties for every client (Spark's Java client and confluent-kafka's librdkafka) ...
    client: dict[str, str] = field(default_factory=dict, repr=False)
    # ... and those only one of the two understands (e.g. sasl.jaas.config vs sasl.username).
    java: dict[str, str] = field(default_factory=dict, repr=False)
    librdkafka: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigError("kafka.bootstrap_servers", "must not be empty")
        if self.request_timeout_s <= 0:
            raise ConfigError("kafka.request_timeout_s", "must be positive")
        for section, props in (("client", self.client), ("java", self.java), ("librdkafka", self.librdkafka)):
            if "bootstrap.servers" in props:
                raise ConfigError(f"kafka.{section}.bootstrap.servers", "set kafka.bootstrap_servers instead")

    @property
    def is_local(self) -> bool:
        return self.bootstrap_servers == LOCAL_BOOTSTRAP

    def __repr__(self) -> str:
        return f"KafkaConfig({redact(dataclasses.asdict(self))})"


@dataclass(frozen=True)
class PathsConfig:
    # A string, not a Path: on a cluster it is a URI (s3a://, abfss://) that Path would mangle.
    data_dir: str = "data"
    cache_dir: Path = Path("~/.cache/offset-audit")

    def __post_init__(self) -> None:
        if not self.data_dir.strip():
            raise ConfigError("paths.data_dir", "must not be empty")

    def under(self, *parts: str) -> str:
        return "/".join([self.data_dir.rstrip("/"), *parts])

    def table(self, name: str) -> str:
        return self.under("tables", name)

    @property
    def kafka_dir(self) -> Path:
        """Storage of the embedded broker: always a local directory."""
        return Path(self.data_dir) / "kafka"

    @property
    def checkpoints_dir(self) -> str:
        return self.under("checkpoints")


@dataclass(frozen=True)
class AppConfig:
    env: str
    paths: PathsConfig = field(default_factory=PathsConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    local_kafka: LocalKafkaConfig = field(default_factory=LocalKafkaConfig)
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError("log_level", f"must be DEBUG, INFO, WARNING or ERROR, got '{self.log_level}'")

    def to_display(self) -> dict[str, Any]:
        """The config as a plain, redacted mapping: the only form that is ever printed or logged."""
        return typing.cast(dict[str, Any], redact(_plain(dataclasses.asdict(self))))


# --- loading -------------------------------------------------------------------------------------


def available_envs(conf_dir: Path) -> list[str]:
    return sorted(p.stem for p in conf_dir.glob("*.yaml") if p.stem != "base")


def load_config(
    env: str = "local",
    overrides: list[str] | None = None,
    conf_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> AppConfig:
    """Read, layer, substitute and validate. `environ` is injected so tests need not touch os.environ."""
    directory = conf_dir or DEFAULT_CONF_DIR
    env_file = directory / f"{env}.yaml"
    if env == "base" or not env_file.exists():
        raise ConfigError(
            "env", f"unknown environment '{env}'; available: {', '.join(available_envs(directory))}"
        )
    merged = deep_merge(_read_yaml(directory / "base.yaml"), _read_yaml(env_file))
    for item in overrides or []:
        merged = deep_merge(merged, parse_override(item))
    substituted = substitute_env(merged, os.environ if environ is None else environ, "")
    substituted["env"] = env
    cfg: AppConfig = build_dataclass(AppConfig, substituted, "")
    return cfg


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(path.name, f"not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(path.name, "top level must be a mapping")
    return data


def parse_override(item: str) -> dict[str, Any]:
    """'kafka.request_timeout_s=5' -> {'kafka': {'request_timeout_s': 5}} (value parsed as YAML).

    Keys of a pass-through property map may contain dots ('kafka.client.security.protocol=SSL'): after
    the first two levels, the rest of the key is one property name.
    """
    if "=" not in item:
        raise ConfigError(item, "an override must look like key.path=value")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(key, "empty segment in override key")
    if (
        len(parts) > 2
        and parts[0] in ("kafka", "spark")
        and parts[1] in ("client", "java", "librdkafka", "conf")
    ):
        parts = [parts[0], parts[1], ".".join(parts[2:])]
        value: Any = raw  # pass-through properties stay strings, exactly as typed
    else:
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError as exc:
            raise ConfigError(key, f"cannot parse override value: {exc}") from exc
    out: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        out = {part: out}
    return out


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def substitute_env(value: Any, environ: Mapping[str, str], path: str) -> Any:
    if isinstance(value, Mapping):
        return {k: substitute_env(v, environ, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, environ, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):

        def repl(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            raise ConfigError(path, f"environment variable ${{{name}}} is not set")

        return _ENV_REF.sub(repl, value)
    return value


# --- validation into dataclasses -----------------------------------------------------------------


def build_dataclass(cls: type[Any], data: Any, path: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(path or "<root>", f"expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(where, f"unknown key (known here: {', '.join(sorted(names))})")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = f"{path}.{f.name}" if path else f.name
        if f.name in data:
            kwargs[f.name] = _coerce(hints[f.name], data[f.name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(key, "required key is missing")
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value, key)
    if dataclasses.is_dataclass(tp):
        return build_dataclass(typing.cast(type[Any], tp), value if value is not None else {}, key)
    if origin is dict:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {type(value).__name__}")
        return {str(k): _scalar_str(v, f"{key}.{k}") for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(key, f"expected a list, got {type(value).__name__}")
        (item_tp,) = typing.get_args(tp)
        return [_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, f"expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(key, f"expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(key, f"expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(key, f"expected a string, got {type(value).__name__}")
    if tp is Path:
        if isinstance(value, str) and value:
            return Path(value).expanduser()
        raise ConfigError(key, f"expected a path, got {value!r}")
    raise ConfigError(key, f"unsupported config type {tp}")


def _scalar_str(value: Any, key: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(key, f"expected a scalar property value, got {type(value).__name__}")


# --- redaction -----------------------------------------------------------------------------------


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def redact(value: Any, key: str = "") -> Any:
    """Replace the value of every secret-looking key, at any depth."""
    if isinstance(value, Mapping):
        return {k: (REDACTED if is_secret_key(str(k)) and v not in (None, "") else redact(v, str(k)))
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value
