#!/usr/bin/env node
// Compile contracts/*.sol with the pinned solcjs (package.json) and write one artifact per
// contract to src/xnode/chain/artifacts/<Name>.json:
//   {"abi", "bytecode", "contractName", "solcVersion", "sourceSha256"}
// sourceSha256 = sha256 of the contents of contracts/*.sol concatenated in sorted file-name
// order (xnode.chain.contracts.sources_sha256 computes the same value). Output is deterministic:
// re-running on the same sources gives byte-identical files.
//
// Usage: node scripts/compile_contracts.js   (after `npm ci`)
"use strict";

const crypto = require("node:crypto");
const fs = require("node:fs");
const path = require("node:path");

const ROOT = path.resolve(__dirname, "..");
const CONTRACTS_DIR = path.join(ROOT, "contracts");
const ARTIFACTS_DIR = path.join(ROOT, "src", "xnode", "chain", "artifacts");
const NODE_MODULES = path.join(ROOT, "node_modules");

// Contracts defined outside contracts/ that still get an artifact (imported by contracts/Proxy.sol).
const EXTRA_EXPORTS = new Set(["ERC1967Proxy"]);

let solc;
try {
  solc = require("solc");
} catch (err) {
  console.error("solc is not installed: run `npm ci` in the repository root first");
  process.exit(1);
}

function sortKeys(value) {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === "object") {
    const out = {};
    for (const key of Object.keys(value).sort()) out[key] = sortKeys(value[key]);
    return out;
  }
  return value;
}

function findImport(importPath) {
  // Only node_modules imports are resolved (sources in contracts/ are all passed in directly).
  const resolved = path.resolve(NODE_MODULES, importPath);
  if (!resolved.startsWith(NODE_MODULES + path.sep)) {
    return { error: `import outside node_modules: ${importPath}` };
  }
  try {
    return { contents: fs.readFileSync(resolved, "utf8") };
  } catch (err) {
    return { error: `not found: ${importPath} (run \`npm ci\`?)` };
  }
}

function main() {
  const files = fs
    .readdirSync(CONTRACTS_DIR)
    .filter((f) => f.endsWith(".sol"))
    .sort();
  if (files.length === 0) throw new Error(`no .sol files in ${CONTRACTS_DIR}`);

  const hash = crypto.createHash("sha256");
  const sources = {};
  for (const file of files) {
    const raw = fs.readFileSync(path.join(CONTRACTS_DIR, file));
    hash.update(raw);
    sources[`contracts/${file}`] = { content: raw.toString("utf8") };
  }
  const sourceSha256 = hash.digest("hex");

  const input = {
    language: "Solidity",
    sources,
    settings: {
      optimizer: { enabled: true, runs: 200 },
      evmVersion: "cancun",
      outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
    },
  };

  let raw = solc.compile(JSON.stringify(input), { import: findImport });
  // solcjs may print a warning line before the JSON document.
  raw = raw.slice(raw.indexOf("{"));
  const output = JSON.parse(raw);

  const errors = (output.errors || []).filter((e) => e.severity === "error");
  for (const e of output.errors || []) console.error(e.formattedMessage || e.message);
  if (errors.length > 0) {
    console.error(`compilation failed with ${errors.length} error(s)`);
    process.exit(1);
  }

  const solcVersion = solc.version();
  const artifacts = new Map();
  for (const sourceName of Object.keys(output.contracts).sort()) {
    const ours = sourceName.startsWith("contracts/");
    for (const [name, contract] of Object.entries(output.contracts[sourceName])) {
      const bytecode = contract.evm.bytecode.object;
      if (!bytecode) continue; // abstract contracts and interfaces
      if (!ours && !EXTRA_EXPORTS.has(name)) continue;
      if (artifacts.has(name)) throw new Error(`duplicate contract name ${name}`);
      artifacts.set(name, {
        contractName: name,
        abi: contract.abi,
        bytecode: `0x${bytecode}`,
        sourceSha256,
        solcVersion,
      });
    }
  }
  for (const name of EXTRA_EXPORTS) {
    if (!artifacts.has(name)) throw new Error(`${name} was not compiled (is it imported in contracts/?)`);
  }

  fs.mkdirSync(ARTIFACTS_DIR, { recursive: true });
  const expected = new Set();
  for (const name of [...artifacts.keys()].sort()) {
    const file = `${name}.json`;
    expected.add(file);
    const text = `${JSON.stringify(sortKeys(artifacts.get(name)), null, 2)}\n`;
    const target = path.join(ARTIFACTS_DIR, file);
    const old = fs.existsSync(target) ? fs.readFileSync(target, "utf8") : null;
    if (old !== text) fs.writeFileSync(target, text);
    console.log(`${old === text ? "unchanged" : "wrote    "} ${path.relative(ROOT, target)}`);
  }
  for (const file of fs.readdirSync(ARTIFACTS_DIR).sort()) {
    if (file.endsWith(".json") && !expected.has(file)) {
      fs.unlinkSync(path.join(ARTIFACTS_DIR, file));
      console.log(`removed   ${path.relative(ROOT, path.join(ARTIFACTS_DIR, file))}`);
    }
  }
  console.log(`solc ${solcVersion}, sourceSha256 ${sourceSha256}`);
}

main();
