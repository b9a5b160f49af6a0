// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {PayloadLog} from "./PayloadLog.sol";

/**
 * @title GroupMessages
 * @notice XIP-49 section 2.2.2: group messages (commits) stored on the app chain. Nodes index
 * MessageSent and store each payload with originator id 0 and the event's sequence id.
 * Access, pausing, upgrades and size limits: see PayloadLog.
 */
contract GroupMessages is PayloadLog {
    /// @notice Emitted for every stored message; sequenceId is 1, 2, 3, ...
    event MessageSent(bytes16 indexed groupId, bytes message, uint64 indexed sequenceId);

    /// @notice Store a group message. Callable by anyone while not paused.
    function addMessage(bytes16 groupId, bytes calldata message) external whenNotPaused {
        emit MessageSent(groupId, message, _nextSequenceId(message.length));
    }

    /// @custom:storage-location erc7201:xnode.storage.GroupMessages
    /// keccak256(abi.encode(uint256(keccak256("xnode.storage.GroupMessages")) - 1)) & ~bytes32(uint256(0xff))
    function _storageLocation() internal pure override returns (bytes32) {
        return 0xc5f127a37a594f99e0c3f29b68ce8a89b16ff99d4ff323d17e2ab50bbabff500;
    }
}
