// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ERC721} from "@openzeppelin/contracts/token/ERC721/ERC721.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";

/**
 * @title NodeRegistry
 * @notice XIP-49 node registry (sections 2.2.1 and 3.1.1). Every node is an ERC721 token whose
 * token id is the node id: 100, 200, 300, ...
 *
 * Per node the registry stores:
 *  - signingKeyPub: secp256k1 public key, uncompressed, 65 bytes `0x04 || X || Y`.
 *    Immutable and unique across all nodes; it must be a point on the curve.
 *  - httpAddress: the node's entry point. Immutable (XIP-49 3.1.1: routing changes are done by
 *    adding a new node and disabling the old one).
 *  - enabled: the only mutable field; only the contract owner may change it.
 *
 * Only the contract owner may add nodes, change their status and move node NFTs; holders can
 * neither transfer their NFT nor change any node data (approvals they grant have no effect).
 *
 * Every state change emits an event: NodeAdded (plus ERC721 Transfer from address(0)) when a
 * node is added, NodeStatusChanged on every status call (even when the value is unchanged), and
 * ERC721 Transfer when the owner moves a node NFT.
 */
contract NodeRegistry is ERC721, Ownable {
    /// @notice Node ids are multiples of this increment; the first node is 100.
    uint32 public constant NODE_INCREMENT = 100;

    /// @dev secp256k1 field prime.
    uint256 private constant _SECP256K1_P =
        0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEFFFFFC2F;

    struct Node {
        bytes signingKeyPub;
        string httpAddress;
        bool enabled;
    }

    /// @notice View type returned by allNodes() and getNode().
    struct NodeInfo {
        uint32 nodeId;
        bytes signingKeyPub;
        string httpAddress;
        bool enabled;
    }

    event NodeAdded(uint32 indexed nodeId, address indexed owner, bytes signingKeyPub, string httpAddress);
    event NodeStatusChanged(uint32 indexed nodeId, bool enabled);

    error InvalidSigningKey();
    error DuplicateSigningKey();
    error EmptyHttpAddress();
    error TooManyNodes();
    error TransferNotAllowed(address caller);

    /// @dev Number of nodes ever added; node ids are NODE_INCREMENT * (1..count).
    uint32 private _nodeCount;
    mapping(uint256 nodeId => Node) private _nodes;
    mapping(bytes32 keyHash => bool) private _signingKeyUsed;

    constructor() ERC721("XMTP Node Operator", "XMTP") Ownable(msg.sender) {}

    /**
     * @notice Mint a node NFT to `to` and store the node's immutable data. Owner only.
     * @return nodeId The new node's id (100, 200, 300, ...).
     */
    function addNode(address to, bytes calldata signingKeyPub, string calldata httpAddress)
        external
        onlyOwner
        returns (uint32 nodeId)
    {
        _requireValidSigningKey(signingKeyPub);
        bytes32 keyHash = keccak256(signingKeyPub);
        if (_signingKeyUsed[keyHash]) revert DuplicateSigningKey();
        if (bytes(httpAddress).length == 0) revert EmptyHttpAddress();
        if (_nodeCount >= type(uint32).max / NODE_INCREMENT) revert TooManyNodes();

        _nodeCount++;
        nodeId = _nodeCount * NODE_INCREMENT;
        _signingKeyUsed[keyHash] = true;
        _nodes[nodeId] = Node(signingKeyPub, httpAddress, true);
        _mint(to, nodeId);
        emit NodeAdded(nodeId, to, signingKeyPub, httpAddress);
    }

    /// @notice Enable or disable a node. Owner only. Emits NodeStatusChanged on every call.
    function setNodeStatus(uint256 nodeId, bool enabled) public onlyOwner {
        _requireOwned(nodeId);
        _nodes[nodeId].enabled = enabled;
        // nodeId < 2**32: every minted id fits in uint32.
        emit NodeStatusChanged(uint32(nodeId), enabled);
    }

    /// @notice Alias of setNodeStatus, named as in the XIP-49 prototype.
    function updateHealth(uint256 nodeId, bool enabled) external {
        setNodeStatus(nodeId, enabled);
    }

    /// @notice Number of nodes ever added (none are ever removed).
    function nodeCount() external view returns (uint32) {
        return _nodeCount;
    }

    /// @notice All nodes, enabled or not, in node id order.
    function allNodes() external view returns (NodeInfo[] memory nodes) {
        nodes = new NodeInfo[](_nodeCount);
        for (uint32 i = 0; i < _nodeCount; i++) {
            nodes[i] = _nodeInfo((i + 1) * NODE_INCREMENT);
        }
    }

    /// @notice One node by id; reverts with ERC721NonexistentToken for unknown ids.
    function getNode(uint256 nodeId) external view returns (NodeInfo memory) {
        _requireOwned(nodeId);
        return _nodeInfo(uint32(nodeId));
    }

    /**
     * @dev Only the contract owner may move node NFTs, and it needs no approval from the holder.
     * Mints (auth == address(0)) come only from addNode, which is owner-gated.
     */
    function _update(address to, uint256 tokenId, address auth) internal override returns (address) {
        if (auth != address(0)) {
            if (auth != owner()) revert TransferNotAllowed(auth);
            auth = address(0);
        }
        return super._update(to, tokenId, auth);
    }

    function _nodeInfo(uint32 nodeId) private view returns (NodeInfo memory) {
        Node storage node = _nodes[nodeId];
        return NodeInfo(nodeId, node.signingKeyPub, node.httpAddress, node.enabled);
    }

    /// @dev 65 bytes, 0x04 prefix, coordinates in the field and on the curve y^2 = x^3 + 7.
    function _requireValidSigningKey(bytes calldata key) private pure {
        if (key.length != 65 || key[0] != 0x04) revert InvalidSigningKey();
        uint256 x = uint256(bytes32(key[1:33]));
        uint256 y = uint256(bytes32(key[33:65]));
        if (x >= _SECP256K1_P || y >= _SECP256K1_P) revert InvalidSigningKey();
        uint256 lhs = mulmod(y, y, _SECP256K1_P);
        uint256 rhs = addmod(mulmod(mulmod(x, x, _SECP256K1_P), x, _SECP256K1_P), 7, _SECP256K1_P);
        if (lhs != rhs) revert InvalidSigningKey();
    }
}
