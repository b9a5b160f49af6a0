"""Which URL GetNodes names for reads (GatewaySettings.read_url_for)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from xnode.gateway.settings import GatewaySettings


def settings(**values: object) -> GatewaySettings:
    return GatewaySettings.model_validate(values)


def test_the_gateway_itself_at_its_bound_address_with_its_scheme() -> None:
    assert settings().read_url_for("127.0.0.1:5040", tls=False) == "http://127.0.0.1:5040"
    assert settings().read_url_for("[::1]:5040", tls=True) == "https://[::1]:5040"


def test_an_address_that_names_no_host_falls_back_to_the_nodes() -> None:
    assert settings().read_url_for("0.0.0.0:5040", tls=False) is None
    assert settings().read_url_for("[::]:5040", tls=False) is None


def test_the_address_of_several_gateways_is_given_as_read_url() -> None:
    given = settings(read_url="https://gateways.example/")
    assert given.read_url_for("0.0.0.0:5040", tls=True) == "https://gateways.example"


def test_reads_through_the_gateway_can_be_turned_off() -> None:
    off = settings(reads_through_gateway=False, read_url="https://gateways.example")
    assert off.read_url_for("127.0.0.1:5040", tls=False) is None


def test_a_read_url_without_a_scheme_is_refused() -> None:
    with pytest.raises(ValidationError, match="expected http://host:port"):
        settings(read_url="gateways.example:5040")
