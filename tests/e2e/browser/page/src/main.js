// A page on @xmtp/browser-sdk: creates a client through xnode's gRPC-web (node and gateway
// from the query string), then shows the texts of every group it is in, refreshed.
import { Client, createEOASigner } from "@xmtp/browser-sdk";

const show = (id, text) => {
  document.getElementById(id).textContent = text;
};

async function main() {
  const query = new URLSearchParams(location.search);
  const client = await Client.create(createEOASigner(query.get("key")), {
    apiUrl: query.get("node"),
    gatewayHost: query.get("gateway"),
    dbPath: null,
    appVersion: "xnode-browser-e2e/1",
  });
  show("inbox", client.inboxId);
  show("status", "connected");
  for (;;) {
    await client.conversations.syncAll();
    const lines = [];
    for (const group of await client.conversations.listGroups()) {
      await group.sync();
      for (const message of await group.messages()) {
        if (typeof message.content === "string") lines.push(message.content);
      }
    }
    show("messages", lines.join("\n"));
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

main().catch((error) => {
  console.error(error);
  show("status", `error: ${error?.message ?? error}`);
});
