// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Initializable} from "@openzeppelin/contracts-upgradeable/proxy/utils/Initializable.sol";
import {AccessControlUpgradeable} from "@openzeppelin/contracts-upgradeable/access/AccessControlUpgradeable.sol";
import {PausableUpgradeable} from "@openzeppelin/contracts-upgradeable/utils/PausableUpgradeable.sol";
import {UUPSUpgradeable} from "@openzeppelin/contracts-upgradeable/proxy/utils/UUPSUpgradeable.sol";

/**
 * @title IdentityUpdates
 * @notice XIP-49 section 2.2.4: identity updates stored on the app chain. Nodes index
 * IdentityUpdateCreated and store each payload with originator id 1 and the event's sequence id.
 *
 * Deployed behind an ERC1967Proxy (UUPS). Anyone may add an identity update while the contract is not
 * paused (nodes publish on behalf of clients); DEFAULT_ADMIN_ROLE may pause, unpause, upgrade and
 * manage roles.
 *
 * Sequence ids are counted by this contract alone, start at 1 and grow by 1 per update. The
 * counter lives in ERC-7201 namespaced storage so upgrades keep it.
 *
 * Payload size: MIN_PAYLOAD_SIZE = 1 byte (an empty payload is never a valid envelope) to
 * MAX_PAYLOAD_SIZE = 256 KiB, enforced with InvalidPayloadSize. 256 KiB is well above any
 * single MLS commit or identity update we expect, and a maximum-size update still fits the
 * chain: about 10.5M gas, under the 2**24 per-transaction gas cap of Osaka-and-later chains
 * (EIP-7825) and a 30M block gas limit. A 1 MiB payload could not be included there at all
 * (EIP-7623 calldata floor cost alone is ~42M gas for non-zero bytes), so a larger bound
 * would be a dead letter.
 */
contract IdentityUpdates is Initializable, AccessControlUpgradeable, PausableUpgradeable, UUPSUpgradeable {
    uint256 public constant MIN_PAYLOAD_SIZE = 1;
    uint256 public constant MAX_PAYLOAD_SIZE = 256 * 1024;

    /// @notice Emitted for every stored identity update; sequenceId is 1, 2, 3, ...
    event IdentityUpdateCreated(bytes32 indexed inboxId, bytes update, uint64 indexed sequenceId);

    /// @notice Emitted when DEFAULT_ADMIN_ROLE authorizes an upgrade.
    event UpgradeAuthorized(address upgrader, address newImplementation);

    error ZeroAdminAddress();
    error InvalidPayloadSize(uint256 actualSize, uint256 minSize, uint256 maxSize);

    /// @custom:storage-location erc7201:xnode.storage.IdentityUpdates
    struct IdentityUpdatesStorage {
        uint64 sequenceId;
    }

    // keccak256(abi.encode(uint256(keccak256("xnode.storage.IdentityUpdates")) - 1)) & ~bytes32(uint256(0xff))
    bytes32 private constant _STORAGE_LOCATION =
        0x4f9577c83e879a4381556a3cad6f2a01dc82cf591fedb462373b1cdc60dbb200;

    /// @custom:oz-upgrades-unsafe-allow constructor
    constructor() {
        _disableInitializers();
    }

    /// @notice Initialize the proxy: `admin` gets DEFAULT_ADMIN_ROLE.
    function initialize(address admin) external initializer {
        if (admin == address(0)) revert ZeroAdminAddress();
        __AccessControl_init();
        __Pausable_init();
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
    }

    /// @notice Store an identity update. Callable by anyone while not paused.
    function addIdentityUpdate(bytes32 inboxId, bytes calldata update) external whenNotPaused {
        if (update.length < MIN_PAYLOAD_SIZE || update.length > MAX_PAYLOAD_SIZE) {
            revert InvalidPayloadSize(update.length, MIN_PAYLOAD_SIZE, MAX_PAYLOAD_SIZE);
        }
        IdentityUpdatesStorage storage $ = _getStorage();
        uint64 sequenceId = ++$.sequenceId;
        emit IdentityUpdateCreated(inboxId, update, sequenceId);
    }

    /// @notice The sequence id of the most recent update (0 before the first one).
    function lastSequenceId() external view returns (uint64) {
        return _getStorage().sequenceId;
    }

    function pause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _pause();
    }

    function unpause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unpause();
    }

    function _authorizeUpgrade(address newImplementation) internal override onlyRole(DEFAULT_ADMIN_ROLE) {
        emit UpgradeAuthorized(_msgSender(), newImplementation);
    }

    function _getStorage() private pure returns (IdentityUpdatesStorage storage $) {
        assembly {
            $.slot := _STORAGE_LOCATION
        }
    }
}
