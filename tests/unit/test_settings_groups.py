"""Settings in groups: the groups the node and the gateway share are declared once, and every
environment name stays flat (`XNODE_` or `XNODE_GATEWAY_` and the field's name)."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from xnode.config import NODE_GROUPS, ChainGroup, RegistryGroup, Settings, settings_table
from xnode.gateway.settings import GatewaySettings, gateway_settings_table


def test_every_setting_is_in_one_group_of_the_table() -> None:
    listed = re.findall(r"^\| `XNODE_(\w+)` ", settings_table(), re.M)
    assert sorted(listed) == sorted(name.upper() for name in Settings.model_fields)
    assert "### other" not in settings_table()  # a field of no group would be listed there
    assert [title for title, _ in NODE_GROUPS][:1] == ["node"]


def test_the_gateway_table_lists_every_gateway_setting_once() -> None:
    listed = re.findall(r"^\| `XNODE_GATEWAY_(\w+)` ", gateway_settings_table(), re.M)
    assert sorted(listed) == sorted(name.upper() for name in GatewaySettings.model_fields)


def test_shared_groups_read_flat_names_under_each_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XNODE_CHAIN_RPC_URL", "http://node-chain:8545")
    monkeypatch.setenv("XNODE_REGISTRY_SOURCE", "file")
    monkeypatch.setenv("XNODE_GATEWAY_CHAIN_RPC_URL", "http://gateway-chain:8545")
    monkeypatch.setenv("XNODE_GATEWAY_SHUTDOWN_GRACE_SECONDS", "3")
    monkeypatch.setenv("XNODE_GATEWAY_TLS_KEY_FILE", "/gateway.key")
    node, gateway = Settings(), GatewaySettings()
    assert (node.chain_rpc_url, node.registry_source) == ("http://node-chain:8545", "file")
    assert gateway.chain_rpc_url == "http://gateway-chain:8545"
    assert gateway.registry_source == "auto"  # the node's variable is not the gateway's
    assert gateway.shutdown_grace_seconds == 3.0 and str(gateway.tls_key_file) == "/gateway.key"
    assert isinstance(gateway, RegistryGroup) and isinstance(node, RegistryGroup)


def test_the_gateway_declares_no_field_of_a_shared_group_again_but_its_poll_default() -> None:
    own = set(GatewaySettings.__annotations__)
    shared = {
        name
        for group in GatewaySettings.__mro__
        if group not in (GatewaySettings,) and hasattr(group, "__annotations__")
        for name in getattr(group, "model_fields", {})
    }
    assert own & shared == {"chain_poll_seconds"}
    assert GatewaySettings.model_fields["chain_poll_seconds"].default == 1.0
    assert ChainGroup.model_fields["chain_poll_seconds"].default == 0.5


def test_trusted_proxies_are_read_by_node_and_gateway_and_a_bad_entry_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XNODE_TRUSTED_PROXIES", "10.0.0.0/8, 2001:db8::1")
    monkeypatch.setenv("XNODE_GATEWAY_TRUSTED_PROXIES", "192.0.2.0/24")
    assert Settings().proxies_trusted().trusts("10.9.8.7")
    assert Settings().proxies_trusted().trusts("2001:db8::1")
    assert not Settings().proxies_trusted().trusts("192.0.2.1")
    assert GatewaySettings().proxies_trusted().trusts("192.0.2.1")
    with pytest.raises(
        ValidationError, match=re.escape("'10.0.0.1/8' is not an address or a CIDR")
    ):
        Settings(trusted_proxies="10.0.0.1/8")
