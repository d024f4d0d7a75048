"""Where delta-rs finds a table and with which storage options: local paths as they are, s3a://
through the s3a properties Spark uses, other object stores as delta-rs names them; and no
credential in what is printed or raised."""

from __future__ import annotations

import pytest
from deltalake.exceptions import DeltaError

from app.config import StorageConfig
from app.errors import InfrastructureError
from app.storage import backend
from app.storage.backend import Location, location_of, s3_options
from tests.support.config import build_config

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-value"
ACCESS = "AKIA-ACCESS-ID"


@pytest.mark.parametrize(
    ("path", "uri"),
    [
        ("data/tables/ledger", "data/tables/ledger"),
        ("/srv/tables/ledger", "/srv/tables/ledger"),
        ("file:///srv/tables/ledger", "/srv/tables/ledger"),
        ("s3a://bucket/tables/ledger", "s3://bucket/tables/ledger"),
        ("s3n://bucket/ledger", "s3://bucket/ledger"),
        ("s3://bucket/ledger", "s3://bucket/ledger"),
        ("abfss://c@acct.dfs.core.windows.net/ledger", "abfss://c@acct.dfs.core.windows.net/ledger"),
        ("gs://bucket/ledger", "gs://bucket/ledger"),
        ("hdfs://nn:8020/ledger", "hdfs://nn:8020/ledger"),
    ],
)
def test_every_storage_is_addressed_by_delta_rs_under_its_own_scheme(path: str, uri: str) -> None:
    assert location_of(path, {"endpoint": "http://127.0.0.1:9000"}).uri == uri


def test_only_s3_tables_take_options_from_the_s3a_properties() -> None:
    props = {"endpoint": "http://127.0.0.1:9000", "access.key": ACCESS}
    assert location_of("s3a://bucket/t", props).options == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": ACCESS,
    }
    for other in ("data/t", "abfss://c@acct.dfs.core.windows.net/t", "hdfs://nn:8020/t"):
        assert location_of(other, props).options == {}


def test_s3a_properties_translate_to_delta_rs_options() -> None:
    props = {
        "endpoint": "http://127.0.0.1:9000",
        "endpoint.region": "eu-west-1",
        "path.style.access": "true",
        "access.key": ACCESS,
        "secret.key": SECRET,
        "session.token": "tok",
        "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "connection.maximum": "96",  # s3a tuning with no delta-rs meaning: left out
    }
    assert s3_options(props, "bucket") == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "eu-west-1",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ACCESS_KEY_ID": ACCESS,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": "tok",
    }


@pytest.mark.parametrize(
    ("ssl", "endpoint", "http"),
    [
        (None, "https://s3.eu-west-1.amazonaws.com", False),
        ("true", "https://minio.internal:9000", False),
        ("false", "http://minio.internal:9000", True),
    ],
)
def test_a_bare_s3a_endpoint_takes_its_scheme_from_the_ssl_setting(
    ssl: str | None, endpoint: str, http: bool
) -> None:
    host = endpoint.split("://", 1)[1]
    props = {"endpoint": host} | ({"connection.ssl.enabled": ssl} if ssl else {})
    options = s3_options(props, "bucket")
    assert options["AWS_ENDPOINT_URL"] == endpoint
    assert options.get("AWS_ALLOW_HTTP") == ("true" if http else None)


def test_per_bucket_s3a_properties_win_for_their_bucket_only() -> None:
    props = {
        "endpoint": "https://s3.amazonaws.com",
        "access.key": "general",
        "bucket.audit.endpoint": "http://127.0.0.1:9000",
        "bucket.audit.access.key": ACCESS,
    }
    assert s3_options(props, "audit")["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert s3_options(props, "audit")["AWS_ACCESS_KEY_ID"] == ACCESS
    assert s3_options(props, "other") == {
        "AWS_ENDPOINT_URL": "https://s3.amazonaws.com",
        "AWS_ACCESS_KEY_ID": "general",
    }


def test_no_s3a_properties_leave_delta_rs_its_own_defaults() -> None:
    # Region, endpoint and credentials then come from delta-rs's AWS chain (environment, profile, IMDS).
    assert s3_options({}, "bucket") == {}


def test_no_storage_settings_for_a_table_on_s3_is_an_infrastructure_error() -> None:
    with pytest.raises(InfrastructureError, match="storage settings"):
        backend.location(None, "s3a://bucket/t")
    assert backend.location(None, "data/t") == Location("data/t")


def test_an_s3a_location_comes_from_the_config_storage_options_without_spark() -> None:
    cfg = build_config(
        "storage.options.fs.s3a.endpoint=127.0.0.1:9000",
        "storage.options.fs.s3a.connection.ssl.enabled=false",
        "storage.options.fs.s3a.path.style.access=true",
        "storage.options.fs.s3a.access.key=${S3_ACCESS}",
        "storage.options.fs.s3a.secret.key=${S3_SECRET}",
        "storage.options.fs.s3a.bucket.audit.endpoint.region=eu-west-1",
        "storage.options.fs.azure.account.key.acct.dfs.core.windows.net=${S3_SECRET}",
        environ={"S3_ACCESS": ACCESS, "S3_SECRET": SECRET},
    )
    # A StorageConfig has no Hadoop configuration to ask: everything comes from the config itself.
    assert backend.location(cfg.storage, "s3a://audit/tables/incidents") == Location(
        "s3://audit/tables/incidents",
        {
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "eu-west-1",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
            "AWS_ACCESS_KEY_ID": ACCESS,
            "AWS_SECRET_ACCESS_KEY": SECRET,
        },
    )
    assert backend.location(StorageConfig(), "s3a://audit/t") == Location("s3://audit/t")  # delta-rs's chain
    assert backend.location(cfg.storage, "data/tables/incidents") == Location("data/tables/incidents")


def test_without_a_running_session_driver_reads_take_the_config_storage_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark import SparkContext

    from app.runtime.session import table_storage

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)  # not under spark-submit
    # An earlier test in this process may have started a context; this one is about a process with none.
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    cfg = build_config("storage.options.fs.s3a.endpoint=http://s3.local")
    assert table_storage(cfg) is cfg.storage
    assert SparkContext._active_spark_context is None  # and no Spark was started for it


def test_a_location_prints_option_names_never_their_values() -> None:
    where = location_of("s3a://b/t", {"access.key": ACCESS, "secret.key": SECRET})
    assert ACCESS not in repr(where)
    assert SECRET not in repr(where)
    assert "AWS_SECRET_ACCESS_KEY" in repr(where)
    assert sorted(where.secrets) == sorted([ACCESS, SECRET])


def test_a_storage_error_naming_a_credential_is_raised_scrubbed_and_unchained() -> None:
    where = location_of("s3a://b/t", {"access.key": ACCESS, "secret.key": SECRET})
    with pytest.raises(InfrastructureError) as raised, backend.storage_errors(where, "open"):
        raise OSError(f"signature mismatch for {ACCESS} with key {SECRET}")
    assert SECRET not in str(raised.value)
    assert ACCESS not in str(raised.value)
    assert "s3://b/t" in str(raised.value)
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__


def test_a_storage_error_without_credentials_keeps_its_cause() -> None:
    where = location_of("s3a://b/t", {"secret.key": SECRET})
    with (
        pytest.raises(
            InfrastructureError, match="cannot merge into the table at s3://b/t: conflict"
        ) as raised,
        backend.storage_errors(where, "merge into"),
    ):
        raise DeltaError("conflict")
    assert isinstance(raised.value.__cause__, DeltaError)


def test_terminal_colours_are_taken_out_of_storage_error_texts() -> None:
    where = location_of("data/t", {})
    with pytest.raises(InfrastructureError) as raised, backend.storage_errors(where, "open"):
        raise OSError("Generic S3 error\n  \x1b[31m↳\x1b[0m 404 Not Found")
    assert str(raised.value) == "cannot open the table at data/t: Generic S3 error\n  ↳ 404 Not Found"
