// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {PayloadLog} from "./PayloadLog.sol";

/**
 * @title IdentityUpdates
 * @notice XIP-49 section 2.2.4: identity updates stored on the app chain. Nodes index
 * IdentityUpdateCreated and store each payload with originator id 1 and the event's sequence id.
 * Access, pausing, upgrades and size limits: see PayloadLog.
 */
contract IdentityUpdates is PayloadLog {
    /// @notice Emitted for every stored identity update; sequenceId is 1, 2, 3, ...
    event IdentityUpdateCreated(bytes32 indexed inboxId, bytes update, uint64 indexed sequenceId);

    /// @notice Store an identity update. Callable by anyone while not paused.
    function addIdentityUpdate(bytes32 inboxId, bytes calldata update) external whenNotPaused {
        emit IdentityUpdateCreated(inboxId, update, _nextSequenceId(update.length));
    }

    /// @custom:storage-location erc7201:xnode.storage.IdentityUpdates
    /// keccak256(abi.encode(uint256(keccak256("xnode.storage.IdentityUpdates")) - 1)) & ~bytes32(uint256(0xff))
    function _storageLocation() internal pure override returns (bytes32) {
        return 0x4f9577c83e879a4381556a3cad6f2a01dc82cf591fedb462373b1cdc60dbb200;
    }
}
