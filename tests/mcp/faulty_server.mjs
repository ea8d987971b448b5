#!/usr/bin/env node
// A misbehaving MCP server for the MCP client's failure tests: plain Node, no SDK, speaking the
// 2025-era stdio protocol by hand (one JSON-RPC message per line). It answers initialize
// (protocolVersion 2025-06-18), ping, and a tools/list split over two pages; every other request
// (server/discover among them) gets -32601. Each tool misbehaves in one way; README.md beside
// this file lists them.
//
//   node faulty_server.mjs                  serve
//   node faulty_server.mjs --exit-at-start  write "boom" to stderr, exit 1
//   node faulty_server.mjs --no-answer      read everything, answer nothing (not even initialize)

const args = new Set(process.argv.slice(2));
if (args.has("--exit-at-start")) {
  process.stderr.write("boom\n");
  process.exit(1);
}
const answerNothing = args.has("--no-answer");

const EMPTY_SCHEMA = { type: "object", properties: {} };
const PAGES = [
  [
    ["ok", "Answers ok"],
    ["crash", "Exits with code 3 without answering"],
    ["hang", "Never answers"],
    ["garbage", "Writes 3 non-JSON lines to stdout, then answers"],
    ["huge", "Writes one 50 MB line of x (not JSON), then never answers"],
    ["wrong_id", "Answers with an id never sent, then with the right one"],
  ],
  [
    ["flood", "Sends 20,000 notifications/message, then answers"],
    ["stderr", "Writes to stderr, then answers ok"],
    ["roots", "Asks the client for roots/list and answers with the roots as JSON text"],
    ["elicit", "Asks the client for a name (elicitation/create) and greets it"],
  ],
].map((page) => page.map(([name, description]) => ({ name, description, inputSchema: EMPTY_SCHEMA })));

function send(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

function result(id, value) {
  send({ jsonrpc: "2.0", id, result: value });
}

function error(id, code, message) {
  send({ jsonrpc: "2.0", id, error: { code, message } });
}

function text(id, value, isError = false) {
  result(id, { content: [{ type: "text", text: value }], ...(isError ? { isError: true } : {}) });
}

// Requests this server sent to the client, by id, waiting for the client's response.
const pending = new Map();
let nextServerId = 1;

function ask(method, params, onResponse) {
  const id = `r${nextServerId++}`;
  pending.set(id, onResponse);
  send({ jsonrpc: "2.0", id, method, ...(params ? { params } : {}) });
}

function callTool(id, name) {
  switch (name) {
    case "ok":
      return text(id, "ok");
    case "crash":
      return process.exit(3);
    case "hang":
      return;
    case "garbage":
      process.stdout.write("this is not JSON\n{ neither is this\n<html>nor this</html>\n");
      return text(id, "after garbage");
    case "huge":
      process.stdout.write("x".repeat(50 * 1024 * 1024) + "\n");
      return;
    case "wrong_id":
      text(typeof id === "number" ? id + 1000 : `${id}+1000`, "wrong id");
      return text(id, "right id");
    case "flood": {
      const lines = [];
      for (let i = 1; i <= 20000; ++i) {
        lines.push(
          JSON.stringify({
            jsonrpc: "2.0",
            method: "notifications/message",
            params: { level: "info", logger: "faulty", data: `flood ${i}` },
          }),
        );
      }
      process.stdout.write(lines.join("\n") + "\n");
      return text(id, "after flood");
    }
    case "stderr":
      process.stderr.write("hello from stderr\n");
      return text(id, "ok");
    case "roots":
      return ask("roots/list", undefined, (response) => {
        if (response.error) return text(id, `roots/list failed: ${response.error.message}`, true);
        text(id, JSON.stringify(response.result?.roots ?? null));
      });
    case "elicit":
      return ask(
        "elicitation/create",
        {
          message: "Your name?",
          requestedSchema: { type: "object", properties: { name: { type: "string" } } },
        },
        (response) => {
          if (response.error) return text(id, `elicitation failed: ${response.error.message}`, true);
          const { action, content } = response.result ?? {};
          if (action === "accept") return text(id, `hello ${content?.name}`);
          if (action === "decline") return text(id, "declined");
          if (action === "cancel") return text(id, "cancelled");
          text(id, `unknown action: ${JSON.stringify(action)}`, true);
        },
      );
    default:
      return error(id, -32602, `Unknown tool: ${name}`);
  }
}

function handle(message) {
  if (message === null || typeof message !== "object" || Array.isArray(message)) return;
  const { id, method, params } = message;
  if (method === undefined) {
    // A response to one of this server's requests.
    const onResponse = pending.get(id);
    if (onResponse) {
      pending.delete(id);
      onResponse(message);
    }
    return;
  }
  if (id === undefined) return; // notifications (notifications/initialized among them) are ignored
  switch (method) {
    case "initialize":
      return result(id, {
        protocolVersion: "2025-06-18",
        capabilities: { tools: { listChanged: true } },
        serverInfo: { name: "faulty", version: "1.0.0" },
      });
    case "ping":
      return result(id, {});
    case "tools/list": {
      const cursor = params?.cursor;
      if (cursor === undefined) return result(id, { tools: PAGES[0], nextCursor: "page2" });
      if (cursor === "page2") return result(id, { tools: PAGES[1] });
      return error(id, -32602, `Invalid cursor: ${cursor}`);
    }
    case "tools/call":
      return callTool(id, params?.name);
    default:
      return error(id, -32601, `Method not found: ${method}`);
  }
}

let buffer = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  if (answerNothing) return;
  buffer += chunk;
  let newline;
  while ((newline = buffer.indexOf("\n")) >= 0) {
    const line = buffer.slice(0, newline).replace(/\r$/, "");
    buffer = buffer.slice(newline + 1);
    if (line.trim() === "") continue;
    let message;
    try {
      message = JSON.parse(line);
    } catch {
      process.stderr.write(`faulty: not JSON: ${line.slice(0, 200)}\n`);
      continue;
    }
    handle(message);
  }
});
process.stdin.on("end", () => process.exit(0));
