"""The `storage` config section: Hadoop filesystem properties for tables on object storage, with
secrets from the environment that never leave the process in clear."""

from __future__ import annotations

import json

import pytest

from app.config import load_config
from app.errors import ConfigError

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-value"
ACCESS = "AKIA-ACCESS-ID"


def test_storage_options_take_dotted_keys_and_env_secrets_which_every_printed_form_redacts() -> None:
    cfg = load_config(
        "local",
        overrides=[
            "storage.options.fs.s3a.endpoint=http://127.0.0.1:9000",
            "storage.options.fs.s3a.access.key=${S3_ACCESS}",
            "storage.options.fs.s3a.secret.key=${S3_SECRET}",
            "storage.options.fs.azure.account.key.acct.dfs.core.windows.net=${S3_SECRET}",
        ],
        environ={"S3_ACCESS": ACCESS, "S3_SECRET": SECRET},
    )

    assert cfg.storage.options == {
        "fs.s3a.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.access.key": ACCESS,
        "fs.s3a.secret.key": SECRET,
        "fs.azure.account.key.acct.dfs.core.windows.net": SECRET,
    }
    for printed in (json.dumps(cfg.to_display()), repr(cfg.storage), repr(cfg)):
        assert SECRET not in printed
        assert ACCESS not in printed
    assert cfg.to_display()["storage"]["options"]["fs.s3a.endpoint"] == "http://127.0.0.1:9000"


def test_storage_options_reject_what_is_not_a_hadoop_filesystem_property() -> None:
    with pytest.raises(ConfigError, match=r"storage\.options\.endpoint"):
        load_config("local", overrides=["storage.options.endpoint=http://x"], environ={})


def test_no_storage_options_by_default() -> None:
    assert load_config("local", environ={}).storage.options == {}
