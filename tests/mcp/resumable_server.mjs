#!/usr/bin/env node
// An MCP server over Streamable HTTP on the v1 SDK (@modelcontextprotocol/sdk 1.32.2) with the
// SDK's resumability turned on (an event store, retry 100 ms): with protocol 2025-11-25 every
// request's SSE answer starts with a priming event (an id, empty data), and the tool `poll` closes
// its request's stream (the SDK's closeSSEStream, SEP-1699) before it answers, so the client must
// come back with GET + Last-Event-ID to get its result. A call of the tool `vanish` is answered
// here, before the SDK sees it, with an event stream that ends at once: no event, no id, nothing
// to resume. Logs to stderr what the client did.
//
//   node resumable_server.mjs PORT    127.0.0.1:PORT/mcp; "listening on PORT" when ready (0: any)
import http from "node:http";
import { randomUUID } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { InMemoryEventStore } from "@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js";
import * as z from "zod";

const port = Number(process.argv[2] ?? 0);
const sessions = new Map(); // Mcp-Session-Id -> transport

function createServer() {
  const server = new McpServer({ name: "resumable", version: "1.0.0" });
  server.registerTool(
    "poll",
    { description: "Closes its SSE stream, then answers after 300 ms", inputSchema: { word: z.string() } },
    async ({ word }, extra) => {
      if (extra.closeSSEStream) {
        extra.closeSSEStream();
        process.stderr.write("closed the stream of a poll call\n");
      } else {
        process.stderr.write("poll called without closeSSEStream\n");
      }
      await new Promise((r) => setTimeout(r, 300));
      return { content: [{ type: "text", text: `polled ${word}` }] };
    },
  );
  server.registerTool("vanish", { description: "Its answer's stream ends empty" }, async () => ({
    content: [{ type: "text", text: "never sent" }],
  }));
  return server;
}

async function readJson(req) {
  let text = "";
  for await (const chunk of req) text += chunk;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

const httpServer = http.createServer(async (req, res) => {
  if (!req.url.startsWith("/mcp")) {
    res.writeHead(404).end();
    return;
  }
  const lastEventId = req.headers["last-event-id"];
  if (req.method === "GET" && lastEventId) process.stderr.write(`resumed after ${lastEventId}\n`);
  const id = req.headers["mcp-session-id"];
  let transport = id ? sessions.get(id) : undefined;
  if (!transport) {
    if (req.method !== "POST" || id) {
      res.writeHead(id ? 404 : 400, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message: "no such session" }, id: null }));
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: new InMemoryEventStore(),
      retryInterval: 100,
      onsessioninitialized: (sid) => sessions.set(sid, transport),
    });
    transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
    await createServer().connect(transport);
  }
  const body = req.method === "POST" ? await readJson(req) : undefined;
  if (body?.method === "tools/call" && body.params?.name === "vanish") {
    process.stderr.write("ended the stream of a vanish call\n");
    res.writeHead(200, { "content-type": "text/event-stream" }).end();
    return;
  }
  await transport.handleRequest(req, res, body);
});

httpServer.listen(port, "127.0.0.1", () => {
  process.stderr.write(`listening on ${httpServer.address().port}\n`);
});
