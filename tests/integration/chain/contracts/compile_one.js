const fs = require("fs"); const path = require("path");
const solc = require(path.join(process.cwd(), "node_modules", "solc"));
const file = process.argv[2]; const name = path.basename(file, ".sol");
const input = {language: "Solidity", sources: {[name + ".sol"]: {content: fs.readFileSync(file, "utf8")}},
  settings: {outputSelection: {"*": {"*": ["abi", "evm.bytecode.object"]}}}};
const out = JSON.parse(solc.compile(JSON.stringify(input)));
for (const e of out.errors || []) if (e.severity === "error") { console.error(e.formattedMessage); process.exit(1); }
const c = out.contracts[name + ".sol"][name];
console.log(JSON.stringify({abi: c.abi, bytecode: c.evm.bytecode.object}));
