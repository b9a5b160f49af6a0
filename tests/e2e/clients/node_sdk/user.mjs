// Users of the official Node SDK (@xmtp/node-sdk), one Client each in this one process (a
// container costs seconds to start), driven by the test (tests/e2e/clients/node_sdk_user.py)
// over HTTP on 127.0.0.1:$XNODE_NODE_SDK_PORT (the container is on the host network): each
// POST carries one JSON message naming its user and is answered with the next JSON answer;
// commands run one at a time. The accounts' keys stay with the test: to sign, this side
// answers {"sign": text} and the next POST carries {"signature": hex}. GET answers once
// listening.
import { createServer } from "node:http";
import { AuthHandle, BackendBuilder } from "@xmtp/node-bindings"; // the SDK's own dependency
import { Client } from "@xmtp/node-sdk";

const waiting = []; // the main loop waiting for a message
const queued = []; // messages not yet taken
const replies = []; // POSTs waiting for their answer

function received(message) {
  const next = waiting.shift();
  if (next) next(message);
  else queued.push(message);
}

function nextLine() {
  if (queued.length) return Promise.resolve(queued.shift());
  return new Promise((resolve) => waiting.push(resolve));
}

function answer(value) {
  const reply = replies.shift();
  if (!reply) throw new Error(`an answer with no request waiting: ${JSON.stringify(value)}`);
  reply.setHeader("content-type", "application/json");
  reply.end(JSON.stringify(value));
}

createServer((request, reply) => {
  if (request.method !== "POST") return reply.end("listening");
  let body = "";
  request.setEncoding("utf8");
  request.on("data", (chunk) => (body += chunk));
  request.on("end", () => {
    replies.push(reply);
    received(body);
  });
}).listen(Number(process.env.XNODE_NODE_SDK_PORT), "127.0.0.1");

const ETHEREUM = 0; // IdentifierKind.Ethereum (a const enum: not exported at run time)
const identifier = (address) => ({ identifier: address.toLowerCase(), identifierKind: ETHEREUM });

// Each user's client and live stream: the stream's text messages with when each arrived (ms
// since the epoch: the container shares the host's clock), and whatever it reported going
// wrong.
const users = new Map();

function userNamed(name) {
  const user = users.get(name);
  if (!user) throw new Error(`no user ${name}: create it first`);
  return user;
}

// The group as an application keeps it: found locally, synced from the network only when new.
async function conversation({ client }, groupId) {
  const known = await client.conversations.getConversationById(groupId);
  if (known) return known;
  await client.conversations.sync();
  const found = await client.conversations.getConversationById(groupId);
  if (!found) throw new Error(`no conversation ${groupId}`);
  return found;
}

// The network options with the gateway's API key (or JWT), sent as `authorization: Bearer
// ...` with the PayerApi calls (publishes): Client.create's network options have no place
// for one.
async function backendWithKey(apiUrl, gatewayHost, apiKey) {
  const auth = new AuthHandle();
  await auth.set({ value: `Bearer ${apiKey}`, expiresAtSeconds: 2 ** 62 });
  const builder = new BackendBuilder("Local")
    .setApiUrl(apiUrl)
    .setGatewayHost(gatewayHost)
    .setAppVersion("xnode-e2e-node/1");
  builder.authHandle(auth);
  return await builder.build();
}

const commands = {
  async create({ user: name, apiUrl, gatewayHost, apiKey, address, dbPath }) {
    if (users.has(name)) throw new Error(`user ${name} exists`);
    const signer = {
      type: "EOA",
      getIdentifier: () => identifier(address),
      signMessage: async (text) => {
        answer({ sign: text });
        const { signature } = JSON.parse(await nextLine());
        return Uint8Array.from(Buffer.from(signature, "hex"));
      },
    };
    const network = apiKey
      ? { backend: await backendWithKey(apiUrl, gatewayHost, apiKey) }
      : { env: "local", apiUrl, gatewayHost, appVersion: "xnode-e2e-node/1" };
    const client = await Client.create(signer, {
      ...network,
      dbPath,
      disableDeviceSync: true,
      loggingLevel: "Warn", // the library's warnings, in the container's log a failure shows
    });    users.set(name, { client, streamed: [], trouble: [] });
    console.log(`user ${name}: inbox ${client.inboxId}`); // the SDK's log lines name inboxes
    return { inboxId: client.inboxId, version: process.version };
  },
  async find({ user, address }) {
    const { client } = userNamed(user);
    return { inboxId: await client.fetchInboxIdByIdentifier(identifier(address)) };
  },
  async createGroup({ user, inboxIds }) {
    const { client } = userNamed(user);
    const group = await client.conversations.createGroup(inboxIds, { groupName: "node sdk" });
    return { groupId: group.id };
  },
  async send({ user, groupId, text }) {
    const group = await conversation(userNamed(user), groupId);
    return { messageId: await group.sendText(text) };
  },
  async stream({ user }) {
    const { client, streamed, trouble } = userNamed(user);
    // The SDK's own retry stays on (its default): the test asserts it was never needed.
    await client.conversations.streamAllMessages({
      onValue: (m) => {
        if (m.contentType?.typeId === "text") streamed.push({ text: m.content, at: Date.now() });
      },
      onError: (error) => trouble.push(`error: ${error?.stack ?? error}`),
      onFail: () => trouble.push("failed"),
      onRetry: (attempt) => trouble.push(`retry ${attempt}`),
      onRestart: () => trouble.push("restarted"),
    });
    return {};
  },
  async streamed({ user }) {
    const { streamed, trouble } = userNamed(user);
    return { messages: streamed, trouble };
  },
  async read({ user, groupId }) {
    const group = await conversation(userNamed(user), groupId);
    await group.sync();
    const messages = await group.messages();
    const texts = messages
      .filter((m) => m.contentType?.typeId === "text" && typeof m.content === "string")
      .map((m) => m.content);
    return { texts };
  },
};

for (;;) {
  const command = JSON.parse(await nextLine());
  try {
    const handler = commands[command.op];
    if (!handler) throw new Error(`unknown command ${command.op}`);
    answer({ ok: true, ...(await handler(command)) });
  } catch (error) {
    answer({ ok: false, error: String(error?.stack ?? error) });
  }
}
