"""Connection failures name the fix; secrets never show up in reprs."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from binlog.mysql.connection import Endpoint
from cdc.app.sandbox.mysql import Sandbox, free_port
from cdc.model.errors import AuthenticationFailed, SourceUnreachable


def test_unreachable_host_names_the_options_to_check() -> None:
    settings = Endpoint("127.0.0.1", free_port(), "cdc", "pw", connect_timeout=2)
    with pytest.raises(SourceUnreachable, match=r"source\.hostname and source\.port") as info:
        settings.connect()
    assert info.value.context["port"] == settings.port


def test_wrong_password_names_the_options_and_hides_the_password(mysql_server: Sandbox) -> None:
    bad = replace(mysql_server.cdc, user="cdc", password="not-the-password")
    with pytest.raises(AuthenticationFailed, match=r"source\.password") as info:
        bad.connect()
    assert "not-the-password" not in str(info.value)
    # Executors pickle exceptions back to the driver.
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is AuthenticationFailed and str(again) == str(info.value)


def test_password_is_not_in_repr(mysql_server: Sandbox) -> None:
    assert mysql_server.cdc.password not in repr(mysql_server.cdc)
    assert mysql_server.cdc.password not in str(mysql_server.cdc)
