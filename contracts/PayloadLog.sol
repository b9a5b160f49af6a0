// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Initializable} from "@openzeppelin/contracts-upgradeable/proxy/utils/Initializable.sol";
import {AccessControlUpgradeable} from "@openzeppelin/contracts-upgradeable/access/AccessControlUpgradeable.sol";
import {PausableUpgradeable} from "@openzeppelin/contracts-upgradeable/utils/PausableUpgradeable.sol";
import {UUPSUpgradeable} from "@openzeppelin/contracts-upgradeable/proxy/utils/UUPSUpgradeable.sol";

/**
 * @title PayloadLog
 * @notice What GroupMessages and IdentityUpdates share (XIP-49 2.2.2, 2.2.4): an ordered log of
 * payloads whose sequence ids the contract counts itself, pausable, role-guarded and
 * upgradeable (UUPS, behind an ERC1967Proxy). Anyone may add a payload while the contract is not
 * paused (nodes publish on behalf of clients); DEFAULT_ADMIN_ROLE may pause, unpause, upgrade and
 * manage roles.
 *
 * Sequence ids start at 1 and grow by 1 per payload. Each contract keeps its counter in its own
 * ERC-7201 namespace (`_storageLocation`), so upgrades keep it.
 *
 * Payload size: MIN_PAYLOAD_SIZE = 1 byte (an empty payload is never a valid envelope) to
 * MAX_PAYLOAD_SIZE = 256 KiB, enforced with InvalidPayloadSize. 256 KiB is well above any
 * single MLS commit or identity update we expect, and a maximum-size payload still fits the
 * chain: about 10.5M gas, under the 2**24 per-transaction gas cap of Osaka-and-later chains
 * (EIP-7825) and a 30M block gas limit. A 1 MiB payload could not be included there at all
 * (EIP-7623 calldata floor cost alone is ~42M gas for non-zero bytes), so a larger bound
 * would be a dead letter.
 */
abstract contract PayloadLog is Initializable, AccessControlUpgradeable, PausableUpgradeable, UUPSUpgradeable {
    uint256 public constant MIN_PAYLOAD_SIZE = 1;
    uint256 public constant MAX_PAYLOAD_SIZE = 256 * 1024;

    /// @notice Emitted when DEFAULT_ADMIN_ROLE authorizes an upgrade.
    event UpgradeAuthorized(address upgrader, address newImplementation);

    error ZeroAdminAddress();
    error InvalidPayloadSize(uint256 actualSize, uint256 minSize, uint256 maxSize);

    struct PayloadLogStorage {
        uint64 sequenceId;
    }

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

    /// @notice The sequence id of the most recent payload (0 before the first one).
    function lastSequenceId() external view returns (uint64) {
        return _getStorage().sequenceId;
    }

    function pause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _pause();
    }

    function unpause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unpause();
    }

    /// @dev Checks the payload's size and takes the next sequence id for it.
    function _nextSequenceId(uint256 payloadSize) internal returns (uint64) {
        if (payloadSize < MIN_PAYLOAD_SIZE || payloadSize > MAX_PAYLOAD_SIZE) {
            revert InvalidPayloadSize(payloadSize, MIN_PAYLOAD_SIZE, MAX_PAYLOAD_SIZE);
        }
        return ++_getStorage().sequenceId;
    }

    /// @dev The ERC-7201 slot of this contract's PayloadLogStorage.
    function _storageLocation() internal pure virtual returns (bytes32);

    function _authorizeUpgrade(address newImplementation) internal override onlyRole(DEFAULT_ADMIN_ROLE) {
        emit UpgradeAuthorized(_msgSender(), newImplementation);
    }

    function _getStorage() private pure returns (PayloadLogStorage storage $) {
        bytes32 location = _storageLocation();
        assembly {
            $.slot := location
        }
    }
}
