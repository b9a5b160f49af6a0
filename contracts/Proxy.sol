// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

// Compiled only so that scripts/compile_contracts.js emits an ERC1967Proxy artifact; the UUPS
// contracts (GroupMessages, IdentityUpdates) are deployed behind it.
import {ERC1967Proxy} from "@openzeppelin/contracts/proxy/ERC1967/ERC1967Proxy.sol";
